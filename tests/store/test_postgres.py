"""What only the PostgreSQL store does: its schema, its SQL columns, the fencing lease, and
database outages. Each test has its own schema on the session's private server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import trio

from broker.node.ha import StepDown, keep_lease
from store import JobRow, LeaseLost, StoreError, StoreUnavailable, open_postgres
from store.postgres import CONNECT_TIMEOUT_S, SCHEMA_VERSION, PostgresStore, _first_line
from tests.support.postgres import PrivateServer

SHORT_TTL_S = 0.5  # the lease's TTL in takeover tests (the database's clock decides expiry)
WAIT_S = 20.0  # bound on real waits on a loaded machine


@pytest.fixture
def stores(postgres_server: PrivateServer, pg_schema: str) -> Iterator[list[PostgresStore]]:
    """Open stores here to have them closed at teardown."""
    opened: list[PostgresStore] = []
    yield opened
    for store in opened:
        store.close()


@pytest.fixture
def sql(postgres_server: PrivateServer) -> Iterator[psycopg.Connection]:
    """An operator's own connection to the database."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


def open_store(
    server: PrivateServer, schema: str, stores: list[PostgresStore], **options: object
) -> PostgresStore:
    store = open_postgres(server.url, schema, **options)  # type: ignore[arg-type]
    stores.append(store)
    return store


def job(job_id: str, **columns: object) -> JobRow:
    return JobRow(job_id, "q", "waiting", b"\x80")._replace(**columns)


def acquire_within(store: PostgresStore, timeout_s: float = WAIT_S) -> bool:
    """Try to take the lease until it is taken or `timeout_s` real seconds passed."""
    deadline = time.monotonic() + timeout_s
    while not store.acquire_lease():
        if time.monotonic() > deadline:
            return False
        time.sleep(SHORT_TTL_S / 10)  # poll interval: expiry is decided by the database clock
    return True


def stored_ids(sql: psycopg.Connection, schema: str) -> list[str]:
    return [r[0] for r in sql.execute(f"SELECT id FROM {schema}.jobs ORDER BY id").fetchall()]


def test_jobs_have_columns_an_operator_can_query(postgres_server, pg_schema, stores, sql) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    row = job("j1", priority=5, run_at=1_800_000_060_000.0, created_at=1_800_000_000_000.0,
              attempts=2)  # fmt: skip
    store.commit([row, job("j2", state="delayed")], [], sync=False)
    found = sql.execute(
        f"SELECT id, queue, state, priority, extract(epoch FROM run_at - created_at), attempts "
        f"FROM {pg_schema}.jobs WHERE priority > 1"
    ).fetchall()
    assert found == [("j1", "q", "waiting", 5.0, 60, 2)]
    assert sorted(r.id for r in store.load()) == ["j1", "j2"]


def test_the_schema_is_created_once_with_its_version(
    postgres_server, pg_schema, stores, sql
) -> None:
    open_store(postgres_server, pg_schema, stores)
    open_store(postgres_server, pg_schema, stores)  # a second open finds it and keeps it
    version = sql.execute(f"SELECT value FROM {pg_schema}.meta WHERE key = 'schema_version'")
    assert version.fetchall() == [(str(SCHEMA_VERSION),)]


def test_a_newer_schema_is_refused_in_one_line(postgres_server, pg_schema, stores, sql) -> None:
    open_store(postgres_server, pg_schema, stores)
    sql.execute(f"UPDATE {pg_schema}.meta SET value = '{SCHEMA_VERSION + 1}'")
    with pytest.raises(StoreError, match="newer trioq") as refused:
        open_postgres(postgres_server.url, pg_schema)
    assert "\n" not in str(refused.value)


def test_two_schemas_in_one_database_are_independent(postgres_server, pg_schema, stores) -> None:
    first = open_store(postgres_server, pg_schema, stores)
    second = open_store(postgres_server, pg_schema + "_other", stores)
    assert first.acquire_lease() and second.acquire_lease()  # one lease per schema
    first.commit([job("a")], [], sync=False)
    assert second.load() == []


