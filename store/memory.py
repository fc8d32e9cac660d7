"""MemoryStore: the store contract over a dict (for tests, and as the contract's model)."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from .base import JobRow, Record


class MemoryStore:
    """Keeps job rows in a dict; commits are atomic because nothing can fail midway."""

    def __init__(self) -> None:
        self.rows: dict[str, JobRow] = {}
        self.records: dict[tuple[str, str], Record] = {}
        self.commits = 0
        self.synced_commits = 0

    def load(self) -> list[JobRow]:
        """Every stored job."""
        return list(self.rows.values())

    def scan_jobs(self) -> Iterator[JobRow]:
        """Every stored job, one at a time."""
        return iter(list(self.rows.values()))

    def scan_bodies(self) -> Iterator[bytes]:
        """The body of every stored job (a copy of the list, as `scan_jobs`)."""
        return iter([row.body for row in self.rows.values()])

    def load_records(self) -> list[Record]:
        """Every stored record."""
        return list(self.records.values())

    def commit(
        self,
        upserts: Collection[JobRow],
        deletes: Collection[str],
        *,
        sync: bool,
        records: Collection[Record] = (),
        record_deletes: Collection[tuple[str, str]] = (),
    ) -> None:
        """Apply upserts then deletes (everything is read first, so a failure changes nothing)."""
        upserts, deletes = list(upserts), list(deletes)
        records, record_deletes = list(records), list(record_deletes)
        for row in upserts:
            self.rows[row.id] = row
        for job_id in deletes:
            self.rows.pop(job_id, None)
        for record in records:
            self.records[(record.kind, record.key)] = record
        for key in record_deletes:
            self.records.pop(key, None)
        self.commits += 1
        self.synced_commits += sync

    def tidy(self) -> None:
        """Nothing to tidy."""

    def close(self) -> None:
        """Nothing to release."""
