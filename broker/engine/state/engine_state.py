"""EngineState: every job and queue, and the only code that moves a job between states.

Theory of operation. The engine is single-writer: one actor calls into this object, so nothing
here locks. Each transition goes through `enter_many` (for one job and for many: `_enter` is
its one-job form, `claim_many` and `complete_many` call it once per batch), which keeps the
per-queue counts exact, and the structures that depend on a state (ready heap, timer wheel,
lease, holder) are updated next to it. Handlers check everything first and mutate after, so an
error leaves state untouched.

Owners. EngineState owns the jobs, keys, timer wheel, retention and connection holdings, and
holds the owners of the rest, each changing only its own fields: the queues (queues.py:
`Queues`, the map of queues with its cap and sweep), the change log (changes.py: store writes,
dirty queues), the dependencies (dependencies.py: waiting edges, remembered done ids), the
observers (observers.py: events, finished jobs, totals, latency hooks) and the upkeep
(housekeeping.py). Restoring is a function (restore.py).

Retention (rules in deadlines.py, with everything else the timer wheel drives). Completed and
failed jobs are kept (for GetJob, GetResult, jobId idempotency and
dependency checks) up to a count and an age each; older ones are forgotten (and deleted from
the store), driven by the timer wheel rather than a sweep.

Queues. A queue exists while it holds something (a job in any state, a parked poll, a setting,
a cron, an open group rate window: `QueueState.idle`). A read never makes one; a write that
would (a push, a setting, a poll that parks) is refused past `max_queues` before anything
changes (`Queues.admit`). Whatever may leave a queue empty notes it (`Queues.note_emptied`),
and a QUEUE_SWEEP timer SWEEP_DELAY_MS later forgets those still idle (`Queues.sweep_idle`).

Persistence. With the change log tracking, every job that enters a state (or renews its
lease) is recorded in its `changed` and every forgotten one in its `deleted`; the actor
writes both once per pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

from broker.engine.rules.deadlines import (
    KEY_EXPIRY,
    LEASE,
    PROMOTE,
    QUEUE_SWEEP,
    TTL_REASON,
    arm_timeout,
    arm_ttl,
    dlq_reason,
    retry_delay,
    timer_is_current,
)
from broker.engine.rules.dlq import enter_dead_letters
from broker.engine.rules.housekeeping import (
    DROP_SLICE,
    PURGE_SLICE,
    Purge,
    Upkeep,
    worth_compacting,
)
from broker.engine.sink import ReplySink
from broker.engine.state.changes import ChangeLog
from broker.engine.state.dependencies import KEEP_DONE_IDS as DEPENDENCIES_KEEP
from broker.engine.state.dependencies import Dependencies
from broker.engine.state.ids import uuid7, uuid7s
from broker.engine.state.keys import DEBOUNCE, UNIQUE, KeyRegistry
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    FAILED,
    MAX_TIMELINE,
    PRIORITIZED,
    QUEUED_STATES,
    READY_STATES,
    TIMELINE_ENTRY,
    WAITING,
    WAITING_CHILDREN,
    Job,
)
from broker.engine.state.observers import Observers
from broker.engine.state.queues import MAX_QUEUES, Queues, QueueState
from broker.engine.state.restore import restore
from broker.engine.state.retention import (
    Retention,
    expire_retained,
    mark_finished,
    next_finish,
    retain,
)
from broker.engine.state.timers import TimerWheel

RESTORE_SLICE = 10_000
"""Jobs restored between two yields of `EngineState.restore`."""
NOT_STARTED = frozenset({WAITING, PRIORITIZED, DELAYED, WAITING_CHILDREN})
READY = frozenset({WAITING, PRIORITIZED, DELAYED})  # how a queued job reports can change
# States a job leaves with nothing but its count to undo, when it holds no group and no heap
# entry (a job popped from the ready heap holds none): `_leave` does the rest.
LEAVE_QUIETLY = frozenset({WAITING, PRIORITIZED, ACTIVE, WAITING_CHILDREN})
ARRIVE_MORE = frozenset({FAILED, DELAYED})  # states entered with more than a count (`_arrive`)
# The ids of completed jobs remembered (dependencies.py), read here: tests lower it.
KEEP_DONE_IDS = DEPENDENCIES_KEEP

TIMELINE_FULL = MAX_TIMELINE * TIMELINE_ENTRY  # values in a timeline at its cap

Failure = tuple[Job, str, bool, str]
"""A failure still to apply in a cascade (see `EngineState.fail`): the job, its reason,
whether it is removed rather than kept failed, and the cause passed up to its parent."""


class EngineState:
    """Every job and queue, the timer wheel and retention, and the owners of the rest (see the
    module docstring); pure (callers pass `now`)."""

    def __init__(
        self,
        *,
        keep_completed: int = 10_000,
        keep_failed: int = 10_000,
        keep_completed_ms: float = 7 * 86_400_000,
        keep_failed_ms: float = 7 * 86_400_000,
        max_queues: int = MAX_QUEUES,
    ) -> None:
        # At most 30 attributes: past 30 CPython 3.11 stops sharing the instance's keys and
        # every `self.<name>` read is slower (measured with 31: +1.9k instructions a PUSH).
        self.jobs: dict[str, Job] = {}
        self.wheel = wheel = TimerWheel()
        self.keys = KeyRegistry(wheel, KEY_EXPIRY)
        self.completed = Retention(COMPLETED, keep_completed, keep_completed_ms)
        self.failed = Retention(FAILED, keep_failed, keep_failed_ms)
        self._seq = itertools.count()
        # The jobs each connection pulled without a lease (requeued when it goes), kept here
        # and not on the connection: the engine never writes a transport's fields.
        self.holdings: dict[ReplySink, set[str]] = {}
        # The time of the current pass (Engine.tick sets it), for job timelines.
        self.now = 0.0
        # The timeline of the job that last entered its first state (see `_record`).
        self._first_entry: tuple[Any, ...] = ("", 0.0, None)
        # The owners of the rest; each changes only its own fields.
        self.changes = changes = ChangeLog()
        self.deps = Dependencies(self.jobs)
        self.observers = Observers(max_queues)
        self.upkeep = upkeep = Upkeep(changes)
        # The queues by name, with their cap and sweep (see the module docstring).
        self.queues = Queues(max_queues, wheel, QUEUE_SWEEP, changes, upkeep)
        # Whether job events are recorded (someone listens): set by the actor for each pass,
        # like `now`; the events go to the observers.
        self.emitting = False

    def emit(self, kind: str, job: Job, **extra: Any) -> None:
        """Record a job event for the subscribers and webhooks (cheap when nobody listens)."""
        if self.emitting:
            self.observers.record((kind, job, extra))

    def announce(self, name: str, data: dict[str, Any]) -> None:
        """Record an event that is not a job's (`queue:paused`, `worker:connected`...) for the
        subscribers (cheap when nobody listens)."""
        if self.emitting:
            self.observers.record((name, None, data))

    # -- lookups -------------------------------------------------------------------------------

    def jobs_of(self, queue: str, states: Iterable[str] | None = None) -> list[Job]:
        """The jobs of `queue` (in the given states, else all), in the order they were added."""
        wanted = None if states is None else set(states)
        return [
            job
            for job in self.jobs.values()
            if job.queue == queue and (wanted is None or job.state in wanted)
        ]

    # -- transitions ---------------------------------------------------------------------------

    def enter_many(
        self, jobs: Sequence[Job], state: str, persist: bool = True, error: str | None = None
    ) -> None:
        """Move each of `jobs` into `state`: the transition, for many jobs at once.

        The bookkeeping every transition owes is written here: the queue's counts, the tallies
        of the state left (`_leave`) and entered (`_arrive`), the timeline (`_record`), and the
        store's row (`persist`: noted in the change log while it tracks). What is the same for
        the whole batch is looked up once; the usual job (no group, leaving a state that
        leaves nothing behind) pays a count down, a count up and its timeline entry.
        `_enter` is the same for one job, written out: a call of this with one job cost 2,200
        instructions more per transition (measured with callgrind)."""
        if not jobs:
            return
        queues = self.queues
        changes = self.changes
        changed = changes.changed if persist and changes.tracking else None  # jobs to write
        entry = (state, self.now, error)  # what the usual timeline gains
        arrive = state in ARRIVE_MORE
        name = ""  # the last job's queue
        queue: Any = None
        counts: Any = None
        for job in jobs:
            if job.queue is not name:  # (names are shared strings; an equal one looks again)
                name = job.queue
                queue = queues.get(name)
                if queue is None:
                    queue = self.queues.make(name)
                counts = queue.counts
            old = job.state
            group = job.opts.group_id
            if old:
                if group is None and old in LEAVE_QUIETLY and job.ready_seq < 0:
                    counts[old] -= 1
                else:
                    self._leave(queue, job)
                job.state = state
                timeline = job.timeline
                # A placed job's timeline ends with the state it leaves (the invariant of
                # `_record`), so a new state is a new entry: `_record`'s usual case, inline.
                if old != state and timeline and len(timeline) < TIMELINE_FULL:
                    job.timeline = timeline + entry
                else:
                    self._record(job, state, error)
            else:
                job.state = state
                self._record(job, state, error)
            counts[state] += 1
            if arrive or group is not None:
                self._arrive(queue, job, state, group)
            if changed is not None:
                changed[job.id] = job
        if state == COMPLETED:
            self.completed.count += len(jobs)

    def _enter(
        self, job: Job, state: str, persist: bool = True, error: str | None = None
    ) -> QueueState:
        """`enter_many` for one job, step for step (see there why it is written out); returns
        the job's queue."""
        queue = self.queues.get(job.queue)
        if queue is None:
            queue = self.queues.make(job.queue)
        old = job.state
        group = job.opts.group_id
        if old:
            if old in LEAVE_QUIETLY and group is None and job.ready_seq < 0:
                queue.counts[old] -= 1
            else:
                self._leave(queue, job)
        job.state = state
        timeline = job.timeline
        if old != state and old and timeline and len(timeline) < TIMELINE_FULL:
            entry = (state, self.now, error)
            job.timeline = timeline + entry  # as in `enter_many`
        else:
            self._record(job, state, error)
        queue.counts[state] += 1
        if state == COMPLETED:
            self.completed.count += 1
        elif state in ARRIVE_MORE or group is not None:
            self._arrive(queue, job, state, group)
        if persist:
            changes = self.changes
            if changes.tracking:  # `ChangeLog.touch`, inline: every transition passes here
                changes.changed[job.id] = job
        return queue

    def _arrive(self, queue: QueueState, job: Job, state: str, group: str | None) -> None:
        """What entering `state` adds beyond the count: the failed tallies, the delayed set,
        the job's group tally."""
        if state == FAILED:
            self.failed.count += 1
            if queue.dead_letters is not None:
                queue.dead_letters.count += 1
        elif state == DELAYED:
            queue.delayed.add(job)
        if group is not None:
            if state == ACTIVE:
                queue.group_active[group] = queue.group_active.get(group, 0) + 1
            elif state in NOT_STARTED:
                queue.group_pending[group] = queue.group_pending.get(group, 0) + 1

    def _record(self, job: Job, state: str, error: str | None) -> None:
        """Add the state the job just entered to its timeline (the latest MAX_TIMELINE kept),
        unless it is the state the timeline ends with: a restart re-entering a stored state, or
        a job re-placed in its own state, is no transition."""
        timeline = job.timeline
        if timeline and timeline[-TIMELINE_ENTRY] == state:
            return
        if not timeline:  # a new job: jobs entering the same state at once share one tuple
            first = self._first_entry
            if first[0] != state or first[1] != self.now or first[2] != error:
                first = self._first_entry = (state, self.now, error)
            job.timeline = first
            return
        if len(timeline) >= TIMELINE_FULL:
            timeline = timeline[TIMELINE_ENTRY:]
        job.timeline = (*timeline, state, self.now, error)

    def _leave(self, queue: QueueState, job: Job) -> None:
        """Undo what the job's current state adds to its queue's tallies."""
        old = job.state
        queue.counts[old] -= 1
        if old in READY_STATES:
            if job.ready_seq >= 0:  # its heap entry stays behind, stale
                queue.stale += 1
                if worth_compacting(queue.stale, queue.entries()):
                    self.upkeep.note_untidy(queue)
        elif old == COMPLETED:
            self.completed.count -= 1
            self._left_behind(self.completed)
        elif old == FAILED:
            self.failed.count -= 1
            self._left_behind(self.failed)
            if queue.dead_letters is not None:
                queue.dead_letters.count -= 1
                self._left_behind(queue.dead_letters)
        if old == DELAYED:
            queue.delayed.discard(job)
        group = job.opts.group_id
        if group is None:
            return
        if old == ACTIVE:
            queue.group_active[group] -= 1
            if queue.waiters:  # a group slot came free: parked pulls may now take a job
                self.changes.note_dirty(queue)
        elif old in NOT_STARTED:
            queue.group_pending[group] -= 1

    def _left_behind(self, retention: Retention) -> None:
        """A job left a retained state: its entry in `retention` is stale now."""
        retention.stale += 1
        if worth_compacting(retention.stale, len(retention.entries)):
            self.upkeep.note_untidy(retention)

    def completed_once(self, job_id: str) -> bool:
        """Whether `job_id` completed (held now, or forgotten since): a satisfied dependency."""
        return self.deps.completed_once(job_id)

    def _remember_done(self, job_id: str) -> None:
        self.deps.remember_done(job_id, KEEP_DONE_IDS)  # (the cap read here: tests lower it)

    def add(self, job: Job, now: float) -> None:
        """Register a new job and place it by its dependencies and run time."""
        upkeep = self.upkeep
        if upkeep.purges:
            upkeep.finish_purges_of(job.id)
        self.jobs[job.id] = job
        deps = self.deps
        if deps.done_ids:
            deps.live_again(job.id)  # a reused custom id
        job.state = ""
        # Each step only for a job that needs it: this runs for every job pushed. The options
        # are read from `opts` directly (`job.ttl` and the others are property calls).
        opts = job.opts
        if opts.unique_key is not None or opts.debounce_id is not None:
            self.keys.take_job_keys(job, now)
        if opts.ttl:
            arm_ttl(self, job)
        observers = self.observers
        observers.totals["pushed"] += 1
        if self.emitting:  # `emit`, inline
            observers.record(("pushed", job, {}))
        if opts.depends_on:
            self.wait_for_dependencies(job, now)
        else:  # a new Job starts with no pending dependencies (every caller builds one)
            self.schedule(job, now)

    # -- restart -------------------------------------------------------------------------------

    def restore(self, jobs: list[Job], held: set[str], now: float) -> Iterator[None]:
        """Rebuild every structure from stored jobs (restore.py; `held`: the ids of those
        that were bound to a connection); a generator that yields every RESTORE_SLICE jobs."""
        return restore(self, jobs, held, now, RESTORE_SLICE)  # (read here: tests lower it)

    def restore_purges(self, purges: list[Purge]) -> None:
        """Large removals the broker stopped in the middle of: they go on (see
        housekeeping.py; their rows were skipped at load)."""
        self.upkeep.resume(purges)

    def sequence(self) -> itertools.count[int]:
        """The counter of ready heap entries (restore.py puts jobs on their heaps)."""
        return self._seq

    def wait_for_dependencies(self, job: Job, now: float) -> None:
        """Wait for the dependencies not yet completed (in waiting-children), or, when none
        is left, `schedule`."""
        pending = 0
        deps = self.deps
        for dep_id in job.opts.depends_on:
            if not deps.completed_once(dep_id):
                pending += 1
                deps.wait(job.id, dep_id)
        if pending or job.pending_deps:  # a rare field: left at its default when it is one
            job.pending_deps = pending
        if pending:
            self._enter(job, WAITING_CHILDREN)
        else:
            self.schedule(job, now)

    def schedule(self, job: Job, now: float) -> None:
        """Make a job delayed (run time in the future) or ready; past its ttl, it expires."""
        if job.opts.ttl and now >= job.created_at + job.opts.ttl:
            self.fail(job, now, TTL_REASON, job.opts.remove_on_fail)
            return
        if job.run_at > now:
            self._enter(job, DELAYED)
            self.emit("delayed", job, delay=job.run_at - now)
            job.timer_token += 1
            self.wheel.schedule(job.run_at, PROMOTE, job, job.timer_token)
        else:
            self.make_ready(job)

    def make_ready(self, job: Job) -> None:
        """Put a job in its queue's ready heap and mark the queue for waiting pulls."""
        queue = self._enter(job, PRIORITIZED if job.opts.priority > 0 else WAITING)
        queue.push_ready(job, next(self._seq))
        if queue.waiters:
            self.changes.note_dirty(queue)

    def claim(
        self,
        job: Job,
        now: float,
        owner: str | None,
        lock_ttl: float,
        holder: ReplySink | None = None,
    ) -> str | None:
        """Make a popped ready job active; returns the lease token when `owner` is given
        (`claim_many` for one job, written out: a PULL claims one)."""
        queue = self._enter(job, ACTIVE, persist=holder is None)
        job.started_at = now
        job.last_heartbeat = now
        opts = job.opts
        if (
            opts.debounce_id is not None
            or opts.timeout
            or opts.stall_timeout is not None
            or queue.stall_config
        ):
            self._start_timed(job, now)  # (else nothing to arm: see `claim_many`)
        if holder is not None:
            job.holder = holder
            held = self.holdings.get(holder)
            if held is None:
                self.holdings[holder] = {job.id}
            else:
                held.add(job.id)
        observers = self.observers
        observers.totals["pulled"] += 1
        if observers.on_start is not None:
            observers.on_start(now - job.run_at)
        if self.emitting:  # `emit`, inline: this runs for every job
            observers.record(("active", job, {}))
        if owner is None:
            return None
        return self._lease(job, now, owner, lock_ttl)

    def _lease(self, job: Job, now: float, owner: str, lock_ttl: float) -> str:
        """Give a job just started a lease held by `owner` for `lock_ttl`; returns its token."""
        token = uuid7()
        job.lock_token = token
        job.lock_owner = owner
        job.lock_ttl = lock_ttl
        job.lock_expires_at = now + lock_ttl
        self.wheel.schedule(job.lock_expires_at, LEASE, job, token)
        return token

    def claim_many(
        self,
        queue: QueueState,
        jobs: Sequence[Job],
        now: float,
        owner: str | None,
        lock_ttl: float,
        holder: ReplySink | None = None,
    ) -> list[str | None]:
        """Make each of `jobs`, just popped from `queue`'s heap, active, in order; returns
        their lease tokens (when `owner` is given). A PULLB claims up to 1000: a job of no
        group is moved to active inline (`enter_many`'s usual case), what starting adds is
        done only when there is something to do, and the leases of a run of jobs with no
        other timer are made together (`uuid7s`) and scheduled as one (`schedule_many`).

        A job claimed for a connection (`holder`, no lease) is not written to the store: after
        a restart its stored waiting row gives exactly what a written active row would (back
        to waiting, no attempt spent), so the write would buy nothing.
        """
        if len(jobs) == 1:  # a PULL: the one-job form costs less than a loop of one
            return [self.claim(jobs[0], now, owner, lock_ttl, holder)]
        counts = queue.counts
        changes = self.changes
        changed = changes.changed if holder is None and changes.tracking else None
        entry = (ACTIVE, self.now, None)  # what a started job's timeline gains
        stalls = bool(queue.stall_config)
        held = None
        if holder is not None:
            held = self.holdings.get(holder)
            if held is None:
                held = self.holdings[holder] = set()
            held.update([job.id for job in jobs])
        tokens: list[str | None] = [None] * len(jobs)
        if owner is not None:
            tokens = cast(list[str | None], uuid7s(len(jobs)))
        leased = 0  # jobs[:leased] have their leases
        entered = 0  # jobs moved by `_enter`, which counts them itself
        for job in jobs:
            opts = job.opts
            timeline = job.timeline
            if opts.group_id is None and len(timeline) < TIMELINE_FULL:
                # `enter_many(jobs, ACTIVE)` for a popped job (ready, no stale heap entry, its
                # timeline ending with the ready state) of no group, inline; the count of
                # active jobs is added after the loop.
                counts[job.state] -= 1
                job.state = ACTIVE
                job.timeline = timeline + entry
                if changed is not None:
                    changed[job.id] = job
            else:
                self._enter(job, ACTIVE, holder is None)
                entered += 1
            if held is not None:
                job.holder = holder
            job.started_at = now
            job.last_heartbeat = now
            if (
                opts.debounce_id is not None
                or opts.timeout  # (only a processing timeout leaves a job `late_open`)
                or opts.stall_timeout is not None
                or stalls
            ):
                if owner is not None:  # the leases before it first: timers in claim order
                    at = jobs.index(job, leased)  # (jobs are distinct)
                    self._lease_run(jobs[leased:at], tokens[leased:at], now, owner, lock_ttl)
                    leased = at
                self._start_timed(job, now)
                if owner is not None:  # (its lease after its other timers, as one at a time)
                    self._lease_run([job], tokens[leased : leased + 1], now, owner, lock_ttl)
                    leased += 1
            # Else no `arm_timeout`: nothing to arm, and `activation` only tells the timers it
            # arms for one claim from a later claim's.
        counts[ACTIVE] += len(jobs) - entered
        if owner is not None:
            rest = jobs[leased:] if leased else jobs
            self._lease_run(rest, tokens[leased:] if leased else tokens, now, owner, lock_ttl)
        observers = self.observers
        observers.totals["pulled"] += len(jobs)
        on_start = observers.on_start
        if on_start is not None:
            for job in jobs:
                on_start(now - job.run_at)
        if self.emitting:
            observers.record_many([("active", job, {}) for job in jobs])
        return tokens

    def _lease_run(
        self, jobs: Sequence[Job], tokens: Sequence[Any], now: float, owner: str, lock_ttl: float
    ) -> None:
        """`_lease` for each of `jobs` with its token from `tokens`: one deadline, one
        `schedule_many`."""
        expires = now + lock_ttl
        for job, token in zip(jobs, tokens, strict=True):
            job.lock_token = token
            job.lock_owner = owner
            job.lock_ttl = lock_ttl
            job.lock_expires_at = expires
        self.wheel.schedule_many(expires, LEASE, jobs, tokens)

    def _start_timed(self, job: Job, now: float) -> None:
        """What a start adds for a job with a debounce key (an untimed one lasts until the job
        starts), a processing timeout or a stall check."""
        if job.opts.debounce_id is not None:
            self.keys.free((DEBOUNCE, job.queue, job.opts.debounce_id), job.id, only_untimed=True)
        if job.late_open:  # a rare field (model.py): written only to change it
            job.late_open = False
        arm_timeout(self, job, now)

    def renew_lease(self, job: Job, now: float, ttl: float) -> None:
        """Extend an active job's lease to `now + ttl` (a ttl of 0 or less ends it now)."""
        job.lock_ttl = ttl
        job.lock_expires_at = now + ttl
        job.last_heartbeat = now
        self.wheel.schedule(job.lock_expires_at, LEASE, job, job.lock_token)
        self.touch(job)

    def touch(self, job: Job) -> None:
        """Record a change to a job that did not change its state (for the store)."""
        self.changes.touch(job)

    def return_to_queue(self, job: Job, now: float, run_at: float) -> None:
        """Put an active job back in its queue, to run at `run_at` (MoveToWait, ChangeDelay)."""
        self._end_activity(job)
        job.started_at = None
        job.run_at = run_at
        self.schedule(job, now)

    def reschedule(self, job: Job, now: float, run_at: float) -> None:
        """Move a queued job's run time (ready or delayed, by the new time)."""
        job.run_at = run_at
        job.timer_token += 1  # a pending promotion timer no longer applies
        self.schedule(job, now)

    def revive(self, job: Job, now: float) -> bool:
        """A finished job goes back to waiting with a fresh budget (retry from the DLQ);
        False when the job is gone meanwhile (a batch operation may have forgotten it)."""
        if self.jobs.get(job.id) is not job:
            return False
        job.attempts = 0
        job.stall_count = 0
        job.completed_at = None
        job.failed_reason = None
        job.stacktrace = None
        job.run_at = now
        if job.opts.unique_key is not None:
            key = (UNIQUE, job.queue, job.opts.unique_key)
            if self.keys.owner(key, now) is None:
                self.keys.take(key, job.id)
        self.wait_for_dependencies(job, now)  # a dependency may still be unfinished
        return True

    def remove(self, job: Job) -> None:
        """Forget a job (Cancel, Drain, Clean...); nothing when it is gone already."""
        if self.jobs.get(job.id) is not job:
            return
        self._end_activity(job)
        self.keys.free_job_keys(job)
        self.forget(job)
        self.emit("removed", job)

    def remove_many(self, jobs: list[Job]) -> list[Job]:
        """`remove` for many jobs at once (Drain, Obliterate, Clean...); returns those removed.

        A queued job with nothing else attached (no group, key, lease or holder: the bulk of
        a drain) takes a short path with the same effects, inlined and with its queue's
        tallies settled in the loop (measured three times cheaper), so a million-job removal
        holds its pass for about a second; any other job goes through `remove`."""
        removed: list[Job] = []
        keep = removed.append
        live = self.jobs
        finished = self.observers.finish
        queue: QueueState | None = None
        counts: dict[str, int] = {}
        stale_timers = stale_entries = 0
        for job in jobs:
            job_id = job.id
            if live.get(job_id) is not job:
                continue
            keep(job)
            state = job.state
            keys = job.opts.unique_key is not None or job.opts.debounce_id is not None
            held = job.lock_token is not None or job.holder is not None
            if state not in QUEUED_STATES or keys or held or job.opts.group_id is not None:
                self.remove(job)
                continue
            if queue is None or queue.name != job.queue:
                self._settle_removed(queue, counts, stale_entries)
                queue, counts, stale_entries = self.queues.make(job.queue), {}, 0
            counts[state] = counts.get(state, 0) + 1
            if state == DELAYED:
                queue.delayed.discard(job)
                stale_timers += 1
            elif job.ready_seq >= 0:
                stale_entries += 1
            if job.opts.ttl:
                stale_timers += 1
            finished(job)
            job.state = ""
            del live[job_id]
        self._settle_removed(queue, counts, stale_entries)
        self._note_stale_timers(stale_timers)
        if self.changes.tracking:
            self.changes.delete_jobs(removed)
        if self.emitting:
            for job in removed:
                self.emit("removed", job)
        return removed

    def _settle_removed(self, queue: QueueState | None, counts: dict[str, int], stale: int) -> None:
        """The tallies of jobs `remove_many` took from `queue` by its short path."""
        if queue is None:
            return
        for state, count in counts.items():
            queue.counts[state] -= count
        queue.stale += stale
        if worth_compacting(queue.stale, queue.entries()):
            self.upkeep.note_untidy(queue)
        if not any(queue.counts.values()):  # its last jobs
            self.queues.note_emptied(queue, self.now)

    def _note_stale_timers(self, stale: int) -> None:
        wheel = self.wheel
        wheel.stale += stale
        # A queue sweep's armed timer is no job's: a wheel of job timers all stale but it is
        # compacted as one all stale (a queue emptied job by job lets go of every job).
        jobs_timers = len(wheel) - self.queues.sweep_armed()
        if worth_compacting(wheel.stale, jobs_timers):
            self.upkeep.note_untidy(wheel)

    def _end_activity(self, job: Job) -> None:
        if job.lock_token is not None:
            job.lock_token = None
            job.lock_owner = None  # a rare field (model.py): only a leased job has one set
        holder = job.holder
        if holder is not None:
            held = self.holdings.get(holder)
            if held is not None:
                held.discard(job.id)
                if not held:  # an HTTP request never disconnects: drop its entry now
                    del self.holdings[holder]
            job.holder = None

    def requeue_holdings(self, sink: ReplySink, now: float) -> None:
        """A connection went: the jobs it pulled without a lease and did not settle are
        ready again (no attempt spent)."""
        for job_id in self.holdings.pop(sink, ()):
            job = self.jobs.get(job_id)
            if job is not None and job.state == ACTIVE and job.holder is sink:
                self.requeue(job, now)

    def requeue(self, job: Job, now: float) -> None:
        """Put an active job back, ready at its old run time (disconnect, lease expiry)."""
        self._end_activity(job)
        job.started_at = None
        job.last_heartbeat = now
        self.make_ready(job)

    def complete(self, job: Job, now: float, result: bytes | None, remove: bool) -> None:
        """ACK: the job is done; keep it (within retention) or forget it."""
        self._end_activity(job)
        opts = job.opts
        if opts.unique_key is not None or opts.debounce_id is not None:  # most jobs hold no key
            self.keys.free_job_keys(job)
        observers = self.observers
        if remove:
            job.result = result  # for a WaitJob answered at the end of the pass (lifecycle.py)
            self.forget(job)
            self._remember_done(job.id)
        else:
            job.completed_at = now
            job.result = result
            job.progress = 100
            self._enter(job, COMPLETED)
            observers.finish(job)
            mark_finished(job)
            retain(self, self.completed, job, now)
        observers.totals["completed"] += 1
        observers.telemetry.record(job.queue, COMPLETED, now)
        if observers.on_complete is not None and job.started_at is not None:
            observers.on_complete(now - job.started_at)
        if self.emitting:  # `emit`, inline: this runs for every job
            observers.record(("completed", job, {}))
        if self.deps.dependents:
            self._unblock_dependents(job, now)

    def complete_many(self, jobs: list[Job], results: list[Any], now: float) -> None:
        """ACKB: `complete` each of `jobs` (active, distinct) with its result, in order, with
        what `complete` repeats per job done once: the jobs kept are settled in runs (between
        jobs removed on completion, which `complete` forgets in their place; one job a run
        while some job waits for dependencies, so that what completing one releases comes
        before the next): each job moves to completed as it is settled (`enter_many`'s usual
        case inline for a job of no group), what observers hear of a run after its last; the
        totals and minute counts of the batch are added at its end, and retention's caps are
        applied once, after the batch (it forgets the same oldest jobs as one job at a time
        would)."""
        holdings = self.holdings
        dependents = self.deps.dependents
        retention = self.completed
        entries = retention.entries
        queues = self.queues
        changes = self.changes
        changed = changes.changed if changes.tracking else None
        entry = (COMPLETED, self.now, None)  # what a completed job's timeline gains
        settled: list[str] = []  # the queue of each job kept
        name = ""  # the last kept job's queue
        counts: Any = None  # and its counts
        start = 0  # jobs[start:]: not yet heard of by observers (kept) or completed (removed)
        for job, result in zip(jobs, results, strict=True):
            opts = job.opts
            if opts.remove_on_complete:
                at = jobs.index(job, start)  # (jobs are distinct)
                self._settle_run(jobs[start:at], now)  # those before it, first
                self.complete(job, now, result, True)
                start = at + 1
                continue
            if job.lock_token is not None:
                self._end_activity(job)
            elif job.holder is not None:  # `_end_activity` (no lease to end), inline
                holder = job.holder
                held = holdings.get(holder)
                if held is not None:
                    held.discard(job.id)
                    if not held:
                        del holdings[holder]
                job.holder = None
            if opts.unique_key is not None or opts.debounce_id is not None:
                self.keys.free_job_keys(job)
            job.completed_at = now
            job.result = result
            job.progress = 100
            timeline = job.timeline
            if opts.group_id is None and job.ready_seq < 0 and len(timeline) < TIMELINE_FULL:
                # `enter_many([job], COMPLETED)` for an active job (its timeline ends with its
                # start) of no group, inline.
                if job.queue is not name:  # (names are shared strings; an equal one looks again)
                    name = job.queue
                    counts = queues[name].counts
                counts[ACTIVE] -= 1
                job.state = COMPLETED
                job.timeline = timeline + entry
                counts[COMPLETED] += 1
                retention.count += 1
                if changed is not None:
                    changed[job.id] = job
            else:
                self._enter(job, COMPLETED)
            job.retained_seq = seq = next_finish()  # `mark_finished`
            entries.append((now, seq, job))  # `retain`, its caps applied after the batch
            settled.append(job.queue)
            if dependents:
                at = jobs.index(job, start) + 1
                self._settle_run(jobs[start:at], now)
                start = at
                self._unblock_dependents(job, now)
        self._settle_run(jobs if start == 0 else jobs[start:], now)
        observers = self.observers
        totals, telemetry = observers.totals, observers.telemetry
        for queue_name in set(settled):
            count = settled.count(queue_name)
            totals["completed"] += count
            telemetry.record(queue_name, COMPLETED, now, count)
        if settled:
            expire_retained(self, retention, now)

    def _settle_run(self, jobs: list[Job], now: float) -> None:
        """A run of `complete_many`'s jobs, completed (moved by the loop there): what
        observers hear of it, in order."""
        if not jobs:
            return
        observers = self.observers
        observers.finish_many(jobs)
        on_complete = observers.on_complete
        if on_complete is not None:
            for job in jobs:
                if job.started_at is not None:
                    on_complete(now - job.started_at)
        if self.emitting:
            observers.record_many([("completed", job, {}) for job in jobs])

    def retry(self, job: Job, now: float) -> None:
        """FAIL with attempts left: back to delayed after the backoff."""
        self._end_activity(job)
        job.started_at = None
        job.run_at = now + retry_delay(job)
        self.emit("retried", job, error=job.failed_reason, delay=job.run_at - now)
        self.schedule(job, now)

    def fail(self, job: Job, now: float, reason: str, remove: bool) -> None:
        """Terminal failure: to the dead-letter queue (failed), or forgotten; then its flow
        parent's failure policy, which may fail the parent, and so on up the chain.

        The chain is walked in a loop, not by recursion: a flow may be any number of levels
        deep, and each step leads to at most one more failure (a job has one parent)."""
        self._fail_chain((job, reason, remove, reason), now)

    def _fail_one(
        self, job: Job, reason: str, remove: bool, cause: str, now: float
    ) -> Failure | None:
        """Fail one job (see `fail`); returns the failure its parent's policy calls for."""
        self._end_activity(job)
        self.keys.free_job_keys(job)
        job.failed_reason = reason
        self.observers.totals["failed"] += 1
        self.observers.telemetry.record(job.queue, FAILED, now)
        self.emit("failed", job, error=reason)
        if remove:
            self.forget(job)
            return self._parent_policy(job, cause, now)
        job.completed_at = now
        self._enter(job, FAILED, error=reason)
        self.observers.finish(job)
        mark_finished(job)
        retain(self, self.failed, job, now)
        enter_dead_letters(self, self.queues[job.queue], job, now)
        if self.emitting:
            self._announce_dead_letter(job)
        return self._parent_policy(job, cause, now)

    def _announce_dead_letter(self, job: Job) -> None:
        """`dlq:added` for a job that just failed for good, with the reference's category."""
        event = {"queue": job.queue, "jobId": job.id, "reason": dlq_reason(job)}
        self.announce("dlq:added", event)

    def child_failed(self, child: Job, reason: str, now: float) -> None:
        """A flow child failed for good: apply its failure policy to its waiting parent (and
        whatever that failure leads to, see `fail`)."""
        self._fail_chain(self._parent_policy(child, reason, now), now)

    def _fail_chain(self, failure: Failure | None, now: float) -> None:
        """Apply `failure` and every failure it leads to (see `fail`)."""
        while failure is not None:
            failure = self._fail_one(*failure, now)

    def _parent_policy(self, child: Job, cause: str, now: float) -> Failure | None:
        """Apply a failed child's policy to its waiting parent; returns the parent's failure
        when the policy fails it (or releases it past its ttl), for the caller to apply.
        `cause` is what failed the chain's first job: a parent's reason names its child and
        that cause, not the child's own reason (down a chain of 100,000 jobs, reasons that
        quoted each other would grow to gigabytes).

        failParentOnFailure fails the parent; continueParentOnFailure releases the parent at
        once, recording the error; removeDependencyOnFailure and ignoreDependencyOnFailure drop
        the child from what the parent waits for (ignore records the error). Without a
        policy the parent keeps waiting, visibly, in waiting-children: nothing is dropped.
        """
        parent = self.jobs.get(child.opts.parent_id) if child.opts.parent_id else None
        if parent is None or parent.state != WAITING_CHILDREN:
            return None
        key = f"{child.queue}:{child.id}"
        reason = child.failed_reason or cause
        if child.opts.fail_parent_on_failure:
            why = f"Child job {child.id} failed: {cause}"
            return parent, why, parent.opts.remove_on_fail, cause
        if child.opts.continue_parent_on_failure:
            parent.child_failures = {**(parent.child_failures or {}), key: reason}
            return self._release(parent, now)
        if child.opts.remove_dependency_on_failure or child.opts.ignore_dependency_on_failure:
            if child.id not in parent.opts.depends_on:
                return None  # attached (UpdateParent) without being waited for
            if child.opts.ignore_dependency_on_failure:
                parent.ignored_failures = {**(parent.ignored_failures or {}), key: reason}
            return self._drop_dependency(parent, child.id, now)
        return None

    def _release(self, job: Job, now: float) -> Failure | None:
        """`schedule` a job that stops waiting, except that one past its ttl is returned as
        the failure it is due (for the caller's loop, see `fail`)."""
        if job.opts.ttl and now >= job.created_at + job.opts.ttl:
            return job, TTL_REASON, job.opts.remove_on_fail, TTL_REASON
        self.schedule(job, now)
        return None

    def drop_dependency(self, parent: Job, dep_id: str, now: float) -> None:
        """A waiting job stops waiting for `dep_id` (not completed); it is scheduled once
        nothing else is pending. The edge goes for good (stored), so neither a restart nor the
        dependency's completion later counts it again."""
        self._fail_chain(self._drop_dependency(parent, dep_id, now), now)

    def _drop_dependency(self, parent: Job, dep_id: str, now: float) -> Failure | None:
        """`drop_dependency`; returns the parent's failure when it is released past its ttl."""
        parent.depends_on = [dep for dep in parent.opts.depends_on if dep != dep_id]
        self.touch(parent)
        if not self.deps.stop_waiting(parent.id, dep_id):
            return None  # it completed once (then ran again): no longer among the pending ones
        parent.pending_deps -= 1
        if parent.pending_deps <= 0:
            return self._release(parent, now)
        return None

    def wait_for_children(self, job: Job, now: float) -> None:
        """An active job gives up its activation to wait for its unfinished dependencies
        (MoveToWaitingChildren); it runs again when they complete."""
        self._end_activity(job)
        job.started_at = None
        self.wait_for_dependencies(job, now)

    def _unblock_dependents(self, job: Job, now: float) -> None:
        for dependent_id in self.deps.take_waiting(job.id):
            dependent = self.jobs.get(dependent_id)
            if dependent is None or dependent.state != WAITING_CHILDREN:
                continue
            dependent.pending_deps -= 1
            if dependent.pending_deps <= 0:
                self.schedule(dependent, now)

    def forget(self, job: Job) -> None:
        """Drop a job entirely: its tallies, its timers (counted stale), its store row. No
        event: the caller decides what the client hears (removed, retention, removeOn...)."""
        state = job.state
        if state == COMPLETED:
            self._remember_done(job.id)
        self._timers_left_behind(job)
        if state:
            queue = self.queues[job.queue]
            self._leave(queue, job)
            counts = queue.counts
            # Perhaps its last job (the sweep looks closer): none left in its state or active.
            if not counts[state] and not counts[ACTIVE]:
                self.queues.note_emptied(queue, self.now)
        self.observers.finish(job)
        job.state = ""
        del self.jobs[job.id]
        self.changes.delete(job.id)

    def forget_expired(self, jobs: list[Job], retention: Retention) -> None:
        """`forget` jobs current in `retention` whose entries it has just dropped (aged or
        pushed out by its caps): none of theirs is left stale there. Completed jobs, which an
        ACK at a full retention forgets one for one, take a short path with the same effects
        (a completed job holds no timer but its ttl's, and no group tally)."""
        if retention is not self.completed:
            for job in jobs:
                self.forget(job)  # which counts each one's entry stale in `retention`...
            retention.stale = max(retention.stale - len(jobs), 0)  # ...that is gone
            return
        live = self.jobs
        finished = self.observers.finish
        name: str | None = None  # the last job's queue, and its counts
        counts: dict[str, int] = {}
        ttl_timers = 0
        for job in jobs:
            job_id = job.id
            if job.opts.ttl:
                ttl_timers += 1
            if job.queue != name:
                name = job.queue
                counts = self.queues[name].counts
            counts[COMPLETED] -= 1
            if not counts[COMPLETED] and not counts[ACTIVE]:  # perhaps the queue's last job
                self.queues.note_emptied(self.queues[name], self.now)
            finished(job)
            job.state = ""
            del live[job_id]
        self.deps.remember_done_jobs(jobs, KEEP_DONE_IDS)  # `_remember_done` of each
        self.changes.delete_jobs(jobs)
        retention.count -= len(jobs)
        if ttl_timers:
            self._note_stale_timers(ttl_timers)

    # -- housekeeping (see housekeeping.py) ----------------------------------------------------

    def _timers_left_behind(self, job: Job) -> None:
        """Count the wheel timers a job being forgotten leaves behind (an estimate: it only
        decides when the wheel is compacted)."""
        state = job.state
        stale = bool(job.opts.ttl) + (state == DELAYED)
        if state == ACTIVE:
            stale += 1 + bool(job.opts.timeout)
        if stale:
            self._note_stale_timers(stale)

    def purge_later(self, jobs: list[Job]) -> None:
        """After a bulk removal of `jobs` (already forgotten): let go of them in slices and,
        when there are many and a store, delete their rows in slices as a Purge (its tombstone
        is committed with this pass, see housekeeping.py)."""
        self.upkeep.purge_later(jobs, PURGE_SLICE)  # (the slice read here: tests lower it)

    def housekeeping_due(self) -> bool:
        """Whether work is left for `housekeep` (the actor then runs passes without sleeping).
        The actor reads the three fields inline on every pass (actor.py): keep it in step."""
        return self.upkeep.due()

    def housekeep(self) -> None:
        """One pass's share of housekeeping: compact what removals left mostly stale, advance
        the purges by one slice, let go of one slice of the graveyard."""
        self.upkeep.run(self._compact_one, PURGE_SLICE, DROP_SLICE)

    def compact(self) -> None:
        """Prune stale heap and timer entries and forget idle queues at once (CompactMemory)."""
        self.queues.compact(self.now)
        self.wheel.compact(self._timer_is_current)
        self.completed.compact()
        self.failed.compact()

    def _timer_is_current(self, timer: Any) -> bool:
        return timer_is_current(self, timer)

    def _compact_one(self, thing: Any) -> None:
        if isinstance(thing, QueueState):
            self.upkeep.bury(thing.compact_ready())
        elif isinstance(thing, Retention):
            thing.compact()
        else:
            self.upkeep.bury(thing.compact(self._timer_is_current))

    # -- timers --------------------------------------------------------------------------------