def test_an_invalid_schema_name_is_refused(postgres_server) -> None:
    with pytest.raises(StoreError, match="--pg-schema"):
        open_postgres(postgres_server.url, "Robert'); DROP TABLE")


def test_an_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
        open_postgres("postgresql://trioq@127.0.0.1:1/postgres")


def test_a_store_without_the_lease_cannot_write(postgres_server, pg_schema, stores, sql) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.lease().holder is None  # a new schema's lease is free
    with pytest.raises(LeaseLost):
        store.commit([job("a")], [], sync=False)
    assert stored_ids(sql, pg_schema) == []


def test_a_live_lease_is_not_taken_and_names_its_holder(postgres_server, pg_schema, stores) -> None:
    first = open_store(postgres_server, pg_schema, stores, advertise="10.0.0.1:6789")
    second = open_store(postgres_server, pg_schema, stores)
    assert first.acquire_lease()
    assert not second.acquire_lease()
    lease = second.lease()
    assert (lease.epoch, lease.holder, lease.address) == (first.epoch, first.holder,
                                                          "10.0.0.1:6789")  # fmt: skip
    assert lease.expires_in_s > 0


def test_a_takeover_after_the_ttl_fences_the_old_holder(
    postgres_server, pg_schema, stores, sql
) -> None:
    old = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    new = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert old.acquire_lease()
    old.commit([job("before")], [], sync=False)
    old_epoch = old.epoch
    assert acquire_within(new)  # once the old lease expired by the database's clock
    assert new.epoch == old_epoch + 1  # type: ignore[operator]
    with pytest.raises(LeaseLost):
        old.commit([job("after")], ["before"], sync=False)
    with pytest.raises(LeaseLost):
        old.renew_lease()
    with pytest.raises(LeaseLost):  # fenced for good: it does not take the lease back silently
        old.commit([job("after")], [], sync=False)
    assert stored_ids(sql, pg_schema) == ["before"]
    new.commit([job("new")], [], sync=False)
    assert stored_ids(sql, pg_schema) == ["before", "new"]


def test_renewing_keeps_the_lease(postgres_server, pg_schema, stores) -> None:
    holder = open_store(postgres_server, pg_schema, stores, lease_ttl_s=2.0)
    other = open_store(postgres_server, pg_schema, stores, lease_ttl_s=2.0)
    assert holder.acquire_lease()
    for _ in range(3):
        holder.renew_lease()
        assert holder.lease().expires_in_s > 1.0  # renewed to a full TTL from the db's now
        assert not other.acquire_lease()
    holder.commit([job("a")], [], sync=False)


def test_a_holder_paused_inside_a_transaction_does_not_block_a_takeover(
    postgres_server, pg_schema, stores, sql
) -> None:
    old = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    new = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert old.acquire_lease()
    # The old holder is paused midway through a commit: its transaction holds the lease row's
    # lock and has written a row, and it sends nothing more.
    paused = old._connection()
    paused.execute("BEGIN")
    paused.execute(f"SELECT 1 FROM {pg_schema}.lease FOR SHARE")
    paused.execute(f"INSERT INTO {pg_schema}.jobs VALUES ('ghost', 'q', 'waiting', 0, now(), "
                   "now(), 0, '')")  # fmt: skip
    assert acquire_within(new)  # the server ended the idle transaction, releasing the lock
    assert stored_ids(sql, pg_schema) == []  # and rolled its write back
    with pytest.raises(StoreError):  # whether it notices the lost connection or the epoch
        old.commit([job("late")], [], sync=False)
    with pytest.raises(LeaseLost):  # reconnected: the epoch check fences it
        old.commit([job("late")], [], sync=False)
    assert stored_ids(sql, pg_schema) == []


