"""Restoring the engine from the store: a function over the state it rebuilds.

Restart rules: waiting and prioritized jobs are ready again in their old order; delayed jobs
keep their run times; waiting-children jobs wait for the dependencies that have not completed
(one the broker no longer knows was removed without completing, and still counts as pending,
exactly as before the restart); leased active jobs keep their lease and token, so a worker
that reconnects can still settle them, and expire as usual; active jobs bound to a connection
(pulled without a lease) go back to waiting without spending an attempt, as on a disconnect;
detached active jobs stay active; completed and failed jobs are retained within the caps, the
excess deleted. Whatever this changes is written back to the store.

This module imports no EngineState: what it needs of one is `Restorable`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from itertools import count
from typing import TYPE_CHECKING, Protocol

from broker.engine.rules.deadlines import LEASE, arm_timeout, arm_ttl
from broker.engine.state.changes import ChangeLog
from broker.engine.state.keys import DEBOUNCE
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    FAILED,
    PRIORITIZED,
    READY_STATES,
    TIMELINE_ENTRY,
    WAITING,
    WAITING_CHILDREN,
    Job,
)
from broker.engine.state.observers import Observers
from broker.engine.state.retention import expire_retained, mark_finished

READY = frozenset({WAITING, PRIORITIZED, DELAYED})  # how a queued job reports can change


if TYPE_CHECKING:  # (a type only: no Protocol class is built at run time)
    from broker.engine.rules.deadlines import TimedState

    class Restorable(TimedState, Protocol):
        """What `restore` rebuilds: EngineState."""

        now: float
        changes: ChangeLog
        observers: Observers

        def sequence(self) -> count[int]:
            """The counter of ready heap entries."""
            ...

        def enter_many(
            self, jobs: Sequence[Job], state: str, persist: bool = True, error: str | None = None
        ) -> None:
            """The transition."""
            ...

        def wait_for_dependencies(self, job: Job, now: float) -> None:
            """Wait for the unfinished dependencies, or schedule."""
            ...

        def schedule(self, job: Job, now: float) -> None:
            """Delayed or ready."""
            ...

        def child_failed(self, child: Job, reason: str, now: float) -> None:
            """A child's failure policy meets its parent."""
            ...


def restore(
    state: Restorable, jobs: list[Job], held: set[str], now: float, slice_size: int
) -> Iterator[None]:
    """Rebuild every structure of `state` from stored jobs (`held`: the ids of those that were
    bound to a connection); a generator that yields every `slice_size` jobs, so that a
    start-up with many jobs can let other tasks run (the HTTP port answers meanwhile)."""
    state.now = now
    # Arrival order, by two stable sorts: a (created_at, id) key tuple per job took ~80 MiB
    # at once for a million jobs.
    jobs.sort(key=_job_id)
    jobs.sort(key=_created_at)
    held_jobs = state.jobs
    stored_states: list[str] = []  # a list: a dict took ~40 MiB more
    keep_state = stored_states.append
    for job in jobs:  # one pass over a million jobs, not two: each is far from the last
        held_jobs[job.id] = job
        keep_state(job.state)
    yield
    yield from _restore_finished(state, jobs, now, slice_size)
    # The rest are not placed yet: stateless until their turn, so that a failure policy
    # met on the way (a child past its ttl) acts only on parents already placed...
    for job, stored in zip(jobs, stored_states, strict=True):
        if stored not in (COMPLETED, FAILED):
            job.state = ""
    failed_from = len(state.observers.finished)
    yield from _place(state, jobs, stored_states, held, now, slice_size)
    # ...and, every job placed, the policies of those that failed meet their parents.
    for job in state.observers.finished[failed_from:]:
        state.child_failed(job, job.failed_reason or "", now)
    state.changes.start_tracking()
    _store_restart_changes(state, jobs, stored_states)
    expire_retained(state, state.completed, now)
    expire_retained(state, state.failed, now)


def _restore_finished(
    state: Restorable, jobs: list[Job], now: float, slice_size: int
) -> Iterator[None]:
    """Finished jobs first, oldest first, so that one failing during the restart (its ttl ran
    out while the broker was down) is the newest in retention, not the oldest."""
    finished = [job for job in jobs if job.state in (COMPLETED, FAILED)]
    finished.sort(key=lambda job: job.completed_at or 0)
    for n, job in enumerate(finished, 1):
        if n % slice_size == 0:
            yield
        stored, job.state = job.state, ""
        state.enter_many((job,), stored)
        mark_finished(job)
        (state.completed if stored == COMPLETED else state.failed).add(job, job.completed_at or 0)
        _restore_debounce_window(state, job, now)


