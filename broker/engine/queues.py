"""Per-queue structures: the ready heap, the parked long polls, and counts by state.

The ready heap orders jobs the way the seed says: higher priority first; within a priority,
`lifo` jobs newest first ahead of the rest, then earlier run time first (so a negative delay
runs ahead of later jobs), then arrival order. Entries are never removed in place: an entry is
current only while its job is ready and carries the same `ready_seq` (lazy deletion).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import attrs

from .model import COUNTED_STATES, READY_STATES, Job


@attrs.define(slots=True, eq=False)
class Waiter:
    """A parked PULL or PULLB: who asked, for how many, and whether it has been answered."""

    session: Any
    req_id: Any
    command: Any
    count: int
    batch: bool
    done: bool = False


@attrs.define(slots=True, eq=False)
class QueueState:
    """One queue's ready jobs, parked pulls and per-state counts."""

    name: str
    ready: list[tuple[Any, ...]] = attrs.Factory(list)
    waiters: deque[Waiter] = attrs.Factory(deque)
    delayed: set[Job] = attrs.Factory(set)
    counts: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(COUNTED_STATES, 0))

    def push_ready(self, job: Job, seq: int) -> None:
        """Put a ready job on the heap under a fresh sequence number."""
        job.ready_seq = seq
        entry: tuple[Any, ...]
        if job.lifo:
            entry = (-job.priority, 0, -seq, seq, job)
        else:
            entry = (-job.priority, 1, job.run_at, seq, job)
        heapq.heappush(self.ready, entry)

    def pop_ready(self) -> Job | None:
        """Take the best ready job, skipping stale entries; None when there is none."""
        ready = self.ready
        while ready:
            entry = heapq.heappop(ready)
            job = entry[4]
            if job.ready_seq == entry[3] and job.state in READY_STATES:
                job.ready_seq = -1
                return job
        return None

    def compact(self) -> None:
        """Drop stale entries from the ready heap and answered polls from the waiters."""
        self.ready = [
            e for e in self.ready if e[4].ready_seq == e[3] and e[4].state in READY_STATES
        ]
        heapq.heapify(self.ready)
        self.waiters = deque(w for w in self.waiters if not w.done and not w.session.closed)

    def idle(self) -> bool:
        """No job counted in any state, nothing ready, nobody waiting."""
        return not any(self.counts.values()) and not self.ready and not self.waiters

    def has_ready(self) -> bool:
        """Whether a current ready entry exists (drops stale ones at the top)."""
        ready = self.ready
        while ready:
            entry = ready[0]
            job = entry[4]
            if job.ready_seq == entry[3] and job.state in READY_STATES:
                return True
            heapq.heappop(ready)
        return False