def test_a_commit_that_waits_too_long_for_the_lease_row_can_be_retried(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert store.acquire_lease()
    with sql.transaction():  # someone holds the lease row (as a takeover in progress would)
        sql.execute(f"SELECT 1 FROM {pg_schema}.lease FOR UPDATE")
        with pytest.raises(StoreUnavailable, match="lease row"):
            store.commit([job("a")], [], sync=False)
    store.commit([job("a")], [], sync=False)  # the lock went away: the retry goes through
    assert stored_ids(sql, pg_schema) == ["a"]


def test_a_database_restart_is_survived_by_reconnecting(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("a")], [], sync=False)
    sql.close()
    postgres_server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            store.commit([job("b")], [], sync=False)
        with pytest.raises(StoreUnavailable):
            store.renew_lease()
    finally:
        postgres_server.start()
    store.commit([job("b")], [], sync=False)  # the same pass, retried, on a new connection
    store.renew_lease()
    assert sorted(r.id for r in store.load()) == ["a", "b"]


def test_sync_commits_survive_a_database_crash(postgres_server, pg_schema, stores) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("a"), job("b")], [], sync=True)
    postgres_server.kill()
    postgres_server.start()
    with pytest.raises(StoreUnavailable):  # the old connection died with the server
        store.commit([job("c")], ["a"], sync=False)
    store.commit([job("c")], ["a"], sync=True)
    assert sorted(r.id for r in store.load()) == ["b", "c"]


def test_a_plain_commit_turns_the_wal_flush_off_for_itself_only(
    postgres_server, pg_schema, stores
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("plain")], [], sync=False)
    setting = store._connection().execute("SHOW synchronous_commit").fetchone()
    assert setting == ("on",)  # the next sync commit waits for the flush again


