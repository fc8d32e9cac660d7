"""Stores for engine tests: the factory type of the durable backends, and stores that record,
fail or lose their lease on purpose."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from store import (
    JobRow,
    LeaseLost,
    MemoryStore,
    Record,
    Store,
    StoreError,
    StoreUnavailable,
)

StoreFactory = Callable[[], Store]
"""Opens one broker's durable store, again after each close (a restart)."""


class RecordingStore(MemoryStore):
    """A memory store that writes "commit" into a shared log each time it commits."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def commit(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        *,
        sync: bool,
        records: Collection[Record] = (),
        record_deletes: Collection[tuple[str, str]] = (),
    ) -> None:
        """Commit, then note it."""
        super().commit(upserts, deletes, sync=sync, records=records, record_deletes=record_deletes)
        self.log.append("commit")


class FailingStore(MemoryStore):
    """A memory store whose disk "fills up" once `broken` is set."""

    broken = False

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Raise StoreError when broken, else commit."""
        if self.broken:
            raise StoreError("disk full")
        super().commit(*args, **kwargs)


class FlakyStore(MemoryStore):
    """A memory store whose database is unreachable while `down` is set."""

    down = False
    attempts = 0

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Raise StoreUnavailable while down, else commit."""
        self.attempts += 1
        if self.down:
            raise StoreUnavailable("connection refused")
        super().commit(*args, **kwargs)


class FencedStore(RecordingStore):
    """A recording store whose lease another broker takes once `fenced` is set."""

    fenced = False

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Raise LeaseLost when fenced, else commit."""
        if self.fenced:
            raise LeaseLost("another broker took the lease over")
        super().commit(*args, **kwargs)
