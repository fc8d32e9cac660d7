"""Durable state behind one interface: SQLite (the default) and an in-memory store.

A store keeps opaque job records (id, queue, state, body) and commits a batch of changes
atomically. It knows nothing of the engine's rules; this package never imports `broker`.
"""

from .base import JobRow, Record, Store, StoreError
from .memory import MemoryStore

__all__ = ["JobRow", "MemoryStore", "Record", "Store", "StoreError", "open_sqlite"]


def open_sqlite(path: str) -> Store:
    """Open (or create) the SQLite store in the file `path`; raises StoreError."""
    from .sqlite import SqliteStore

    return SqliteStore(path)