async def test_the_broker_stops_when_its_lease_is_taken(
    postgres_server, pg_schema, stores, sql, autojump_clock
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    await keep_lease_for(store, renewals=3)  # renewing quietly while it holds the lease
    sql.execute(f"UPDATE {pg_schema}.lease SET epoch = epoch + 1, holder = 'another'")
    with pytest.raises(LeaseLost):
        await keep_lease_for(store, renewals=1)


async def test_the_broker_steps_down_after_a_ttl_without_reaching_the_database(
    postgres_server, pg_schema, stores, autojump_clock, caplog
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=3.0)
    assert store.acquire_lease()
    postgres_server.stop()
    try:
        with pytest.raises(StepDown, match="no lease renewal for 3 s"):
            await keep_lease(store)
        assert trio.current_time() >= 3.0  # it kept trying for a whole TTL first
    finally:
        postgres_server.start()
    outage_logs = [r for r in caplog.records if "cannot renew" in r.getMessage()]
    assert len(outage_logs) == 1  # once per outage, with its cause
    assert "connect" in outage_logs[0].getMessage()


def test_a_renewal_inside_a_long_transaction_counts_from_when_it_runs(
    postgres_server, pg_schema, stores
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=5.0)
    assert store.acquire_lease()
    conn = store._connection()
    with conn.transaction():  # as the restore's scan holds one open while the keeper renews
        conn.execute("SELECT pg_sleep(0.01)")
        store.renew_lease()
        later = conn.execute(
            f"SELECT expires_at > now() + interval '5 s' FROM {pg_schema}.lease"
        ).fetchone()
    assert later == (True,)  # not the transaction's start + TTL


def test_a_scan_holds_no_transaction_open_between_its_pages(
    postgres_server, pg_schema, stores, monkeypatch
) -> None:
    monkeypatch.setattr("store.postgres.SCAN_BATCH", 3)
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    ids = ["0", "A", "Z", "_", "a", "j01", "j02", "z", "z0", "zz"]  # before and after "X..."
    store.commit([job(job_id) for job_id in ids], [], sync=False)
    seen = []
    for row in store.scan_jobs():  # a restore pauses here, and the lease keeper renews
        status = store._connection().info.transaction_status
        assert status == psycopg.pq.TransactionStatus.IDLE, status
        seen.append(row.id)
    assert sorted(seen) == sorted(ids)  # each once (in the database's collation order)


async def keep_lease_for(store: PostgresStore, renewals: int) -> None:
    """Run the broker's lease keeper for `renewals` renewal periods (plus a little)."""
    with trio.move_on_after(store.lease_ttl_s / 3 * (renewals + 0.5)):
        await keep_lease(store)


# -- what mutation testing showed no test pinned down (`make mutation`) ------------------------


def lease_lost_text(schema: str, why: str) -> str:
    return f"schema {schema}: {why}; this broker must not write"


def test_a_lease_lost_error_says_why(postgres_server, pg_schema, stores) -> None:
    first = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    second = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    third = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    for attempt in (lambda: first.commit([job("a")], [], sync=False), first.renew_lease):
        with pytest.raises(LeaseLost) as never_held:
            attempt()
        assert str(never_held.value) == lease_lost_text(pg_schema, "this store holds no lease")
    assert first.acquire_lease()
    assert acquire_within(second)  # after first's lease expired
    with pytest.raises(LeaseLost) as renewal_refused:
        first.renew_lease()
    assert str(renewal_refused.value) == lease_lost_text(
        pg_schema, "another broker took the lease over"
    )
    assert acquire_within(third)  # after second's lease expired
    with pytest.raises(LeaseLost) as commit_refused:  # the database's epoch check
        second.commit([job("a")], [], sync=False)
    assert str(commit_refused.value) == lease_lost_text(
        pg_schema, "another broker took the lease over"
    )
    for fenced in (first, second):
        with pytest.raises(LeaseLost) as refused_again:
            fenced.commit([job("a")], [], sync=False)
        assert str(refused_again.value) == lease_lost_text(pg_schema, "fenced")
    third.release_lease()
    assert first.acquire_lease()  # a fenced store may take a free lease anew
    first.release_lease()
    with pytest.raises(LeaseLost) as released:
        first.commit([job("a")], [], sync=False)
    assert str(released.value) == lease_lost_text(pg_schema, "this store holds no lease")


def test_a_clean_stop_frees_the_lease_for_a_successor_at_once(
    postgres_server, pg_schema, stores
) -> None:
    leaving = open_postgres(postgres_server.url, pg_schema)  # a 10 s TTL
    successor = open_store(postgres_server, pg_schema, stores)
    assert leaving.acquire_lease()
    assert leaving.lease().address == ""  # no --advertise
    leaving.close()
    assert successor.acquire_lease()
    assert successor.lease().holder == successor.holder


def test_releasing_a_lease_held_no_longer_is_not_an_error(postgres_server, pg_schema, stores):
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.release_lease()
    store.release_lease()  # nothing held: nothing to do
    with pytest.raises(LeaseLost):
        store.commit([job("a")], [], sync=False)


def test_a_takeover_that_waits_too_long_for_the_lease_row_counts_as_not_taken(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    with sql.transaction():  # another broker's takeover holds the row past the lock timeout
        sql.execute(f"SELECT 1 FROM {pg_schema}.lease FOR UPDATE")
        assert not store.acquire_lease()
    with pytest.raises(LeaseLost):
        store.commit([job("a")], [], sync=False)
    assert store.acquire_lease()


def test_a_damaged_schema_is_a_store_error_naming_the_schema_and_the_cause(
    postgres_server, pg_schema, stores, sql, caplog
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    newcomer = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    for table in ("jobs", "records", "lease"):
        sql.execute(f"DROP TABLE {pg_schema}.{table}")  # an operator's mistake
    attempts = {
        "jobs": [store.load, lambda: list(store.scan_jobs())],
        "records": [store.load_records],
        "lease": [store.lease, store.renew_lease, newcomer.acquire_lease,
                  lambda: store.commit([job("a")], [], sync=False)],
    }  # fmt: skip
    for table, operations in attempts.items():
        for operation in operations:
            with pytest.raises(StoreError) as failed:
                operation()
            assert type(failed.value) is StoreError  # not an outage: retrying will not help
            assert str(failed.value) == (
                f'PostgreSQL schema {pg_schema}: relation "{pg_schema}.{table}" does not exist'
            )
    store.release_lease()  # a clean stop goes on, saying why the lease stays
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f'could not release the lease of schema {pg_schema}: relation "{pg_schema}.lease" does '
        "not exist"  # one line: not the statement the server quotes after it
    ]
    with pytest.raises(LeaseLost):
        store.commit([job("a")], [], sync=False)


def test_a_schema_with_a_foreign_meta_table_is_refused_with_the_cause(
    postgres_server, pg_schema, sql
) -> None:
    sql.execute(f"CREATE SCHEMA {pg_schema}")
    sql.execute(f"CREATE TABLE {pg_schema}.meta (key text)")  # not trioq's
    with pytest.raises(StoreError) as refused:
        open_postgres(postgres_server.url, pg_schema)
    assert str(refused.value) == f'PostgreSQL schema {pg_schema}: column "value" does not exist'


def test_a_schema_prepared_with_an_empty_meta_table_is_completed(
    postgres_server, pg_schema, stores, sql
) -> None:
    sql.execute(f"CREATE SCHEMA {pg_schema}")
    sql.execute(f"CREATE TABLE {pg_schema}.meta (key text PRIMARY KEY, value text NOT NULL)")
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("a")], [], sync=False)
    assert stored_ids(sql, pg_schema) == ["a"]
    version = sql.execute(f"SELECT value FROM {pg_schema}.meta").fetchall()
    assert version == [(str(SCHEMA_VERSION),)]


