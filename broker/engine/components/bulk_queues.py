"""Large Drain, Clean, Obliterate, PurgeDlq and RetryDlq, worked through in slices (the rules:
bulk.py).

Checks: the jobs are chosen by a scan of every job the broker holds, 25,000 per pass (a
slice of a list of them taken at the start; jobs added later are not looked at: the command
comes before them), with the command's own rule (state, queue, age; Clean then keeps the
oldest `limit`); then their ids are stored, 2,000 per pass, before the commit point.
Applies: removes (or retries) them a slice at a time, each job only if it still is what the
command chose (a job a worker started meanwhile is not drained; Obliterate takes any state),
its row deleted in the same pass. Obliterate resets the queue's settings and answers its
parked polls at the commit point, and drops the queue at the end if nothing was added to it
meanwhile.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec

from broker.engine.components.bulk import Bulk, BulkRunner, Reply, encoded, raw_array
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import Job
from protocol.bulk import SLICED_ITEMS

if TYPE_CHECKING:
    from broker.engine.components.pulls import Pulls

DRAIN = "drain"
CLEAN = "clean"
OBLITERATE = "obliterate"
PURGE_DLQ = "purge-dlq"
RETRY_DLQ = "retry-dlq"
SCAN_SLICE = 25_000
"""Jobs looked at per pass while choosing (~0.1 us each)."""
KEEP_SLICE = 2_000
"""Chosen ids stored per pass before the commit point (~75 kB)."""
APPLY_SLICE = 500
"""Jobs removed (~1 us each, and ~5 us to delete the row) or retried per pass."""
ANNOUNCED = {
    DRAIN: "queue:drained", CLEAN: "queue:cleaned", PURGE_DLQ: "dlq:purged",
    RETRY_DLQ: "dlq:retry-all",
}  # fmt: skip
"""The event each sweep publishes when it removed or retried something (Obliterate: always)."""

_encode = msgspec.msgpack.Encoder().encode
_read = msgspec.msgpack.Decoder(tuple[str, str, Any]).decode
_read_ids = msgspec.msgpack.Decoder(list[str]).decode
_by_id = attrgetter("id")
_by_age = attrgetter("created_at")


def worth_slicing(state: EngineState, queue: str, states: Collection[str] | None) -> bool:
    """Whether a sweep of `queue`'s jobs in `states` (None: all) is a bulk: it would take more
    than SLICED_ITEMS jobs, or need a scan longer than a slice."""
    held = state.queues.get(queue)
    if held is None:
        return False
    counts = held.counts
    targets = sum(counts.values()) if states is None else sum(counts[s] for s in states)
    return targets > SLICED_ITEMS or (targets > 0 and len(state.jobs) > SCAN_SLICE)


class SweepBulk(Bulk):
    """A Drain, Clean, Obliterate, PurgeDlq or RetryDlq of many jobs (see the module
    docstring). `states` None takes every state; `grace` and `limit` are Clean's."""

    kind = "sweep"

    def __init__(
        self, pulls: Pulls, session: ReplySink | None, req_id: object, action: str, queue: str,
        states: Collection[str] | None, grace: float = 0, limit: int | None = None,
        by_completion: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(session, req_id)
        self.pulls = pulls
        self.action = action
        self.queue = queue
        self.states = None if states is None else frozenset(states)
        self.grace = grace
        self.limit = limit
        self.by_completion = by_completion  # Clean of finished jobs: age since they finished
        self.named_state: str | None = None  # the state a Clean named (its event tells it)
        self.snapshot: list[Job] | None = None
        self.scanned = 0
        self.chosen: list[Job | None] = []  # None once applied (the job is let go)
        self.ids: list[str] | None = None  # of the chosen, for the record (and a resumed bulk)
        self.kept = 0  # of those, how many are in parts
        self.count = 0  # jobs removed or retried
        self.chunks: list[bytes] = []  # Clean's removed ids, slice by slice

    @classmethod
    def resumed(cls, pulls: Pulls, body: bytes, parts: list[bytes], at: int) -> SweepBulk:
        """The bulk of a stored record (its chosen ids in its parts), applied up to `at`."""
        action, queue, states = _read(body)
        bulk = cls(pulls, None, None, action, queue, states)
        bulk.ids = [job_id for part in parts for job_id in _read_ids(part)]
        bulk.position = at
        return bulk

    def body(self) -> bytes:
        """The action, queue and states (the chosen ids are in the parts)."""
        states = None if self.states is None else sorted(self.states)
        return _encode((self.action, self.queue, states))

    def check(self, state: EngineState, now: float) -> bool:
        """Choose the jobs, a slice of the scan per pass; then store their ids, a slice per
        pass."""
        if self.ids is not None:
            ids = self.ids[self.kept : self.kept + KEEP_SLICE]
            self.kept += len(ids)
            self.keep(_encode(ids))
            if self.kept < len(self.ids):
                return False
            if self.action == OBLITERATE:
                self._obliterate_settings(state)
            return True
        if self.snapshot is None:
            self.snapshot = list(state.jobs.values())  # later jobs come after the command
        start = self.scanned
        self.scanned = min(start + SCAN_SLICE, len(self.snapshot))
        chunk = self.snapshot[start : self.scanned]
        queue, states = self.queue, self.states
        if states is None:
            chosen = [job for job in chunk if job.queue == queue and job.state]
        else:
            chosen = [job for job in chunk if job.queue == queue and job.state in states]
        if self.action == CLEAN:
            chosen = [job for job in chosen if self._old_enough(job, now)]
        self.chosen += chosen
        if self.scanned < len(self.snapshot):
            return False
        self.snapshot = None
        if self.action == CLEAN:  # the oldest first, at most `limit`
            self.chosen.sort(key=_by_id)
            self.chosen.sort(key=_by_age)
            del self.chosen[self.limit or 0 :]
        self.ids = [job.id for job in self.chosen if job is not None]
        return False

    def _old_enough(self, job: Job, now: float) -> bool:
        """Clean's age rule: created (queued jobs) or finished (others) `grace` ms ago."""
        since = (job.completed_at or now) if self.by_completion else job.created_at
        return now - since >= self.grace

    def _obliterate_settings(self, state: EngineState) -> None:
        """Obliterate at its commit point: the queue's settings are gone and its parked polls
        are answered, as a one-pass Obliterate does."""
        queue = state.queues.get(self.queue)
        state.observers.telemetry.forget(self.queue)
        if queue is None:
            return
        queue.reset_settings()
        state.changes.note_setting(queue.name)
        self.pulls.answer_empty(queue.waiters)

    def _still_chosen(self, state: EngineState, job: Job | None) -> bool:
        """Whether `job` is still held and still what the command chose."""
        if job is None or state.jobs.get(job.id) is not job or job.queue != self.queue:
            return False
        return job.state in self.states if self.states is not None else bool(job.state)

    def apply(self, state: EngineState, now: float) -> bool:
        """Remove (or retry) the next slice of the chosen jobs still as chosen."""
        assert self.ids is not None
        start = self.position
        end = min(start + APPLY_SLICE, len(self.ids))
        if self.chosen:
            jobs: list[Job | None] = list(self.chosen[start:end])
            self.chosen[start:end] = [None] * (end - start)
        else:  # resumed
            jobs = [state.jobs.get(job_id) for job_id in self.ids[start:end]]
        current = [job for job in jobs if job is not None and self._still_chosen(state, job)]
        if self.action == RETRY_DLQ:
            self.count += sum(state.revive(job, now) for job in current)
        else:
            removed = state.remove_many(current)
            self.count += len(removed)
            if self.action == CLEAN:
                self.chunks.append(encoded([job.id for job in removed]))
            state.purge_later(removed)  # let go of in slices (a slice is below a purge)
        self.position = end
        if end < len(self.ids):
            return False
        if self.action == OBLITERATE:
            self._drop_queue(state, now)
        self._announce(state)
        return True

    def _drop_queue(self, state: EngineState, now: float) -> None:
        """Obliterate's end: the queue goes, unless something came to it meanwhile."""
        queue = state.queues.get(self.queue)
        if queue is None:
            return
        state.upkeep.bury(queue.compact_ready())  # the removed jobs' stale entries
        if queue.idle(now):
            state.queues.drop_now(self.queue)
            state.changes.note_setting(queue.name)

    def _announce(self, state: EngineState) -> None:
        """The event the one-pass command publishes (events.py), once the last slice is in."""
        queue, count = self.queue, self.count
        if self.action == OBLITERATE:
            state.announce("queue:obliterated", {"queue": queue})
            state.announce("queue:removed", {"queue": queue})
        elif count and self.action in ANNOUNCED:
            extra = {"state": self.named_state} if self.named_state is not None else {}
            state.announce(ANNOUNCED[self.action], {"queue": queue, **extra, "count": count})

    def answer(self) -> Reply:
        """The reply of the one-pass command."""
        if self.action == OBLITERATE:
            return {"ok": True}
        if self.action == CLEAN:
            return {"ok": True, "count": self.count, "ids": raw_array(self.chunks)}
        return {"ok": True, "count": self.count}


def start_sweep(
    bulks: BulkRunner, pulls: Pulls, session: ReplySink, command: Any, action: str,
    states: Collection[str] | None, **clean: Any,
) -> bool:  # fmt: skip
    """Start a SweepBulk of `command`'s queue when `worth_slicing` says so; else False (the
    command runs in one pass)."""
    if not worth_slicing(bulks.state, command.queue, states):
        return False
    bulk = SweepBulk(pulls, session, command.reqId, action, command.queue, states, **clean)
    if action == CLEAN:
        bulk.named_state = command.state
    bulks.start(bulk)
    return True


def register_sweeps(bulks: BulkRunner, pulls: Pulls) -> None:
    """Let a restart build stored sweeps again."""
    bulks.resume[SweepBulk.kind] = partial(SweepBulk.resumed, pulls)
