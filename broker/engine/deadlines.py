"""Deadlines: the rules of everything the timer wheel drives (Retention itself: retention.py).

Delayed jobs becoming ready, leases and processing timeouts running out, stall checks, ttl
expiry, retention by count and age, dedup-key expiry: each is a timer on the wheel carrying a
token, and a timer whose token no longer matches its job is stale and ignored (lazy deletion).
`DeadlineRules` is a mixin of EngineState; its methods take `self: EngineState`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .model import ACTIVE, COMPLETED, DELAYED, FAILED, PRIORITIZED, WAITING, WAITING_CHILDREN, Job
from .retention import Retention

if TYPE_CHECKING:
    from .keys import KeyRegistry
    from .queues import QueueState
    from .timers import TimerWheel

MAX_BACKOFF_MS = 3_600_000
MAX_STALLS = 3

LEASE = "lease"
PROMOTE = "promote"
POLL = "poll"
RETENTION = "retention"
WAIT_JOB = "wait-job"
TIMEOUT = "timeout"
TTL = "ttl"
STALL = "stall"
KEY_EXPIRY = "key-expiry"
GROUP_WAKE = "group-wake"
DLQ_RETRY = "dlq-retry"
TIMEOUT_REASON = "Job timeout exceeded"
TTL_REASON = "Job expired (ttl)"


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


class DeadlineRules:
    """Timer-driven rules, mixed into EngineState."""

    if TYPE_CHECKING:  # what EngineState provides
        wheel: TimerWheel
        jobs: dict[str, Job]
        queues: dict[str, QueueState]
        keys: KeyRegistry
        completed: Retention
        failed: Retention

        def queue(self, name: str) -> QueueState: ...
        def fail(self, job: Job, now: float, reason: str, remove: bool) -> None: ...
        def requeue(self, job: Job, now: float) -> None: ...
        def retry(self, job: Job, now: float) -> None: ...
        def make_ready(self, job: Job) -> None: ...
        def emit(self, kind: str, job: Job, **extra: Any) -> None: ...
        def _forget(self, job: Job) -> None: ...
        def auto_retry(self, job: Job, finish: int, now: float) -> None: ...

    def _arm_ttl(self, job: Job) -> None:
        if job.ttl:  # 0 means none, as for `timeout`
            self.wheel.schedule(job.created_at + job.ttl, TTL, job)

    def _arm_timeout(self, job: Job, started_at: float) -> None:
        job.activation += 1
        if job.timeout:
            self.wheel.schedule(started_at + job.timeout, TIMEOUT, job, job.activation)
        self._arm_stall_check(job)

    def _arm_stall_check(self, job: Job) -> None:
        """With a `stallTimeout`, one stall check per activation: at the last heartbeat plus
        the timeout. Jobs without one rely on their lease, or on their connection closing:
        a worker that leases for five minutes and does not heartbeat is not a stalled one."""
        interval = self._stall_interval(job)
        if interval:
            self.wheel.schedule(job.last_heartbeat + interval, STALL, job, job.activation)

    def _stall_interval(self, job: Job) -> float | None:
        """The job's stallTimeout, else a stallInterval its queue was configured with."""
        if job.stall_timeout is not None and job.stall_timeout > 0:
            return job.stall_timeout
        config = self.queue(job.queue).stall_config
        if config.get("enabled", True) and config.get("stallInterval"):
            return float(config["stallInterval"])
        return None

    def _check_stall(self, job: Job, now: float) -> None:
        interval = self._stall_interval(job)
        if interval is None:
            return
        if now - job.last_heartbeat < interval:
            self._arm_stall_check(job)  # a heartbeat came meanwhile: look again later
            return
        self._count_stall(job, now, "Job stalled")

    def _retain(self, retention: Retention, job: Job, now: float) -> None:
        """Keep a job that has just finished (after `mark_finished`) in `retention`, forgetting
        what that pushes over its caps."""
        retention.add(job, job.completed_at or now)
        self.expire_retained(retention, now)

    def expire_retained(self, retention: Retention, now: float) -> None:
        """Forget finished jobs past their count or age (oldest first), and make sure a timer
        comes for the next one to age out: one pending timer per Retention, unless the next
        expiry is earlier than it (a shorter maxAge)."""
        entries = retention.entries
        while entries:
            entry = entries[0]
            if not retention.current(entry):
                entries.popleft()  # the job moved on (retried, removed): nothing to forget
                retention.stale = max(retention.stale - 1, 0)
                continue
            if retention.count <= retention.limit and entry[0] + retention.max_age_ms > now:
                break
            entries.popleft()
            self._forget(entry[2])  # leaving the state lowers retention.count
            retention.stale = max(retention.stale - 1, 0)  # ...and counted this entry stale
        expiry = retention.next_expiry()
        armed = retention.armed_at
        if expiry is not None and (armed is None or expiry < armed):
            retention.armed_at = expiry
            self.wheel.schedule(expiry, RETENTION, retention)

    def compact(self) -> None:
        """Prune stale heap and timer entries and forget idle, empty queues (CompactMemory)."""
        for name, queue in list(self.queues.items()):
            queue.compact()
            if queue.idle():
                del self.queues[name]
        self.wheel.compact(self._timer_is_current)
        self.completed.compact()
        self.failed.compact()

    def _timer_is_current(self, timer: Any) -> bool:
        job = timer.target
        if timer.kind == PROMOTE:
            return job.state == DELAYED and job.timer_token == timer.token
        if timer.kind == LEASE:
            return job.state == ACTIVE and job.lock_token == timer.token
        if timer.kind in (TIMEOUT, STALL):
            return job.state == ACTIVE and job.activation == timer.token
        if timer.kind == TTL:
            live = self.jobs.get(job.id) is job  # not a removed one whose id came back
            return live and job.state not in (COMPLETED, FAILED)
        if timer.kind == DLQ_RETRY:
            return job.state == FAILED and job.retained_seq == timer.token
        return True  # polls, WaitJob and retention decide when they fire

    def fire_timers(self, now: float) -> list[tuple[str, Any, Any]]:
        """Apply every due delay, lease expiry and retention limit; returns the due timers
        that are the engine's to handle (polls, WaitJob, crons), as (kind, target, token)."""
        for_engine: list[tuple[str, Any, Any]] = []
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
            elif timer.kind == RETENTION:
                if timer.target.armed_at == timer.at_ms:
                    timer.target.armed_at = None  # this was its pending timer
                self.expire_retained(timer.target, now)
            elif timer.kind == DLQ_RETRY:
                self.auto_retry(job, timer.token, now)
            elif timer.kind == TIMEOUT:
                if job.state == ACTIVE and job.activation == timer.token:
                    self.time_out(job, now)
            elif timer.kind == KEY_EXPIRY:
                self.keys.expire(*timer.target)
            elif timer.kind == STALL:
                if job.state == ACTIVE and job.activation == timer.token:
                    self._check_stall(job, now)
            elif timer.kind == TTL:
                if job.state in (WAITING, PRIORITIZED, DELAYED, WAITING_CHILDREN):
                    self.fail(job, now, TTL_REASON, job.remove_on_fail)
            else:
                for_engine.append((timer.kind, timer.target, timer.token))
        return for_engine

    def time_out(self, job: Job, now: float) -> None:
        """The processing timeout passed: fail the attempt exactly as a FAIL would, and
        remember it so the worker's late ACK or FAIL is answered as a no-op."""
        job.late_open = True
        job.late_token = job.lock_token
        self.settle_failure(
            job, now, TIMEOUT_REASON, unrecoverable=False, remove=job.remove_on_fail
        )

    def settle_failure(
        self, job: Job, now: float, reason: str, *, unrecoverable: bool, remove: bool
    ) -> None:
        """Count a failed attempt: retry after the backoff while attempts remain, else fail."""
        job.attempts += 1
        if unrecoverable or job.attempts >= job.max_attempts:
            self.fail(job, now, reason, remove)
        else:
            job.failed_reason = reason
            self.retry(job, now)

    def _lease_expired(self, job: Job, now: float) -> None:
        self._count_stall(job, now, "Lock expired: job stalled")

    def _count_stall(self, job: Job, now: float, reason: str) -> None:
        """A stall costs an attempt; the third one fails the job, the others requeue it."""
        job.attempts += 1
        job.stall_count += 1
        self.emit("stalled", job, stallCount=job.stall_count)
        if job.stall_count >= self.queue(job.queue).stall_config.get("maxStalls", MAX_STALLS):
            self.fail(job, now, f"{reason} {job.stall_count} times", job.remove_on_fail)
        else:
            self.requeue(job, now)
