"""EngineState: every job and queue, and the only code that moves a job between states.

Theory of operation. The engine is single-writer: one actor calls into this object, so nothing
here locks. Each transition goes through `_enter`, which keeps the per-queue counts exact, and
the structures that depend on a state (ready heap, timer wheel, lease, holder) are updated next
to it. Handlers check everything first and mutate after, so an error leaves state untouched.

Retention. Completed and failed jobs are kept (for GetJob, GetResult, jobId idempotency and
dependency checks) up to a count cap each; the oldest are then forgotten.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from .model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    FAILED,
    PRIORITIZED,
    QUEUED_STATES,
    WAITING,
    WAITING_CHILDREN,
    Job,
    uuid7,
)
from .queues import QueueState
from .timers import TimerWheel

MAX_BACKOFF_MS = 3_600_000
MAX_STALLS = 3

LEASE = "lease"
PROMOTE = "promote"
POLL = "poll"


def retry_delay(job: Job) -> float:
    """The backoff before the next attempt: fixed, or base·2^(attempts-1), capped (1 h default)."""
    config = job.backoff_config
    cap = MAX_BACKOFF_MS
    if config is not None:
        cap = config.get("maxDelay", MAX_BACKOFF_MS)
        if config["type"] == "fixed":
            return min(job.backoff, cap)
    exponent = max(job.attempts - 1, 0)
    if exponent > 64:
        return cap
    return min(job.backoff * (2**exponent), cap)


class EngineState:
    """All job state plus the timer wheel; pure (callers pass `now`)."""

    def __init__(self, *, keep_completed: int = 10_000, keep_failed: int = 10_000) -> None:
        self.jobs: dict[str, Job] = {}
        self.queues: dict[str, QueueState] = {}
        self.unique_keys: dict[tuple[str, str], str] = {}
        self.dependents: dict[str, list[str]] = {}
        self.wheel = TimerWheel()
        self.keep_completed = keep_completed
        self.keep_failed = keep_failed
        self._completed: deque[str] = deque()
        self._failed: deque[str] = deque()
        self._seq = itertools.count()
        self.dirty_queues: set[QueueState] = set()

    # -- lookups -------------------------------------------------------------------------------

    def queue(self, name: str) -> QueueState:
        """The state of queue `name`, created on first use."""
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = QueueState(name)
        return queue

    def unique_owner(self, queue: str, key: str) -> str | None:
        """The id of the live job that holds `key` in `queue`, if any."""
        return self.unique_keys.get((queue, key))

    # -- transitions ---------------------------------------------------------------------------

    def _enter(self, job: Job, state: str) -> None:
        counts = self.queue(job.queue).counts
        if job.state in counts and job.id in self.jobs:
            counts[job.state] -= 1
        job.state = state
        counts[state] += 1

    def add(self, job: Job, now: float) -> None:
        """Register a new job and place it by its dependencies and run time."""
        self.jobs[job.id] = job
        job.state = ""
        if job.unique_key is not None:
            self.unique_keys[(job.queue, job.unique_key)] = job.id
        pending = 0
        for dep_id in job.depends_on:
            dep = self.jobs.get(dep_id)
            if dep is None or dep.state != COMPLETED:
                pending += 1
                self.dependents.setdefault(dep_id, []).append(job.id)
        job.pending_deps = pending
        if pending:
            self._enter(job, WAITING_CHILDREN)
        else:
            self.schedule(job, now)

    def schedule(self, job: Job, now: float) -> None:
        """Make a job delayed (run time in the future) or ready."""
        if job.run_at > now:
            self._enter(job, DELAYED)
            job.timer_token += 1
            self.wheel.schedule(job.run_at, PROMOTE, job, job.timer_token)
        else:
            self.make_ready(job)

    def make_ready(self, job: Job) -> None:
        """Put a job in its queue's ready heap and mark the queue for waiting pulls."""
        self._enter(job, PRIORITIZED if job.priority > 0 and job.group_id is None else WAITING)
        queue = self.queue(job.queue)
        queue.push_ready(job, next(self._seq))
        if queue.waiters:
            self.dirty_queues.add(queue)

    def claim(self, job: Job, now: float, owner: str | None, lock_ttl: float) -> str | None:
        """Make a popped ready job active; returns the lease token when `owner` is given."""
        self._enter(job, ACTIVE)
        job.started_at = now
        job.last_heartbeat = now
        if owner is None:
            return None
        token = uuid7()
        job.lock_token = token
        job.lock_owner = owner
        job.lock_ttl = lock_ttl
        job.lock_expires_at = now + lock_ttl
        self.wheel.schedule(job.lock_expires_at, LEASE, job, token)
        return token

    def renew_lease(self, job: Job, now: float, ttl: float) -> None:
        """Extend an active job's lease to `now + ttl` (a ttl of 0 or less ends it now)."""
        job.lock_ttl = ttl
        job.lock_expires_at = now + ttl
        self.wheel.schedule(job.lock_expires_at, LEASE, job, job.lock_token)

    def _end_activity(self, job: Job) -> None:
        job.lock_token = None
        job.lock_owner = None
        holder = job.holder
        if holder is not None:
            holder.held.discard(job.id)
            job.holder = None

    def requeue(self, job: Job, now: float) -> None:
        """Put an active job back, ready at its old run time (disconnect, lease expiry)."""
        self._end_activity(job)
        job.started_at = None
        job.last_heartbeat = now
        self.make_ready(job)

    def complete(self, job: Job, now: float, result: bytes | None, remove: bool) -> None:
        """ACK: the job is done; keep it (within retention) or forget it."""
        self._end_activity(job)
        self._release_unique(job)
        if remove:
            self._forget(job)
        else:
            self._enter(job, COMPLETED)
            job.completed_at = now
            job.result = result
            job.progress = 100
            self._retain(self._completed, job, self.keep_completed)
        self._release_dependents(job, now)

    def retry(self, job: Job, now: float) -> None:
        """FAIL with attempts left: back to delayed after the backoff."""
        self._end_activity(job)
        job.started_at = None
        job.run_at = now + retry_delay(job)
        self.schedule(job, now)

    def fail(self, job: Job, now: float, reason: str, remove: bool) -> None:
        """Terminal failure: to the dead-letter queue (failed), or forgotten."""
        self._end_activity(job)
        self._release_unique(job)
        job.failed_reason = reason
        if remove:
            self._forget(job)
            return
        self._enter(job, FAILED)
        job.completed_at = now
        self._retain(self._failed, job, self.keep_failed)

    def _release_unique(self, job: Job) -> None:
        if job.unique_key is not None:
            key = (job.queue, job.unique_key)
            if self.unique_keys.get(key) == job.id:
                del self.unique_keys[key]

    def _release_dependents(self, job: Job, now: float) -> None:
        for dependent_id in self.dependents.pop(job.id, ()):
            dependent = self.jobs.get(dependent_id)
            if dependent is None or dependent.state != WAITING_CHILDREN:
                continue
            dependent.pending_deps -= 1
            if dependent.pending_deps <= 0:
                self.schedule(dependent, now)

    def _retain(self, kept: deque[str], job: Job, limit: int) -> None:
        kept.append(job.id)
        while len(kept) > limit:
            old = self.jobs.get(kept.popleft())
            if old is not None and old.state in (COMPLETED, FAILED):
                self._forget(old)

    def _forget(self, job: Job) -> None:
        counts = self.queue(job.queue).counts
        if job.state in counts:
            counts[job.state] -= 1
        job.state = ""
        del self.jobs[job.id]

    # -- timers --------------------------------------------------------------------------------

    def fire_timers(self, now: float) -> list[Any]:
        """Apply every due delay and lease expiry; returns the due long-poll waiters."""
        expired_polls = []
        for timer in self.wheel.pop_due(now):
            job = timer.target
            if timer.kind == PROMOTE:
                if job.state == DELAYED and job.timer_token == timer.token:
                    self.make_ready(job)
            elif timer.kind == LEASE:
                # A renewed lease leaves its earlier timers behind: only the current
                # expiry counts.
                current = job.state == ACTIVE and job.lock_token == timer.token
                if current and now >= job.lock_expires_at:
                    self._lease_expired(job, now)
            elif timer.kind == POLL:
                expired_polls.append(timer.target)
        return expired_polls

    def _lease_expired(self, job: Job, now: float) -> None:
        job.attempts += 1
        job.stall_count += 1
        if job.stall_count >= MAX_STALLS:
            self.fail(job, now, f"Lock expired: job stalled {job.stall_count} times", False)
        else:
            self.requeue(job, now)

    def is_queued(self, job: Job) -> bool:
        """Whether the job waits in a queue (waiting, prioritized or delayed)."""
        return job.state in QUEUED_STATES
