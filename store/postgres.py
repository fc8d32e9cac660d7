"""PostgresStore: job records in one PostgreSQL schema through psycopg 3, fenced by a lease.

Layout (in the schema given by --pg-schema, so several clusters can share one database):
`meta` (the schema version), `jobs` (real columns an operator can query beside the encoded
body), `records` (crons, queue settings...) and `lease` (one row: who may write).

Every commit is ONE statement, a call of the schema's `commit_pass` function, so a pass's
rows reach the server in one round trip (as arrays) and run in one transaction. The function
first locks the lease row and checks that its epoch is still this store's: a broker that lost
the lease can never write again (LeaseLost), whatever it was doing when it lost it.

Leadership uses the database's clock (`now()`) only. A taker bumps the epoch; a holder renews
before the expiry. The broker's sessions carry server-side idle-in-transaction and lock
timeouts, so a broker paused in the middle of a transaction cannot block a takeover for long.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Collection, Iterator
from typing import Any, NamedTuple

import psycopg
from psycopg import conninfo, sql

from .base import JobRow, LeaseLost, Record, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")  # and not pg_..., which PostgreSQL reserves
LEASE_LOST = "TQ001"  # the SQLSTATE commit_pass raises when the epoch is not the caller's
SCAN_BATCH = 2000
CONNECT_TIMEOUT_S = 5

# {s} is the quoted schema name. Times are timestamptz (readable in SQL); the engine's are
# milliseconds since the epoch, converted on the way in.
CREATE = """
CREATE TABLE IF NOT EXISTS {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.jobs (
    id         text PRIMARY KEY,
    queue      text NOT NULL,
    state      text NOT NULL,
    priority   double precision NOT NULL,
    run_at     timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    attempts   integer NOT NULL,
    body       bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_queue_state ON {s}.jobs (queue, state);
CREATE TABLE IF NOT EXISTS {s}.records (
    kind text NOT NULL,
    key  text NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS {s}.lease (
    id         integer PRIMARY KEY CHECK (id = 1),
    epoch      bigint NOT NULL,
    holder     text,
    address    text,
    expires_at timestamptz NOT NULL
);
INSERT INTO {s}.lease VALUES (1, 0, NULL, NULL, 'epoch') ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION {s}.commit_pass(
    p_epoch bigint, p_sync boolean,
    ids text[], queues text[], states text[], priorities float8[], run_ats float8[],
    created_ats float8[], attempts integer[], bodies bytea[],
    deleted text[],
    r_kinds text[], r_keys text[], r_bodies bytea[],
    d_kinds text[], d_keys text[]
) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    -- FOR SHARE: a takeover (which updates the row) waits for this transaction or, if it
    -- came first, this re-reads the row it wrote and finds another epoch.
    PERFORM 1 FROM {s}.lease WHERE id = 1 AND epoch = p_epoch FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease lost: epoch % is no longer current', p_epoch
            USING ERRCODE = 'TQ001';
    END IF;
    IF NOT p_sync THEN  -- as SQLite's synchronous=NORMAL: no wait for the WAL flush
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF cardinality(ids) > 0 THEN
        INSERT INTO {s}.jobs AS j (id, queue, state, priority, run_at, created_at, attempts, body)
        SELECT i, q, st, p, to_timestamp(ra / 1000.0), to_timestamp(ca / 1000.0), a, b
        FROM unnest(ids, queues, states, priorities, run_ats, created_ats, attempts, bodies)
            AS u(i, q, st, p, ra, ca, a, b)
        ON CONFLICT (id) DO UPDATE SET
            queue = excluded.queue, state = excluded.state, priority = excluded.priority,
            run_at = excluded.run_at, created_at = excluded.created_at,
            attempts = excluded.attempts, body = excluded.body;
    END IF;
    IF cardinality(deleted) > 0 THEN
        DELETE FROM {s}.jobs WHERE id = ANY(deleted);
    END IF;
    IF cardinality(r_kinds) > 0 THEN
        INSERT INTO {s}.records AS r (kind, key, body)
        SELECT * FROM unnest(r_kinds, r_keys, r_bodies)
        ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body;
    END IF;
    IF cardinality(d_kinds) > 0 THEN
        DELETE FROM {s}.records r USING unnest(d_kinds, d_keys) AS d(kind, key)
        WHERE r.kind = d.kind AND r.key = d.key;
    END IF;
END
$fn$;
"""

# Binary parameters (%b): in text format psycopg hex-escapes every bytea of the body array,
# measured 1.1 ms of a 100-row commit's 1.8 ms round trip; in binary the whole array took 86 us.
COMMIT = """
SELECT {s}.commit_pass(%b::bigint, %b::boolean,
    %b::text[], %b::text[], %b::text[], %b::float8[], %b::float8[], %b::float8[], %b::int4[],
    %b::bytea[], %b::text[], %b::text[], %b::text[], %b::bytea[], %b::text[], %b::text[])
"""
# Keyset pages in autocommit, not one cursor in a long transaction: a restore of a million jobs
# would hold that transaction open for a minute, meet idle_in_transaction_session_timeout at the
# first long pause (a GC), and make a lease renewal sent meanwhile keep the lease row locked.
# The lease holder is the only writer, so the pages see stable data.
SELECT_JOBS = "SELECT id, queue, state, body FROM {s}.jobs WHERE id > %s ORDER BY id LIMIT %s"
SELECT_BODIES = "SELECT id, body FROM {s}.jobs WHERE id > %s ORDER BY id LIMIT %s"
SELECT_RECORDS = "SELECT kind, key, body FROM {s}.records"
# `gone`: a live holder the taker proved gone (broker/node/identity.py), compared in the same
# statement, so that the lease is taken from that holder only, never from one that took it since.
TAKE_LEASE = """
UPDATE {s}.lease SET epoch = epoch + 1, holder = %(holder)s, address = %(address)s,
    expires_at = now() + make_interval(secs => %(ttl)s)
WHERE id = 1 AND (expires_at <= now() OR holder IS NULL OR holder = %(gone)s)
RETURNING epoch
"""
# clock_timestamp(), not now(): a renewal sent while a long scan's transaction is open (the
# restore after a takeover) must count from the moment it runs, not from the scan's start.
RENEW_LEASE = """
UPDATE {s}.lease SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE id = 1 AND epoch = %(epoch)s
RETURNING epoch
"""
RELEASE_LEASE = """
UPDATE {s}.lease SET holder = NULL, expires_at = now() WHERE id = 1 AND epoch = %(epoch)s
"""
READ_LEASE = """
SELECT epoch, holder, address, extract(epoch FROM expires_at - now())::float8
FROM {s}.lease WHERE id = 1
"""


class Lease(NamedTuple):
    """The lease row as the database sees it now."""

    epoch: int
    holder: str | None
    address: str | None
    expires_in_s: float
    """Seconds until it expires by the database's clock (negative: expired)."""


URL_FORM = "postgresql://user@host:port/db"


def _check_url(url: str) -> None:
    """Raise StoreError, saying what a URL looks like, when libpq cannot read `url`
    (a URL, or libpq's `key=value` form)."""
    try:
        conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise _bad_url(exc) from None


def _bad_url(exc: psycopg.ProgrammingError) -> StoreError:
    reason = _first_line(exc)
    # libpq reads what is not a URL as `key=value` pairs and complains of a missing "=",
    # which says nothing to someone who meant a URL: then only the form is shown.
    if reason.startswith('missing "="'):
        return StoreError(f"--postgres: not a PostgreSQL URL (write {URL_FORM})")
    return StoreError(f"--postgres: not a PostgreSQL URL (write {URL_FORM}): {reason}")


class PostgresStore:
    """The PostgreSQL backend of the Store interface, with a fencing lease.

    A store writes only while it holds the lease: `acquire_lease` first, `renew_lease` every
    third of the TTL. Its own session settings make the server end a transaction left idle
    for a third of the TTL and make lock waits give up after half of it.
    """

    commit_in_thread = False
    """Whether the engine commits on a worker thread, pipelined with its next pass
    (`--pg-commit-thread`). Off by default: measured on a quiet 2-core machine with PostgreSQL
    on loopback, committing on the loop was faster on every row but PULLB+ACKB (pipelined /
    on the loop: 0.87x PUSH 16x8, 0.91x PULL+ACK, 0.95x producers+workers, 1.08x PULLB+ACKB,
    0.44x sequential PUSH, which loses the inline pass); under heavy load (12-17 on 2 cores)
    the pipelined commit won 1.07-1.42x (EngineActor._serve_pipelined). A database further
    away than loopback makes the round trip, and so the overlap, worth more."""

    def __init__(self, url: str, schema: str, *, lease_ttl_s: float, advertise: str) -> None:
        if not SCHEMA_NAME.match(schema) or schema.startswith("pg_"):
            raise StoreError(
                f"--pg-schema {schema!r}: a schema name is 1 to 63 characters of a-z, 0-9 "
                "and _, and does not start with a digit or pg_"
            )
        if lease_ttl_s <= 0:
            raise StoreError(f"--lease-ttl-s must be positive, not {lease_ttl_s}")
        _check_url(url)
        self.url = url
        self.schema = schema
        self.lease_ttl_s = lease_ttl_s
        self.advertise = advertise
        self.holder = secrets.token_hex(8)
        """This store's broker as the lease row names it (the role loop sets its identity)."""
        self.epoch: int | None = None  # the epoch of the lease held, None when none is
        self._fenced = False
        self._sql = self._statements()
        self._conn: psycopg.Connection[Any] | None = None
        self._connect()
        self._migrate()

    def _statements(self) -> dict[str, sql.Composed]:
        quoted = sql.Identifier(self.schema)
        texts = {
            "commit": COMMIT, "jobs": SELECT_JOBS, "bodies": SELECT_BODIES,
            "records": SELECT_RECORDS,
            "take": TAKE_LEASE, "renew": RENEW_LEASE, "release": RELEASE_LEASE,
            "read": READ_LEASE, "create": CREATE,
        }  # fmt: skip
        # The texts carry %s placeholders for psycopg, so only {s} is substituted here.
        return {name: sql.SQL(text.replace("{s}", "{}")).format(*[quoted] * text.count("{s}"))
                for name, text in texts.items()}  # fmt: skip

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        ttl_ms = int(self.lease_ttl_s * 1000)
        options = (
            f"-c idle_in_transaction_session_timeout={max(ttl_ms // 3, 1)} "
            f"-c lock_timeout={max(ttl_ms // 2, 1)} -c application_name=trioq"
        )
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, options=options
            )
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {_first_line(exc)}") from None
        except psycopg.ProgrammingError as exc:  # a malformed URL (checked before, too)
            raise _bad_url(exc) from None
        self._conn = conn
        return conn

    def _connection(self) -> psycopg.Connection[Any]:
        """The live connection, reconnecting when the last one broke."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            conn = self._connect()
        return conn

    def _fail(self, exc: psycopg.Error) -> StoreError:
        """The StoreError for a psycopg failure: unavailable when the connection broke."""
        conn = self._conn
        if isinstance(exc, psycopg.errors.LockNotAvailable):  # the connection is fine
            return StoreUnavailable(f"timed out waiting for the lease row of {self.schema}")
        if isinstance(exc, psycopg.OperationalError) or conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()  # reconnect on the next call
            return StoreUnavailable(f"PostgreSQL connection failed: {_first_line(exc)}")
        if exc.sqlstate == LEASE_LOST:
            return self._lost("another broker took the lease over")
        return StoreError(f"PostgreSQL schema {self.schema}: {_first_line(exc)}")

    def _lost(self, why: str) -> LeaseLost:
        self.epoch = None
        self._fenced = True
        return LeaseLost(f"schema {self.schema}: {why}; this broker must not write")

    def _migrate(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            with conn.transaction():
                # Two brokers starting at once on a new schema create it one after the other.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [self.schema])
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                version = self._stored_version(conn)
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"PostgreSQL schema {self.schema} was written by a newer trioq (schema "
                        f"{version}; this one understands up to {SCHEMA_VERSION}); upgrade "
                        "trioq or use another --pg-schema"
                    )
                if version < SCHEMA_VERSION:
                    conn.execute(self._sql["create"])
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {}.meta VALUES ('schema_version', %s) "
                            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                        ).format(sql.Identifier(self.schema)),
                        [str(SCHEMA_VERSION)],
                    )
        except psycopg.Error as exc:
            error = self._fail(exc)  # before closing: a closed connection reads as an outage
            conn.close()
            raise error from None
        except StoreError:
            conn.close()
            raise

    def _stored_version(self, conn: psycopg.Connection[Any]) -> int:
        exists = conn.execute("SELECT to_regclass(%s)", [f'"{self.schema}".meta']).fetchone()
        if exists is None or exists[0] is None:
            return 0
        found = conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
                sql.Identifier(self.schema)
            )
        ).fetchone()
        return int(found[0]) if found else 0

    # -- the lease ----------------------------------------------------------------------------

    def acquire_lease(self, gone: str | None = None) -> bool:
        """Take the lease if it is free or expired (by the database's clock), or still held by
        `gone`, a holder the caller proved gone; True when this store now holds it under a new
        epoch. A lock wait that times out counts as not taken."""
        if self.epoch is not None:
            return True
        params = {
            "holder": self.holder, "address": self.advertise, "ttl": self.lease_ttl_s,
            "gone": gone,
        }  # fmt: skip
        try:
            taken = self._connection().execute(self._sql["take"], params).fetchone()
        except psycopg.errors.LockNotAvailable:
            return False
        except psycopg.Error as exc:
            raise self._fail(exc) from None
        if taken is None:
            return False
        self.epoch = int(taken[0])
        self._fenced = False
        return True

    def renew_lease(self) -> None:
        """Push the lease's expiry one TTL past the database's now; raises LeaseLost when
        another store took it, StoreUnavailable when the database cannot be reached."""
        if self.epoch is None:
            raise self._lost("this store holds no lease")
        params = {"epoch": self.epoch, "ttl": self.lease_ttl_s}
        try:
            renewed = self._connection().execute(self._sql["renew"], params).fetchone()
        except psycopg.Error as exc:
            raise self._fail(exc) from None
        if renewed is None:
            raise self._lost("another broker took the lease over")

    def release_lease(self) -> None:
        """Give the lease up at once (a clean stop), so a successor need not wait the TTL."""
        if self.epoch is None:
            return
        try:
            self._connection().execute(self._sql["release"], {"epoch": self.epoch})
        except (psycopg.Error, StoreError) as exc:
            reason = _first_line(exc)
            log.warning("could not release the lease of schema %s: %s", self.schema, reason)
        self.epoch = None

    def lease(self) -> Lease:
        """The lease row now (who holds it, where, until when)."""
        try:
            row = self._connection().execute(self._sql["read"]).fetchone()
        except psycopg.Error as exc:
            raise self._fail(exc) from None
        assert row is not None
        return Lease(int(row[0]), row[1], row[2], float(row[3]))

    # -- the Store interface ------------------------------------------------------------------

    def load(self) -> list[JobRow]:
        """Every stored job."""
        return list(self.scan_jobs())

    def scan_jobs(self) -> Iterator[JobRow]:
        """Every stored job, in pages of SCAN_BATCH rows by id, no transaction held between
        pages (the caller may pause between rows, and renew the lease meanwhile). The rows come
        in binary: in text every body is hex-escaped on the wire and decoded back (measured on
        100,000 jobs: 0.86 s for the scan in binary against 1.2 s in text)."""
        for page in self._pages("jobs"):
            for job_id, queue, state, body in page:
                yield JobRow(job_id, queue, state, bytes(body))

    def scan_bodies(self) -> Iterator[bytes]:
        """The body of every stored job, in pages as `scan_jobs`."""
        for page in self._pages("bodies"):
            for _, body in page:
                yield bytes(body)

    def _pages(self, statement: str) -> Iterator[list[Any]]:
        """The rows of a keyset-paged statement (id first), SCAN_BATCH at a time."""
        last = ""
        while True:
            try:
                conn = self._connection()
                page = conn.execute(
                    self._sql[statement], [last, SCAN_BATCH], binary=True
                ).fetchall()
            except psycopg.Error as exc:
                raise self._fail(exc) from None
            yield page
            if len(page) < SCAN_BATCH:
                return
            last = page[-1][0]

    def load_records(self) -> list[Record]:
        """Every stored record."""
        try:
            rows = self._connection().execute(self._sql["records"]).fetchall()
        except psycopg.Error as exc:
            raise self._fail(exc) from None
        return [Record(kind, key, bytes(body)) for kind, key, body in rows]

    def commit(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        *,
        sync: bool,
        records: Collection[Record] = (),
        record_deletes: Collection[tuple[str, str]] = (),
    ) -> None:
        """Write and delete in one transaction, in one round trip, if this store still holds
        the lease; raises LeaseLost, StoreUnavailable or StoreError.

        With `sync` the server flushes its WAL before answering (synchronous_commit as the
        server sets it, on by default): the commit survives a crash of the database server or
        its machine. Without it, synchronous_commit is off for this transaction, as SQLite's
        synchronous=NORMAL: committed once the server has it, so it survives a crash of the
        broker, but a crash of the database may lose the last fraction of a second."""
        if self.epoch is None:
            raise self._lost("this store holds no lease" if not self._fenced else "fenced")
        params = [self.epoch, sync, *_job_columns(upserts), list(deletes)]
        params += _record_columns(records)
        params += [[kind for kind, _ in record_deletes], [key for _, key in record_deletes]]
        try:
            self._connection().execute(self._sql["commit"], params, prepare=True)
        except psycopg.Error as exc:
            raise self._fail(exc) from None

    def tidy(self) -> None:
        """Nothing to tidy (the server checkpoints by itself)."""

    def close(self) -> None:
        """Release the lease (if held) and close the connection."""
        if self._conn is not None and not self._conn.closed:
            self.release_lease()
            self._conn.close()


def _job_columns(upserts: Collection[JobRow]) -> list[list[Any]]:
    """The jobs as the eight parallel arrays commit_pass takes. The last row of an id wins (as
    INSERT OR REPLACE would do: PostgreSQL refuses to upsert one key twice in a statement)."""
    rows = {row.id: row for row in upserts}.values()
    return [
        [row.id for row in rows],
        [row.queue for row in rows],
        [row.state for row in rows],
        [float(row.priority) for row in rows],
        [float(row.run_at) for row in rows],
        [float(row.created_at) for row in rows],
        [int(row.attempts) for row in rows],
        [row.body for row in rows],
    ]


def _record_columns(records: Collection[Record]) -> list[list[Any]]:
    unique = {(r.kind, r.key): r for r in records}.values()
    return [list(column) for column in zip(*unique, strict=True)] if unique else [[]] * 3


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
