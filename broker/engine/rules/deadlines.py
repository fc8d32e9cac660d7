"""Deadlines: the rules of everything the timer wheel drives (Retention itself: retention.py).

Delayed jobs becoming ready, leases and processing timeouts running out, stall checks, ttl
expiry, retention by count and age, dedup-key expiry: each is a timer on the wheel carrying a
token, and a timer whose token no longer matches its job is stale and ignored (lazy deletion).
The rules are functions over `TimedState`, the part of EngineState they may touch.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

from broker.engine.rules.dlq import DLQ_RETRY, DeadLetterState, auto_retry
from broker.engine.state.keys import KeyRegistry
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    FAILED,
    PRIORITIZED,
    WAITING,
    WAITING_CHILDREN,
    Job,
)
from broker.engine.state.retention import RETENTION, Retention, expire_retained

MAX_BACKOFF_MS = 3_600_000
MAX_STALLS = 3

LEASE = "lease"
PROMOTE = "promote"
POLL = "poll"
WAIT_JOB = "wait-job"
TIMEOUT = "timeout"
TTL = "ttl"
STALL = "stall"
KEY_EXPIRY = "key-expiry"
GROUP_WAKE = "group-wake"
QUEUE_SWEEP = "queue-sweep"
TIMEOUT_REASON = "Job timeout exceeded"
TTL_REASON = "Job expired (ttl)"

# Its name before the engine was split into layers: operators filter on it.
log = logging.getLogger("broker.engine.deadlines")


def retry_delay(job: Job) -> float:
    """The backoff before the next attempt: fixed, or base·2^(attempts-1), capped (1 h default)."""
    config = job.opts.backoff_config
    cap = MAX_BACKOFF_MS
    if config is not None:
        cap = config.get("maxDelay", MAX_BACKOFF_MS)
        if config["type"] == "fixed":
            return min(job.opts.backoff, cap)
    exponent = max(job.attempts - 1, 0)
    try:
        # base·2^exponent, exact and cheap for any exponent (a base of 0 stays 0, and retries
        # at once however many attempts were spent)
        delay = math.ldexp(job.opts.backoff, exponent)
    except OverflowError:  # past the largest float, so past any cap
        return cap
    return min(delay, cap)


class TimedState(DeadLetterState, Protocol):
    """What the timer rules touch of EngineState: the jobs and queues, the keys, and the
    transitions a timer can cause."""

    jobs: dict[str, Job]
    keys: KeyRegistry
    completed: Retention

    def make_ready(self, job: Job) -> None:
        """Put a job in its queue's ready heap."""
        ...

    def fail(self, job: Job, now: float, reason: str, remove: bool) -> None:
        """Terminal failure."""
        ...

    def requeue(self, job: Job, now: float) -> None:
        """An active job back, ready at its old run time."""
        ...

    def retry(self, job: Job, now: float) -> None:
        """Back to delayed after the backoff."""
        ...

    def emit(self, kind: str, job: Job, **extra: Any) -> None:
        """Record a job event."""
        ...


def dlq_reason(job: Job) -> str:
    """The reference's failure category for a failed job (from trioq's failure text; here
    beside those texts, for GetDlqStats and the `dlq:added` event)."""
    reason = job.failed_reason or ""
    if reason == TTL_REASON:
        return "ttl_expired"
    if reason == TIMEOUT_REASON:
        return "timeout"
    if "stall" in reason.lower() or "lock expired" in reason.lower():
        return "stalled"
    if job.attempts >= job.max_attempts:
        return "max_attempts_exceeded"
    return "explicit_fail"


def arm_ttl(state: TimedState, job: Job) -> None:
    """Arm the job's ttl timer (its creation plus `ttl`), if it has a ttl."""
    if job.opts.ttl:  # 0 means none, as for `timeout`
        state.wheel.schedule(job.created_at + job.opts.ttl, TTL, job)


def arm_timeout(state: TimedState, job: Job, started_at: float) -> None:
    """A job became active (`_enter` made its queue): arm its processing timeout and its stall
    check, if it has them."""
    job.activation += 1
    opts = job.opts
    if opts.timeout:
        state.wheel.schedule(started_at + opts.timeout, TIMEOUT, job, job.activation)
    # What `_stall_interval` reads, checked here first: every claim passes here, and most
    # jobs and queues configure no stall check.
    if opts.stall_timeout is not None or state.queues[job.queue].stall_config:
        _arm_stall_check(state, job)


def _arm_stall_check(state: TimedState, job: Job) -> None:
    """With a `stallTimeout`, one stall check per activation: at the last heartbeat plus
    the timeout. Jobs without one rely on their lease, or on their connection closing:
    a worker that leases for five minutes and does not heartbeat is not a stalled one."""
    interval = _stall_interval(state, job)
    if interval:
        state.wheel.schedule(job.last_heartbeat + interval, STALL, job, job.activation)


def _stall_interval(state: TimedState, job: Job) -> float | None:
    """The job's stallTimeout, else a stallInterval its queue was configured with."""
    if job.opts.stall_timeout is not None and job.opts.stall_timeout > 0:
        return job.opts.stall_timeout
    config = state.queues.make(job.queue).stall_config
    if config and config.get("enabled", True) and config.get("stallInterval"):
        return float(config["stallInterval"])
    return None