def _place(
    state: Restorable,
    jobs: list[Job],
    stored_states: list[str],
    held: set[str],
    now: float,
    slice_size: int,
) -> Iterator[None]:
    """Place every unfinished job by the restart rules (see the module docstring)."""
    queues, seqs = state.queues, state.sequence()
    # Most stored jobs are ready, with no key, ttl or group to take again: they are put on
    # their heaps here, in order, and enter their state together (`ready`, by state), before
    # any other job is placed and before each yield.
    ready: dict[str, list[Job]] = {WAITING: [], PRIORITIZED: []}
    for n, (job, stored) in enumerate(zip(jobs, stored_states, strict=True), 1):
        if n % slice_size == 0:
            _enter_ready(state, ready)
            yield
        opts = job.opts
        if (
            stored in READY_STATES and job.run_at <= now and opts.group_id is None
            and opts.unique_key is None and opts.debounce_id is None and not opts.ttl
        ):  # fmt: skip
            target = PRIORITIZED if opts.priority > 0 else WAITING
            timeline = job.timeline
            if timeline and timeline[-TIMELINE_ENTRY] == target:  # no new timeline entry
                queue = queues.get(job.queue) or state.queues.make(job.queue)
                queue.push_ready(job, next(seqs))
                ready[target].append(job)
                continue
        if stored in (COMPLETED, FAILED):
            continue  # restored above
        _enter_ready(state, ready)
        _place_one(state, job, stored, held, now)
    _enter_ready(state, ready)


def _enter_ready(state: Restorable, ready: dict[str, list[Job]]) -> None:
    """The ready jobs put on their heaps enter their states."""
    for target, run in ready.items():
        if run:
            state.enter_many(run, target)
            run.clear()


def _place_one(state: Restorable, job: Job, stored: str, held: set[str], now: float) -> None:
    """Place one unfinished job that takes more than its heap entry."""
    state.keys.take_job_keys(job, job.created_at)
    if stored == ACTIVE or job.attempts or job.stall_count:
        _end_untimed_debounce(state, job)
    arm_ttl(state, job)
    if stored == WAITING_CHILDREN:
        state.wait_for_dependencies(job, now)
    elif stored != ACTIVE:
        state.schedule(job, now)
    elif job.lock_token is not None:
        job.last_heartbeat = max(job.last_heartbeat, now)  # no one could beat while down
        state.enter_many((job,), ACTIVE)
        state.wheel.schedule(job.lock_expires_at, LEASE, job, job.lock_token)
        arm_timeout(state, job, job.started_at or now)
    elif job.id in held:
        job.started_at = None
        state.make_ready(job)
    else:
        job.last_heartbeat = max(job.last_heartbeat, now)
        state.enter_many((job,), ACTIVE)
        arm_timeout(state, job, job.started_at or now)


def _end_untimed_debounce(state: Restorable, job: Job) -> None:
    """A restored job that has started holds no untimed debounce (it ended at the start)."""
    if job.opts.debounce_id is not None:
        state.keys.free((DEBOUNCE, job.queue, job.opts.debounce_id), job.id, only_untimed=True)


def _restore_debounce_window(state: Restorable, job: Job, now: float) -> None:
    """A finished job's timed debounce window outlives it (keys.py): take it again."""
    if job.opts.debounce_id is not None and job.opts.debounce_ttl:
        until = job.created_at + job.opts.debounce_ttl
        if until > now:
            state.keys.take((DEBOUNCE, job.queue, job.opts.debounce_id), job.id, until)


def _store_restart_changes(state: Restorable, jobs: list[Job], stored_states: list[str]) -> None:
    """What the restart itself changed (a job requeued, one whose ttl ran out while the
    broker was down, one that went away) is written back, so the store agrees."""
    changes = state.changes
    for loaded, stored in zip(jobs, stored_states, strict=True):
        if loaded.state == stored:
            continue  # still held (a job forgotten since has no state), as stored
        job_id = loaded.id
        job = state.jobs.get(job_id)
        if job is None:
            changes.delete_row(job_id)
        elif job.state != stored and not (stored in READY and job.state in READY):
            changes.write(job)


_job_id = operator.attrgetter("id")
_created_at = operator.attrgetter("created_at")