def test_a_newer_schema_is_refused_saying_what_to_do(postgres_server, pg_schema, stores, sql):
    open_store(postgres_server, pg_schema, stores)
    sql.execute(f"UPDATE {pg_schema}.meta SET value = '{SCHEMA_VERSION + 1}'")
    with pytest.raises(StoreError) as refused:
        open_postgres(postgres_server.url, pg_schema)
    assert str(refused.value) == (
        f"PostgreSQL schema {pg_schema} was written by a newer trioq (schema "
        f"{SCHEMA_VERSION + 1}; this one understands up to {SCHEMA_VERSION}); upgrade trioq or "
        "use another --pg-schema"
    )


def test_bad_settings_are_refused_before_connecting() -> None:
    nowhere = "postgresql://trioq@127.0.0.1:1/postgres"
    with pytest.raises(StoreError) as bad_schema:
        open_postgres(nowhere, "Bad-Name")
    assert str(bad_schema.value) == (
        "--pg-schema 'Bad-Name': a schema name is 1 to 63 characters of a-z, 0-9 and _, and "
        "does not start with a digit or pg_"
    )
    for allowed in ("_x", "a" * 63, "q_2"):  # refused on the way to the database, not before
        with pytest.raises(StoreUnavailable):
            open_postgres(nowhere, allowed)
    for refused in ("2fast", "a" * 64, "pg_jobs", "", "über"):
        with pytest.raises(StoreError, match="a schema name is") as bad:
            open_postgres(nowhere, refused)
        assert not isinstance(bad.value, StoreUnavailable)
    for ttl in (0, -1.5):
        with pytest.raises(StoreError) as bad_ttl:
            open_postgres(nowhere, "trioq", lease_ttl_s=ttl)
        assert str(bad_ttl.value) == f"--lease-ttl-s must be positive, not {ttl}"


def test_connection_failures_say_what_failed() -> None:
    with pytest.raises(StoreUnavailable) as refused:
        open_postgres("postgresql://trioq@127.0.0.1:1/postgres")
    assert str(refused.value).startswith("cannot connect to PostgreSQL: connection failed:")
    assert "Connection refused" in str(refused.value)
    with pytest.raises(StoreError) as malformed:
        open_postgres("nonsense here")
    assert str(malformed.value) == (
        "--postgres: not a PostgreSQL URL (write postgresql://user@host:port/db)"
    )


