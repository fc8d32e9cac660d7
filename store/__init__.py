"""Durable state behind one interface: SQLite (the default), PostgreSQL and an in-memory store.

A store keeps opaque job records (id, queue, state, body) and commits a batch of changes
atomically. It knows nothing of the engine's rules; this package never imports `broker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import JobRow, LeaseLost, Record, Store, StoreError, StoreUnavailable
from .memory import MemoryStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "JobRow",
    "LeaseLost",
    "MemoryStore",
    "Record",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "open_postgres",
    "open_sqlite",
]


def open_sqlite(path: str) -> Store:
    """Open (or create) the SQLite store in the file `path`; raises StoreError."""
    from .sqlite import SqliteStore

    return SqliteStore(path)


def open_postgres(
    url: str,
    schema: str = "trioq",
    *,
    lease_ttl_s: float = 10.0,
    advertise: str = "",
    commit_in_thread: bool = False,
) -> PostgresStore:
    """Connect to PostgreSQL at `url` and open (creating it if missing) the store in `schema`;
    raises StoreError. The store holds no lease yet: see PostgresStore.acquire_lease."""
    from .postgres import PostgresStore

    store = PostgresStore(url, schema, lease_ttl_s=lease_ttl_s, advertise=advertise)
    store.commit_in_thread = commit_in_thread
    return store
