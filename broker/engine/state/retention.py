"""Retention: the finished jobs of one kind, kept up to a count and an age, and the rules that
forget them (functions over the little of EngineState they need: `Forgetting`).

A leaf module (it imports only the model), so queues.py (a queue's dead-letter caps) and
deadlines.py (the timers that age entries out) can both use it without importing each other.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from typing import Protocol

from broker.engine.state.model import Job
from broker.engine.state.timers import TimerWheel

RETENTION = "retention"
"""The timer kind that ages a Retention's oldest entry out."""

_finishes = itertools.count(1)
next_finish = _finishes.__next__
"""A new finish number (see `mark_finished`), for a caller that sets `retained_seq` inline."""


def mark_finished(job: Job) -> None:
    """Give a job that just finished (completed or failed) a new finish number: the entries of
    its earlier finishes, in every Retention, stop being current."""
    job.retained_seq = next_finish()


class Retention:
    """Finished jobs of one kind (completed or failed), oldest first, kept up to a count and
    an age. Entries are (finished_at, seq, job); an entry is current while its job is still in
    this state under the same finish number (`retained_seq`, see `mark_finished`): a job
    retried and finished again gets a new entry, and its old one is stale. One job may be in
    several Retentions (the broker-wide one and its queue's dead-letter caps). `count` is the
    number of jobs in the state, kept by EngineState as jobs enter and leave it."""

    def __init__(self, state: str, limit: float, max_age_ms: float) -> None:
        self.state = state
        self.limit = limit
        self.max_age_ms = max_age_ms
        self.entries: deque[tuple[float, int, Job]] = deque()
        self.count = 0
        self.stale = 0  # entries no longer current (see housekeeping.py)
        self.armed_at: float | None = None  # when its pending age timer fires, if it has one

    def add(self, job: Job, finished_at: float) -> None:
        """Keep `job`, finished at `finished_at` (call in finishing order, after
        `mark_finished`)."""
        self.entries.append((finished_at, job.retained_seq, job))

    def compact(self) -> None:
        """Drop the entries that are no longer current."""
        self.entries = deque(entry for entry in self.entries if self.current(entry))
        self.stale = 0

    def current(self, entry: tuple[float, int, Job]) -> bool:
        """Whether the entry still describes its job."""
        _, seq, job = entry
        return job.state == self.state and job.retained_seq == seq


class Forgetting(Protocol):
    """What the retention rules touch of EngineState: the wheel (age timers), and forgetting
    the jobs that aged or were pushed out."""

    wheel: TimerWheel

    def forget_expired(self, jobs: list[Job], retention: Retention) -> None:
        """Drop `jobs` entirely (their state tallies, their store rows): jobs current in
        `retention` whose entries it has just dropped, so none of theirs is left stale there."""
        ...


def retain(state: Forgetting, retention: Retention, job: Job, now: float) -> None:
    """Keep a job that has just finished (after `mark_finished`) in `retention`, forgetting
    what that pushes over its caps."""
    retention.entries.append((job.completed_at or now, job.retained_seq, job))  # `add`, inline
    expire_retained(state, retention, now)


def expire_retained(state: Forgetting, retention: Retention, now: float) -> None:
    """Forget finished jobs past their count or age (oldest first), and make sure a timer
    comes for the next one to age out: one pending timer per Retention, unless the next
    expiry is earlier than it (a shorter maxAge). The jobs are forgotten together, after the
    scan: each lowers `retention.count` by one, so the scan counts them off itself."""
    entries = retention.entries
    kept_state = retention.state
    max_age = retention.max_age_ms
    over = retention.count - retention.limit  # how many the count cap pushes out
    expired: list[Job] = []
    passed_over = 0  # stale entries dropped on the way
    while entries:
        finished_at, seq, job = entries[0]
        if job.state != kept_state or job.retained_seq != seq:  # `retention.current`, inline
            entries.popleft()  # the job moved on (retried, removed): nothing to forget
            passed_over += 1
            continue
        if over <= 0 and finished_at + max_age > now:
            break
        entries.popleft()
        expired.append(job)
        over -= 1
    if passed_over:
        retention.stale = max(retention.stale - passed_over, 0)
    if expired:
        state.forget_expired(expired, retention)
    if not entries or max_age == math.inf:
        return  # nothing will age out
    expiry = entries[0][0] + max_age  # when the oldest entry reaches the age limit
    armed = retention.armed_at
    if armed is None or expiry < armed:
        retention.armed_at = expiry
        state.wheel.schedule(expiry, RETENTION, retention)
