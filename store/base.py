"""The store interface every backend implements, and its error type."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import NamedTuple, Protocol


class StoreError(Exception):
    """The store cannot be opened or written; the text is meant for the operator."""


class LeaseLost(StoreError):
    """This store's broker no longer holds the lease: another took over, so it must not write.

    The failed commit wrote nothing, and never will: fenced stores stay fenced."""


class StoreUnavailable(StoreError):
    """The database could not be reached (a connection-level failure). A failed commit may or
    may not have been applied (the answer was lost); retrying the same commit is safe, as its
    writes are idempotent. The store reconnects on its next call."""


class JobRow(NamedTuple):
    """One stored job: its id, queue and state (for queries) and its encoded body.

    The body is the whole truth. The fields after it are copies for stores that keep them as
    columns an operator can query (PostgreSQL); stores without such columns ignore them, and
    loads leave them at their defaults.
    """

    id: str
    queue: str
    state: str
    body: bytes
    priority: float = 0
    run_at: float = 0
    created_at: float = 0
    attempts: int = 0


class Record(NamedTuple):
    """A stored thing that is not a job (a cron, later queue settings): kind, key, body."""

    kind: str
    key: str
    body: bytes


class Store(Protocol):
    """Durable job records. Every method blocks; callers run them from one task at a time."""

    def load(self) -> list[JobRow]:
        """Every stored job."""
        ...

    def scan_jobs(self) -> Iterator[JobRow]:
        """Every stored job, one at a time (a start-up never holds every row at once).
        Nothing else may use the store until the iteration ends."""
        ...

    def scan_bodies(self) -> Iterator[bytes]:
        """The body of every stored job, one at a time, as `scan_jobs` (a start-up reads
        only bodies: a body holds the whole job, and reading nothing else is cheaper)."""
        ...

    def load_records(self) -> list[Record]:
        """Every stored record."""
        ...

    def commit(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        *,
        sync: bool,
        records: Collection[Record] = (),
        record_deletes: Collection[tuple[str, str]] = (),
    ) -> None:
        """Write and delete jobs and records in one transaction (all or nothing).

        With `sync`, the transaction is flushed to stable storage before returning (it survives
        power loss); without it, it survives a crash of the process.
        """
        ...

    def tidy(self) -> None:
        """Upkeep that commits leave due (SQLite: a checkpoint of its log). The actor calls it
        after sending a committed pass's replies, so that no reply waits for it; it may block."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...