def _check_stall(state: TimedState, job: Job, now: float) -> None:
    interval = _stall_interval(state, job)
    if interval is None:
        return
    if now - job.last_heartbeat < interval:
        _arm_stall_check(state, job)  # a heartbeat came meanwhile: look again later
        return
    _count_stall(state, job, now, "Job stalled")


def timer_is_current(state: TimedState, timer: Any) -> bool:
    """Whether a timer still applies to its target (the state, activation or token it was
    armed for is still the target's): compaction prunes the timers that do not."""
    job = timer.target
    if timer.kind == PROMOTE:
        return job.state == DELAYED and job.timer_token == timer.token
    if timer.kind == LEASE:
        return job.state == ACTIVE and job.lock_token == timer.token
    if timer.kind in (TIMEOUT, STALL):
        return job.state == ACTIVE and job.activation == timer.token
    if timer.kind == TTL:
        live = state.jobs.get(job.id) is job  # not a removed one whose id came back
        return live and job.state not in (COMPLETED, FAILED)
    if timer.kind == DLQ_RETRY:
        return job.state == FAILED and job.retained_seq == timer.token
    return True  # polls, WaitJob and retention decide when they fire


def fire_timers(state: TimedState, now: float) -> list[tuple[str, Any, Any]]:
    """Apply every due delay, lease expiry and retention limit; returns the due timers
    that are the engine's to handle (polls, WaitJob, crons), as (kind, target, token).

    A timer whose rule fails (a bug) is logged and dropped: the others still fire, and the
    broker does not stop (a stored cause would stop it again at every restart)."""
    for_engine: list[tuple[str, Any, Any]] = []
    for timer in state.wheel.pop_due(now):
        if timer.kind == POLL and timer.target.done:
            # A served long poll's timer (one per parked PULL a job was handed to): nothing to
            # do, and it need not pass every rule below and then the engine's.
            continue
        try:
            handled = _apply_timer(state, timer, now)
        except Exception:
            log.exception("a %s timer failed; dropped", timer.kind)
            continue
        if handled is not None:
            for_engine.append(handled)
    return for_engine


def _apply_timer(state: TimedState, timer: Any, now: float) -> tuple[str, Any, Any] | None:
    """Apply one due timer's rule; returns it when it is the engine's to handle."""
    job = timer.target
    if timer.kind == PROMOTE:
        if job.state == DELAYED and job.timer_token == timer.token:
            state.make_ready(job)
    elif timer.kind == LEASE:
        # A renewed lease leaves its earlier timers behind: only the current
        # expiry counts.
        current = job.state == ACTIVE and job.lock_token == timer.token
        if current and now >= job.lock_expires_at:
            _lease_expired(state, job, now)
    elif timer.kind == RETENTION:
        if timer.target.armed_at == timer.at_ms:
            timer.target.armed_at = None  # this was its pending timer
        expire_retained(state, timer.target, now)
    elif timer.kind == DLQ_RETRY:
        auto_retry(state, job, timer.token, now)
    elif timer.kind == TIMEOUT:
        if job.state == ACTIVE and job.activation == timer.token:
            time_out(state, job, now)
    elif timer.kind == KEY_EXPIRY:
        state.keys.expire(*timer.target)
    elif timer.kind == STALL:
        if job.state == ACTIVE and job.activation == timer.token:
            _check_stall(state, job, now)
    elif timer.kind == TTL:
        if job.state in (WAITING, PRIORITIZED, DELAYED, WAITING_CHILDREN):
            state.fail(job, now, TTL_REASON, job.opts.remove_on_fail)
    elif timer.kind == QUEUE_SWEEP:
        state.queues.sweep_idle(now)
    else:
        return (timer.kind, timer.target, timer.token)
    return None


def time_out(state: TimedState, job: Job, now: float) -> None:
    """The processing timeout passed: fail the attempt exactly as a FAIL would, and
    remember it so the worker's late ACK or FAIL is answered as a no-op."""
    job.late_open = True
    job.late_token = job.lock_token
    remove = job.opts.remove_on_fail
    settle_failure(state, job, now, TIMEOUT_REASON, unrecoverable=False, remove=remove)


def settle_failure(
    state: TimedState, job: Job, now: float, reason: str, *, unrecoverable: bool, remove: bool
) -> None:
    """Count a failed attempt: retry after the backoff while attempts remain, else fail."""
    job.attempts += 1
    if unrecoverable or job.attempts >= job.opts.max_attempts:
        state.fail(job, now, reason, remove)
    else:
        job.failed_reason = reason
        state.retry(job, now)


def _lease_expired(state: TimedState, job: Job, now: float) -> None:
    _count_stall(state, job, now, "Lock expired: job stalled")


def _count_stall(state: TimedState, job: Job, now: float, reason: str) -> None:
    """A stall costs an attempt; the third one fails the job, the others requeue it."""
    job.attempts += 1
    job.stall_count += 1
    state.emit("stalled", job, stallCount=job.stall_count)
    if job.stall_count >= state.queues.make(job.queue).stall_config.get("maxStalls", MAX_STALLS):
        state.fail(job, now, f"{reason} {job.stall_count} times", job.opts.remove_on_fail)
    else:
        state.requeue(job, now)
