"""ChangeLog: what the next commit writes to the store, and the queues whose polls to serve.

The engine is single-writer, and the store is written once per pass: whatever changed since the
last commit is noted here (jobs written or deleted, queues whose settings changed, records such
as purge tombstones and bulk markers) and taken by the actor as one transaction. Queues whose
parked pulls may now be served (`dirty_queues`) are noted here too: like the rest, they are
what the pass leaves for the actor to act on after the commands.

The containers are never replaced, only emptied in place: the actor and the record components
read them here (`state.changes.changed`, `state.changes.dirty_queues`...) and may hold them.
"""

from __future__ import annotations

from typing import Any

from broker.engine.state.model import Job
from store import Record


class ChangeLog:
    """Jobs, settings and records changed since the last commit (kept only while `tracking`)."""

    def __init__(self) -> None:
        # Off until the engine is restored: the restore's own placing is not written back.
        self.tracking = False
        self.changed: dict[str, Job] = {}
        self.deleted: set[str] = set()
        self.changed_settings: set[str] = set()
        # Records to store: a Record to write, a (kind, key) to delete (purges, bulks).
        self.records: list[Record | tuple[str, str]] = []
        self.dirty_queues: set[Any] = set()
        # The recorders, as bound methods: called on hot paths without a second call.
        self.note_dirty = self.dirty_queues.add
        self.note_setting = self.changed_settings.add
        self.add_record = self.records.append

    def start_tracking(self) -> None:
        """From now on every change is noted for the store (the engine is restored)."""
        self.tracking = True

    def touch(self, job: Job) -> None:
        """Record a change to a job (for the store)."""
        if self.tracking:
            self.changed[job.id] = job

    def write(self, job: Job) -> None:
        """Write `job` whatever its state (a restart's correction: tracking is not yet on)."""
        self.changed[job.id] = job

    def delete(self, job_id: str) -> None:
        """`job_id`'s row goes (the job was forgotten); a pending write of it is dropped."""
        if self.tracking:
            self.changed.pop(job_id, None)
            self.deleted.add(job_id)

    def delete_row(self, job_id: str) -> None:
        """Delete `job_id`'s row whatever the tracking (a restart's correction)."""
        self.deleted.add(job_id)

    def delete_jobs(self, jobs: list[Job]) -> None:
        """`delete` for the rows of many jobs."""
        if self.tracking:
            changed, deleted = self.changed, self.deleted
            for job in jobs:
                changed.pop(job.id, None)
                deleted.add(job.id)

    def delete_rows(self, job_ids: Any) -> None:
        """Delete rows by id (a purge's slice: none of them is written meanwhile)."""
        self.deleted.update(job_ids)

    def keep_rows(self, job_ids: list[str]) -> None:
        """Take back deletes noted for `job_ids` (a purge deletes them in slices instead)."""
        self.deleted.difference_update(job_ids)

    def take_settings(self) -> list[str]:
        """The queues whose settings changed since the last commit (and forget them)."""
        names = list(self.changed_settings)
        self.changed_settings.clear()
        return names

    def add_records(self, records: list[Any]) -> None:
        """`add_record` for many."""
        self.records += records

    def take_records(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Records to write and to delete since the last commit."""
        records = list(self.records)
        self.records.clear()
        writes = [record for record in records if isinstance(record, Record)]
        deletes = [record for record in records if not isinstance(record, Record)]
        return writes, deletes

    def take_changes(self) -> tuple[list[Job], list[str], bool]:
        """Jobs to write, ids to delete, and whether a `durable` job is among the writes.

        An id both deleted and written (removed, then pushed again under the same jobId) is
        only written: the write replaces the old row, and a delete would lose the new job."""
        written = self.changed
        changed = list(written.values())
        removed = self.deleted
        deleted: list[str] = []
        if removed:  # a pass of pushes deletes nothing: no comprehension then
            deleted = [job_id for job_id in removed if job_id not in written]
            removed.clear()
        written.clear()
        for job in changed:  # a loop, not any(<generator>): this runs on every commit
            if job.opts.durable:
                return changed, deleted, True
        return changed, deleted, False

    def next_dirty(self) -> Any:
        """A queue noted dirty, no longer noted; None when there is none."""
        dirty = self.dirty_queues
        return dirty.pop() if dirty else None

    def forget_queue(self, queue: Any) -> None:
        """A queue is forgotten: nothing is left to serve there."""
        self.dirty_queues.discard(queue)
