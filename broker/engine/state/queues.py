"""Per-queue structures: the ready heap, the parked long polls, counts by state, groups.

The ready heap orders jobs the way the seed says: higher priority first; within a priority,
`lifo` jobs newest first ahead of the rest, then earlier run time first (so a negative delay
runs ahead of later jobs), then arrival order. A grouped job's priority orders it within its
group (0 first, ascending) and against other groups' jobs; as against ungrouped jobs it counts
as priority 0. Entries are never removed in place: an entry is current only while its job is
ready and carries the same `ready_seq` (lazy deletion). The jobs with default ordering
options that become ready in time order (the usual case: each push is ready when pushed) skip
the heap: they wait in `lane`, a deque in key order, and a pop takes the smaller of the lane's
first entry and the heap's top. Together they give the heap's order, without a heap pop's
cost (~3k instructions: a comparison per level of a deep heap).

Groups: a PULL may limit how many jobs of one group run at once (`concurrency`) and how many
may start per window (`limit: {max, duration}`). A job whose group is at its limit is passed
over, and the jobs behind it are still served (no head-of-line blocking).

A queue exists while it holds something (`QueueState.idle` says what); EngineState forgets an
idle one (`QueueSweep`), so that a name costs nothing once its queue is empty.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any

import attrs

from broker.engine.sink import ReplySink
from broker.engine.state.model import COUNTED_STATES, PRIORITIZED, READY_STATES, WAITING, Job
from broker.engine.state.retention import Retention

# Entry layout: ((-priority, group priority, lifo first), run time or -seq, seq, job). The
# first three keys are one tuple, shared by every entry with the same ones (a million waiting
# jobs hold a million entries: four items take 16 bytes less than six).
RUN_AT = 1
SEQ = 2
JOB = 3
FIFO = (0, 0, 1)  # the keys of a job with default options
_prefixes: dict[tuple[float, float, int], tuple[float, float, int]] = {FIFO: FIFO}
MAX_PREFIXES = 1_000


@attrs.define(slots=True, eq=False)
class Waiter:
    """A parked PULL or PULLB: who asked, for how many, and whether it has been answered."""

    session: ReplySink
    req_id: Any
    command: Any
    count: int
    batch: bool
    done: bool = False


def _shared_prefix(prefix: tuple[float, float, int]) -> tuple[float, float, int]:
    """One tuple per set of leading keys (the cache forgets all past MAX_PREFIXES)."""
    if len(_prefixes) >= MAX_PREFIXES:
        _prefixes.clear()
        _prefixes[FIFO] = FIFO
    _prefixes[prefix] = prefix
    return prefix


def is_current(entry: tuple[Any, ...]) -> bool:
    """Whether a heap entry still stands for a ready job."""
    job = entry[JOB]
    return job.ready_seq == entry[SEQ] and job.state in READY_STATES


@attrs.define(slots=True, eq=False)
class QueueState:
    """One queue's ready jobs, parked pulls, per-state counts and per-group activity."""

    name: str
    ready: list[tuple[Any, ...]] = attrs.Factory(list)
    # Entries with the FIFO keys, in key order (see the module docstring).
    lane: deque[tuple[Any, ...]] = attrs.Factory(deque)
    waiters: deque[Waiter] = attrs.Factory(deque)
    delayed: set[Job] = attrs.Factory(set)
    counts: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(COUNTED_STATES, 0))
    group_pending: dict[str, int] = attrs.Factory(dict)
    group_active: dict[str, int] = attrs.Factory(dict)
    group_starts: dict[str, deque[float]] = attrs.Factory(dict)
    # Stored per-group settings (SetGroupConcurrency, PauseGroup...; see groups.py): keys
    # concurrency, limit {max, duration}, paused, blockedUntil (epoch ms).
    group_settings: dict[str, dict[str, Any]] = attrs.Factory(dict)
    # Operator settings (stored as a record): see admin.py.
    paused: bool = False
    rate_limit: int | None = None
    concurrency: int | None = None
    stall_config: dict[str, Any] = attrs.Factory(dict)
    dlq_config: dict[str, Any] = attrs.Factory(dict)
    # The queue's own caps on its failed jobs, once SetDlqConfig gave any (dlq.py).
    dead_letters: Retention | None = None
    tokens: float = 0.0
    tokens_at: float = 0.0
    # Heap entries left stale by jobs that stopped being ready without being popped.
    stale: int = 0
    # Crons that push into this queue (crons.py): they keep it.
    crons: int = 0
    # When the last group rate window a PULL opened closes (epoch ms): it keeps the queue
    # until then, or a new window would start early.
    windows_until: float = 0.0

    def push_ready(self, job: Job, seq: int) -> None:
        """Put a ready job on the heap (or the lane) under a fresh sequence number."""
        job.ready_seq = seq
        opts = job.opts
        prefix: tuple[float, float, int]
        if opts.group_id is None:
            prefix = (-opts.priority, 0, 0 if opts.lifo else 1)
        else:
            prefix = (0, opts.priority, 0 if opts.lifo else 1)
        prefix = _prefixes.get(prefix) or _shared_prefix(prefix)
        if opts.lifo:
            heapq.heappush(self.ready, (prefix, -seq, seq, job))
            return
        entry = (prefix, job.run_at, seq, job)
        lane = self.lane
        # A fresh seq is the largest yet: a run time no earlier than the lane's last keeps the
        # lane in key order.
        if prefix is FIFO and (not lane or job.run_at >= lane[-1][RUN_AT]):
            lane.append(entry)
        else:
            heapq.heappush(self.ready, entry)

    def pop_entry(self) -> tuple[Any, ...] | None:
        """Take the best current entry off the heap or the lane (its job is no longer marked
        ready)."""
        ready, lane = self.ready, self.lane
        while True:
            if lane and not (ready and ready[0] < lane[0]):
                entry = lane.popleft()
            elif ready:
                entry = heapq.heappop(ready)
            else:
                return None
            job = entry[JOB]
            if job.ready_seq == entry[SEQ] and job.state in READY_STATES:  # is_current, inline
                job.ready_seq = -1
                return entry

    def put_back(self, entry: tuple[Any, ...]) -> None:
        """Return an entry taken by `pop_entry` to its place in the order (on the heap: entries
        put back one after another would not keep the lane's order)."""
        entry[JOB].ready_seq = entry[SEQ]
        heapq.heappush(self.ready, entry)

    def has_ready(self) -> bool:
        """Whether a current ready entry exists (drops stale ones at the fronts)."""
        lane, ready = self.lane, self.ready
        while lane:
            job = lane[0][JOB]
            if job.ready_seq == lane[0][SEQ] and job.state in READY_STATES:  # is_current
                return True
            lane.popleft()
        while ready:
            job = ready[0][JOB]
            if job.ready_seq == ready[0][SEQ] and job.state in READY_STATES:  # is_current
                return True
            heapq.heappop(ready)
        return False

    def entries(self) -> int:
        """Entries held by the heap and the lane, current or stale."""
        return len(self.ready) + len(self.lane)

    # -- groups --------------------------------------------------------------------------------

    def group_options(self, group: str, pull: dict[str, Any] | None) -> dict[str, Any] | None:
        """The limits on `group` for one PULL: its own `group` options, overridden key by key
        by the group's stored settings (None: no limit at all)."""
        stored = self.group_settings.get(group)
        if stored is None:
            return pull
        return {**pull, **stored} if pull else stored

    def group_admits(self, group: str, options: dict[str, Any], now: float) -> bool:
        """Whether one more job of `group` may start under the group's options."""
        if options.get("paused") or options.get("blockedUntil", 0) > now:
            return False
        concurrency = options.get("concurrency")
        if concurrency is not None and self.group_active.get(group, 0) >= concurrency:
            return False
        limit = options.get("limit")
        if limit is None:
            return True
        starts = self.group_starts.get(group)
        if starts is None:
            return True
        while starts and starts[0] <= now - limit["duration"]:
            starts.popleft()
        return len(starts) < limit["max"]

    def group_frees_at(self, group: str, options: dict[str, Any]) -> float | None:
        """When a rate-limited group may start a job again (None: not rate limited now)."""
        blocked = options.get("blockedUntil")
        limit = options.get("limit")
        starts = self.group_starts.get(group)
        if limit is None or not starts or len(starts) < limit["max"]:
            return blocked
        frees = starts[0] + limit["duration"]
        return frees if blocked is None else max(frees, blocked)

    def record_start(self, group: str, options: dict[str, Any], now: float) -> None:
        """Note a start for the group's rate window (only when the PULL sets a limit)."""
        limit = options.get("limit")
        if limit is not None:
            self.group_starts.setdefault(group, deque()).append(now)
            self.windows_until = max(self.windows_until, now + limit["duration"])

    # -- housekeeping --------------------------------------------------------------------------

    def compact_ready(self) -> list[tuple[Any, ...]]:
        """Drop stale entries from the ready heap and the lane; returns the old entries, for
        the caller to let go of when convenient (with no job ready, the scan is skipped)."""
        heap, lane = self.ready, self.lane
        if self.counts[WAITING] + self.counts[PRIORITIZED]:
            self.ready = [entry for entry in heap if is_current(entry)]
            heapq.heapify(self.ready)
            self.lane = deque(entry for entry in lane if is_current(entry))
        else:
            self.ready = []
            self.lane = deque()
        self.stale = 0
        heap.extend(lane)
        return heap

    def compact(self) -> None:
        """Drop stale entries from the ready heap and answered polls from the waiters."""
        self.compact_ready()
        self.waiters = deque(w for w in self.waiters if not w.done and not w.session.closed)
        self.group_pending = {g: n for g, n in self.group_pending.items() if n}
        self.group_active = {g: n for g, n in self.group_active.items() if n}

    def configured(self) -> bool:
        """Whether any setting differs from the defaults (then the queue has a stored record)."""
        if self.paused or self.rate_limit is not None or self.concurrency is not None:
            return True
        return bool(self.stall_config or self.dlq_config or self.group_settings)

    def idle(self, now: float) -> bool:
        """Whether the queue holds nothing: no job in any state, no parked poll still to be
        answered, no setting, no cron and no group rate window still open. Stale heap entries
        and answered polls do not count: they go with the queue."""
        if self.crons or self.windows_until > now or self.configured():
            return False
        if any(self.counts.values()):
            return False
        return all(waiter.done or waiter.session.closed for waiter in self.waiters)

    def take_token(self, now: float) -> float | None:
        """Spend one start of the rate limit; None if allowed, else when the next one comes."""
        if self.rate_limit is None:
            return None
        limit = self.rate_limit
        self.tokens = min(limit, self.tokens + (now - self.tokens_at) * limit / 1000)
        self.tokens_at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return None
        return now + (1 - self.tokens) * 1000 / limit


MAX_QUEUES = 100_000
"""The default cap on how many queues exist at once (`--max-queues`): an empty queue object
costs about 2.8 KiB, so some 270 MiB at the cap, far more queues than a deployment names."""
SWEEP_DELAY_MS = 1000
"""How long after a queue may have emptied it is looked at (and forgotten if still idle): a
queue that empties and fills again in turn (one job at a time) is not made afresh each time."""


@attrs.define(slots=True, eq=False)
class QueueSweep:
    """The cap on how many queues exist, and the queues that may have become idle since the
    last sweep (EngineState forgets those still idle when its QUEUE_SWEEP timer fires)."""

    limit: int
    emptied: set[QueueState] = attrs.Factory(set)
    # When the armed sweep fires (epoch ms); inf while none is armed.
    due: float = math.inf
