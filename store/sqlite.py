"""SqliteStore: job records in one SQLite file through apsw.

WAL journal, one writer connection holding the file exclusively, `BEGIN IMMEDIATE`
transactions. With synchronous=NORMAL a committed transaction survives a crash of the process
(it is in the WAL before `commit` returns); a `sync` commit switches to synchronous=FULL for
that transaction so it also survives power loss. The schema carries a version number (PRAGMA
user_version) and is migrated forward on open; a file from a newer trioq is refused rather
than guessed at.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Collection, Iterator
from itertools import chain

import apsw

from .base import JobRow, Record, StoreError
from .walflush import WalFlusher

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 5000
"""How long opening waits for another process to let go of the file (a broker restarting,
whose close checkpoints up to ~40 MiB of WAL)."""
CHECKPOINT_FRAMES = 10_000
"""Checkpoint when the write-ahead log holds this many pages (~40 MiB): measured 7.0 -> 2.9 us
per row written against SQLite's default of 1000 (20,000 jobs written three times, 50 rows a
commit)."""
FLUSH_EVERY = 500
"""Flush the log from the WalFlusher's thread each time it grew by this many pages, so the
checkpoint's own flush, on the event loop, finds little left to write."""

# Each entry migrates the schema from version N-1 to N.
MIGRATIONS: dict[int, str] = {
    1: """
        CREATE TABLE jobs (
            id    TEXT PRIMARY KEY,
            queue TEXT NOT NULL,
            state TEXT NOT NULL,
            body  BLOB NOT NULL
        ) WITHOUT ROWID;
    """,
    2: """
        CREATE TABLE records (
            kind TEXT NOT NULL,
            key  TEXT NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (kind, key)
        ) WITHOUT ROWID;
    """,
}

UPSERT = "INSERT OR REPLACE INTO jobs (id, queue, state, body) VALUES (?, ?, ?, ?)"
"""The write of a one-job commit (a PUSH, an ACK with retention), the cheapest way."""
DELETE = "DELETE FROM jobs WHERE id = ?"
MAX_CHUNK = 256
"""The most rows one multi-row INSERT writes. A batch is split into chunks of
powers of two (100 rows: 64 + 32 + 4), so at most nine statement texts exist and
all stay in apsw's statement cache: measured, preparing a 100-row statement cost ~0.7 ms, ten
times its execution. 256 rows keep the text under apsw's largest cacheable statement (16 KiB)
and the parameters far under SQLite's limit (32,766)."""
_ROW_WIDTH = len(JobRow._fields)
"""Values per JobRow: the rows are flattened whole and the statement numbers its parameters
past the four columns PostgreSQL alone keeps (`?1..?4`, then `?9..?12`, ...)."""


def _upsert_many(count: int) -> str:
    """One INSERT of `count` rows whose parameters are `count` JobRows laid end to end, less
    the last row's four unused values (SQLite counts parameters up to the highest number)."""
    rows = ",".join(
        f"(?{base + 1},?{base + 2},?{base + 3},?{base + 4})"
        for base in range(0, count * _ROW_WIDTH, _ROW_WIDTH)
    )
    return f"INSERT OR REPLACE INTO jobs (id, queue, state, body) VALUES {rows}"


