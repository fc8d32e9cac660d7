"""MemoryStore: the store contract over a dict (for tests, and as the contract's model)."""

from __future__ import annotations

from collections.abc import Iterable

from .base import JobRow


class MemoryStore:
    """Keeps job rows in a dict; commits are atomic because nothing can fail midway."""

    def __init__(self) -> None:
        self.rows: dict[str, JobRow] = {}
        self.commits = 0
        self.synced_commits = 0

    def load(self) -> list[JobRow]:
        """Every stored job."""
        return list(self.rows.values())

    def commit(self, upserts: Iterable[JobRow], deletes: Iterable[str], *, sync: bool) -> None:
        """Apply upserts then deletes."""
        upserts = list(upserts)
        deletes = list(deletes)
        for row in upserts:
            self.rows[row.id] = row
        for job_id in deletes:
            self.rows.pop(job_id, None)
        self.commits += 1
        self.synced_commits += sync

    def close(self) -> None:
        """Nothing to release."""