def test_a_database_that_never_answers_fails_the_connect_within_seconds() -> None:
    with socket.socket() as silent:  # accepts the connection, then says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
            open_postgres(f"postgresql://trioq@127.0.0.1:{silent.getsockname()[1]}/postgres")
    assert time.monotonic() - started < 4 * CONNECT_TIMEOUT_S


def test_the_session_limits_idle_transactions_and_lock_waits_by_the_ttl(
    postgres_server, pg_schema, stores
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=10.0)
    session = store._connection()
    shown = [session.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
             for name in ("idle_in_transaction_session_timeout", "lock_timeout",
                          "application_name")]  # fmt: skip
    assert shown == ["3333ms", "5s", "trioq"]  # a third and half of the TTL


def test_the_store_keeps_one_session_between_calls(postgres_server, pg_schema, stores, sql):
    store = open_store(postgres_server, pg_schema, stores)

    def sessions() -> list[tuple[int]]:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = 'trioq'"
        return sql.execute(query).fetchall()

    assert store.acquire_lease()
    before = sessions()
    store.commit([job("a")], [], sync=False)
    store.renew_lease()
    assert store.load() and store.load_records() == [] and store.lease().holder == store.holder
    assert sessions() == before and len(before) == 1


def test_a_cancelled_statement_is_an_outage_and_the_next_call_reconnects(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    failures: list[BaseException] = []

    def commit() -> None:
        try:
            store.commit([job("a")], [], sync=False)
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)

    with sql.transaction():
        sql.execute(f"SELECT 1 FROM {pg_schema}.lease FOR UPDATE")
        committing = threading.Thread(target=commit)
        committing.start()
        deadline = time.monotonic() + WAIT_S
        waiting: list[tuple[int]] = []
        while not waiting and time.monotonic() < deadline:  # until the commit waits for the row
            waiting = sql.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'trioq' "
                "AND wait_event_type = 'Lock'"
            ).fetchall()
        assert waiting, "the commit never waited for the lease row"
        sql.execute("SELECT pg_cancel_backend(%s)", waiting[0])  # an operator's cancel
        committing.join(WAIT_S)
    assert [type(exc) for exc in failures] == [StoreUnavailable]
    assert str(failures[0]) == (
        "PostgreSQL connection failed: canceling statement due to user request"
    )
    store.commit([job("a")], [], sync=False)  # on a new session
    assert stored_ids(sql, pg_schema) == ["a"]
    sessions = sql.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'trioq'")
    assert sessions.fetchall() != waiting


def test_an_error_without_text_is_named_by_its_type() -> None:
    # What the operator reads after "PostgreSQL connection failed: " and the like.
    assert _first_line(psycopg.OperationalError()) == "OperationalError"
    assert _first_line(psycopg.OperationalError(" \n")) == "OperationalError"
    assert _first_line(psycopg.OperationalError("\n lost\nLINE 1: ...")) == "lost"


def test_open_postgres_defaults_to_the_trioq_schema_a_10_s_lease_and_commits_on_the_loop(
    postgres_server, sql
) -> None:
    store = open_postgres(postgres_server.url)
    try:
        assert (store.schema, store.lease_ttl_s, store.advertise, store.commit_in_thread) == (
            "trioq", 10.0, "", False,
        )  # fmt: skip
    finally:
        store.close()
        sql.execute("DROP SCHEMA trioq CASCADE")
    threaded = open_postgres(postgres_server.url, "trioq_threaded", commit_in_thread=True)
    try:
        assert threaded.commit_in_thread is True
    finally:
        threaded.close()
        sql.execute("DROP SCHEMA trioq_threaded CASCADE")


def test_closing_after_the_connection_broke_does_not_wait_on_the_database_again(
    postgres_server, pg_schema, caplog
) -> None:
    store = open_postgres(postgres_server.url, pg_schema)
    assert store.acquire_lease()
    postgres_server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            store.commit([job("a")], [], sync=False)
        store.close()  # a stop during an outage: the lease expires by itself
    finally:
        postgres_server.start()
    assert not [r for r in caplog.records if "could not release" in r.getMessage()]