def _chunks(count: int) -> list[int]:
    """`count` as chunk sizes: MAX_CHUNK while that many are left, then the rest's binary
    digits, largest first (each size is then one of log2(MAX_CHUNK) + 1 statements)."""
    sizes = [MAX_CHUNK] * (count // MAX_CHUNK)
    rest = count % MAX_CHUNK
    while rest:  # once per binary digit set (a batch of 32: once)
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


_SIZES = [1 << power for power in range(MAX_CHUNK.bit_length())]
UPSERTS = {size: _upsert_many(size) for size in _SIZES}
STATEMENT_CACHE = 64
"""Prepared statements apsw keeps: the nine chunk statements and the few others."""
# The four zeros are JobRow's defaults for the columns only PostgreSQL keeps, so each row is a
# whole JobRow made by `tuple.__new__` (its Python-level `__new__` cost more than the scan).
SELECT_ALL = "SELECT id, queue, state, body, 0, 0, 0, 0 FROM jobs"
SELECT_BODIES = "SELECT body FROM jobs"
_job_row = functools.partial(tuple.__new__, JobRow)
UPSERT_RECORD = "INSERT OR REPLACE INTO records (kind, key, body) VALUES (?, ?, ?)"
DELETE_RECORD = "DELETE FROM records WHERE kind = ? AND key = ?"
SELECT_RECORDS = "SELECT kind, key, body FROM records"


class SqliteStore:
    """The SQLite backend of the Store interface."""

    def __init__(
        self,
        path: str,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        *,
        checkpoint_frames: int = CHECKPOINT_FRAMES,
        flush_every: int = FLUSH_EVERY,
        wal_sync: Callable[[int], None] = os.fdatasync,
    ) -> None:
        """`wal_sync` is how the WalFlusher flushes the log (tests pass one they control)."""
        self.path = path
        self.checkpoint_frames = checkpoint_frames
        self.flush_every = flush_every
        self._frames = 0  # pages in the write-ahead log after the last commit
        self._asked = 0  # how long the log was when a flush was last asked for
        self._flusher = WalFlusher(path + "-wal", sync=wal_sync)
        try:
            self._db = apsw.Connection(path, statementcachesize=STATEMENT_CACHE)
        except apsw.Error as exc:
            raise StoreError(self._explain(exc)) from None
        try:
            self._db.set_busy_timeout(busy_timeout_ms)
            self._configure()
            self._migrate()
            self._db.execute("BEGIN IMMEDIATE; COMMIT")  # take the file's lock now (see below)
            # One cursor for every statement: apsw makes a new one per Connection.execute.
            self._cursor = self._db.cursor()
        except apsw.Error as exc:
            self._db.close()  # a half-open connection would keep the file locked
            raise StoreError(self._explain(exc)) from None
        except StoreError:
            self._db.close()
            raise

    def _configure(self) -> None:
        db = self._db
        # One broker per file: EXCLUSIVE locking holds the file's lock from the first
        # transaction until close, so a second broker on the same data directory stops with
        # a clear error instead of interleaving its writes with ours (each broker keeps its
        # own state in memory). It also keeps the WAL index in process memory, which saves
        # six lock calls on the shared-memory file per commit.
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
        mode = str(db.execute("PRAGMA journal_mode=WAL").fetchall()[0][0])
        if mode.lower() != "wal":
            raise StoreError(f"{self.path}: cannot use WAL journal mode (got {mode})")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")
        # Our hook replaces SQLite's automatic checkpoints: `tidy` runs them, after the log was
        # flushed from another thread (walflush.py).
        db.set_wal_hook(self._logged)

    def _migrate(self) -> None:
        db = self._db
        version = int(db.execute("PRAGMA user_version").fetchall()[0][0])  # type: ignore[arg-type]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer trioq (schema {version}; this one "
                f"understands up to {SCHEMA_VERSION}); upgrade trioq or use another --data-dir"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            db.execute("BEGIN IMMEDIATE")
            db.execute(MIGRATIONS[target])
            db.execute(f"PRAGMA user_version={target}")
            db.execute("COMMIT")

    def _explain(self, exc: apsw.Error) -> str:
        if isinstance(exc, apsw.CantOpenError):
            return f"cannot open {self.path}: is the directory writable?"
        if isinstance(exc, apsw.NotADBError | apsw.CorruptError):
            return f"{self.path} is not a trioq database or is corrupt"
        if isinstance(exc, apsw.BusyError):
            return f"{self.path} is in use by another process (one trioq per --data-dir)"
        if isinstance(exc, apsw.ReadOnlyError):
            return f"{self.path} is read-only"
        return f"{self.path}: {exc}"

    def load(self) -> list[JobRow]:
        """Every stored job; raises StoreError."""
        return list(self.scan_jobs())

    def scan_jobs(self) -> Iterator[JobRow]:
        """Every stored job, read from a cursor as it is consumed."""
        try:
            yield from map(_job_row, self._db.execute(SELECT_ALL))
        except apsw.Error as exc:
            raise StoreError(self._explain(exc)) from None

    def scan_bodies(self) -> Iterator[bytes]:
        """The body of every stored job, read from a cursor as it is consumed (measured: 0.29
        against 0.55 us of CPU a row for the four columns of `scan_jobs`)."""
        try:
            for (body,) in self._db.execute(SELECT_BODIES):
                yield body
        except apsw.Error as exc:
            raise StoreError(self._explain(exc)) from None

    def load_records(self) -> list[Record]:
        """Every stored record; raises StoreError (a damaged file is named, as at open)."""
        try:
            return [Record(*row) for row in self._db.execute(SELECT_RECORDS)]
        except apsw.Error as exc:
            raise StoreError(self._explain(exc)) from None

    def commit(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        *,
        sync: bool,
        records: Collection[Record] = (),
        record_deletes: Collection[tuple[str, str]] = (),
    ) -> None:
        """Write and delete in one transaction; raises StoreError on failure."""
        try:
            count = len(upserts)
            if count in UPSERTS and not (deletes or records or record_deletes or sync):
                # Rows that one statement writes (`_chunks`): a statement is its own
                # transaction, and measured, a BEGIN and COMMIT around a one-row write cost as
                # much again as the write.
                if count == 1:  # measured: 30.4k against 37.1k instructions through _upsert
                    self._cursor.execute(UPSERT, next(iter(upserts))[:4])
                else:
                    self._upsert(upserts)
            else:
                self._transaction(upserts, deletes, records, record_deletes, sync)
        except apsw.Error as exc:
            raise StoreError(self._explain(exc)) from None

    def tidy(self) -> None:
        """Checkpoint the log if it is due. Called once a pass's replies are out (the actor),
        as the commit is stored either way: a checkpoint, 36-280 ms measured for a ~40 MiB
        log, then delays no reply of the pass whose commit filled the log."""
        if self._frames >= self.checkpoint_frames:
            self._checkpoint_if_due()

    def _transaction(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        records: Collection[Record],
        record_deletes: Collection[tuple[str, str]],
        sync: bool,
    ) -> None:
        """The commit as an IMMEDIATE transaction (synchronous=FULL for a `sync` one)."""
        cursor = self._cursor
        if sync:
            cursor.execute("PRAGMA synchronous=FULL")
        try:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                self._write(upserts, deletes, records, record_deletes)
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")
        finally:
            if sync:
                cursor.execute("PRAGMA synchronous=NORMAL")

    def _logged(self, _db: apsw.Connection, _name: str, frames: int) -> int:
        """SQLite's hook after each commit: `frames` pages are in the log now. Asks for a flush
        of the log every `flush_every` pages, and once more when a checkpoint is due."""
        self._frames = frames
        asked = self._asked
        if frames >= asked + self.flush_every or asked < self.checkpoint_frames <= frames:
            self._asked = frames
            self._flusher.request(frames)
        return apsw.SQLITE_OK

    def _checkpoint_if_due(self) -> None:
        """Checkpoint once the flusher has flushed the log up to the checkpoint's size (or the
        log grew to twice that without, the flusher being slow): the checkpoint then flushes
        only the pages written since. The log starts over at the next commit. A failed
        checkpoint is not a failed commit (the commit is stored): the next `tidy` retries it."""
        flushed = self._flusher.flushed >= self.checkpoint_frames
        if not flushed and self._frames < 2 * self.checkpoint_frames:
            return
        try:
            self._db.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.Error as exc:
            log.warning("checkpoint of %s failed (tried again next pass): %s", self.path, exc)
            return
        self._frames = self._asked = 0
        self._flusher.restarted()

    def _write(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        records: Collection[Record],
        record_deletes: Collection[tuple[str, str]],
    ) -> None:
        """The statements of one commit. An empty list costs no statement: measured, the four
        calls of a one-job commit took 5-7 us of its 20-25 us."""
        cursor = self._cursor
        if upserts:
            self._upsert(upserts)
        if deletes:
            # One DELETE per id: measured, `DELETE ... IN (...)` of a batch's ids cost more
            # (callgrind, ACKB of 20 with retention: +3.3% a job), SQLite sorting the list first.
            cursor.executemany(DELETE, [(job_id,) for job_id in deletes])
        if records:
            cursor.executemany(UPSERT_RECORD, records)
        if record_deletes:
            cursor.executemany(DELETE_RECORD, record_deletes)

    def _upsert(self, upserts: Collection[JobRow]) -> None:
        """Write the rows with one multi-row INSERT per chunk (`_chunks`): measured with
        callgrind (`SqliteStore.commit` of 3,200 waiting jobs' rows), 9.8k against 12.5k
        instructions a row in batches of 32 (one statement, no BEGIN and COMMIT), 10.5k
        against 11.8k in batches of 100, for one INSERT executed per row (`executemany`)."""
        execute = self._cursor.execute
        values = list(chain.from_iterable(upserts))
        count = len(upserts)
        if len(values) != count * _ROW_WIDTH:
            raise StoreError("a job row does not have the JobRow's fields")
        if count in UPSERTS:  # one chunk: the common batch of 32 takes no `_chunks`
            execute(UPSERTS[count], values[: _ROW_WIDTH * count - _ROW_WIDTH + 4])
            return
        start = 0
        for size in _chunks(len(upserts)):
            end = start + size * _ROW_WIDTH
            execute(UPSERTS[size], values[start : end - _ROW_WIDTH + 4])
            start = end

    def close(self) -> None:
        """Close the connection (checkpointing the WAL)."""
        self._flusher.close()
        self._db.close()
