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

A queue exists while it holds something (`QueueState.idle` says what). `Queues` owns the map of
queues: it makes one on first use (past its cap it refuses, `admit`) and forgets an idle one
(`QueueSweep`), so that a name costs nothing once its queue is empty.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from broker.engine.errors import EngineError
from broker.engine.sink import ReplySink
from broker.engine.state.changes import ChangeLog
from broker.engine.state.model import COUNTED_STATES, PRIORITIZED, READY_STATES, WAITING, Job
from broker.engine.state.retention import Retention
from broker.engine.state.timers import TimerWheel

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

    def park(self, waiter: Waiter) -> None:
        """A poll waits here for a job (answered by the pulls, or by its POLL timer)."""
        self.waiters.append(waiter)

    # -- settings (the queue's stored record, see settings.py) ---------------------------------

    def set_paused(self, paused: bool) -> None:
        """Pause or Resume: a paused queue starts no job."""
        self.paused = paused

    def limit_rate(self, limit: int | None, now: float) -> None:
        """At most `limit` starts a second (None: no limit); a new limit starts full."""
        self.rate_limit = limit
        if limit is not None:
            self.tokens, self.tokens_at = float(limit), now

    def limit_concurrency(self, limit: int | None) -> None:
        """At most `limit` jobs of the queue active at once (None: no limit)."""
        self.concurrency = limit

    def merge_stall_config(self, config: dict[str, Any]) -> None:
        """SetStallConfig: `config` merged into the queue's."""
        self.stall_config = {**self.stall_config, **config}

    def merge_dlq_config(self, config: dict[str, Any]) -> None:
        """SetDlqConfig: `config` merged into the queue's."""
        self.dlq_config = {**self.dlq_config, **config}

    def set_group(self, group: str, settings: dict[str, Any]) -> None:
        """Store `group`'s settings (none left: the group has none stored)."""
        if settings:
            self.group_settings[group] = settings
        else:
            self.group_settings.pop(group, None)

    def load_settings(self, body: dict[str, Any], dlq_config: dict[str, Any]) -> None:
        """Settings from the queue's stored record (start-up); the rate limit starts full."""
        self.paused = body.get("paused", False)
        self.rate_limit = body.get("rateLimit")
        self.concurrency = body.get("concurrency")
        self.stall_config = body.get("stallConfig") or {}
        self.dlq_config = dlq_config
        self.group_settings = body.get("groups") or {}
        self.tokens = float(self.rate_limit or 0)

    def reset_settings(self) -> None:
        """Every setting back to its default, the queue's own DLQ caps gone (Obliterate)."""
        self.paused, self.rate_limit, self.concurrency = False, None, None
        self.stall_config, self.dlq_config, self.group_settings = {}, {}, {}
        self.dead_letters = None

    def add_crons(self, count: int) -> None:
        """`count` crons more (fewer, negative) push into this queue; while any do, it stays."""
        self.crons += count

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
    """The queues that may have become idle since the last sweep, and when the armed sweep
    fires (the target of the QUEUE_SWEEP timer; `Queues` forgets those still idle then)."""

    emptied: set[QueueState] = attrs.Factory(set)
    # When the armed sweep fires (epoch ms); inf while none is armed.
    due: float = math.inf


class Tidier(Protocol):
    """What `Queues` asks of housekeeping (rules/housekeeping.py's Upkeep) for a queue it
    forgets: its stale entries let go of in slices, no compaction left to do, memory given
    back after a large sweep."""

    def bury(self, objects: list[Any]) -> None:
        """Hold `objects` until they are let go of in slices."""
        ...

    def tidied(self, thing: Any) -> None:
        """`thing` needs no compaction any more."""
        ...

    def freed(self, count: int) -> None:
        """`count` queues were just forgotten at once."""
        ...


class Queues(dict[str, QueueState]):
    """The queues that exist, by name: the owner of the map, of the cap on how many exist
    (`limit`) and of the sweep that forgets idle ones (see the module docstring).

    It is read as the dict it is (`queues.get(name)`, `queues[name]`: the transitions read it
    on every job, and a plain dict's lookups are the cheapest there are); it is changed only
    through its methods: `make`, `admit`, `note_emptied`, `sweep_idle`, `drop_now`, `compact`.
    """

    __slots__ = ("_changes", "_sweep_timer", "_tidier", "_wheel", "limit", "sweep")

    def __init__(
        self, limit: int, wheel: TimerWheel, sweep_timer: str, changes: ChangeLog, tidier: Tidier
    ) -> None:
        super().__init__()
        self.limit = limit
        self.sweep = QueueSweep()
        self._wheel = wheel
        self._sweep_timer = sweep_timer  # the timer kind whose firing calls `sweep_idle`
        self._changes = changes
        self._tidier = tidier

    def make(self, name: str) -> QueueState:
        """The state of queue `name`, made on first use (a command that would make it for a
        client checks `admit` first; reads use `get`)."""
        queue = self.get(name)
        if queue is None:
            queue = self[name] = QueueState(name)
        return queue

    def admit(self, names: Iterable[str], now: float) -> None:
        """Refuse, before anything changes, a command that would make the queues past
        `limit` exist (idle queues not yet swept are forgotten first, to make room)."""
        names = set(names)  # (not `names - self.keys()`: that copies every queue's name)
        limit = self.limit
        if len(self) + sum(name not in self for name in names) <= limit:
            return
        self.sweep_idle(now)  # (it may forget one of `names`, idle: counted again)
        new = sorted(name for name in names if name not in self)
        if len(self) + len(new) > limit:
            what = f"queue {new[0]!r}" if len(new) == 1 else f"{len(new)} queues"
            raise EngineError(
                f"Queue limit reached: creating {what} would pass --max-queues ({limit})"
            )

    def drop_now(self, name: str) -> QueueState | None:
        """Forget queue `name` at once, whatever it holds (Obliterate's end); returns it."""
        return self.pop(name, None)

    def live(self, now: float) -> dict[str, QueueState]:
        """The queues that hold something (those idle are about to be forgotten)."""
        return {name: queue for name, queue in self.items() if not queue.idle(now)}

    def note_emptied(self, queue: QueueState, now: float) -> None:
        """`queue` may hold nothing now: the next sweep looks at it (one is armed if none is)."""
        sweep = self.sweep
        sweep.emptied.add(queue)
        if sweep.due == math.inf:
            sweep.due = now + SWEEP_DELAY_MS
            self._wheel.schedule(sweep.due, self._sweep_timer, sweep)

    def sweep_armed(self) -> bool:
        """Whether a sweep's timer is in the wheel (a timer that is no job's)."""
        return self.sweep.due != math.inf

    def sweep_idle(self, now: float) -> None:
        """Forget the queues noted as emptied that are idle (the sweep's timer). One kept
        only by a group rate window still open is looked at again when the window closes."""
        sweep = self.sweep
        if sweep.due <= now:  # its timer came (or is about to): none is armed after this
            sweep.due = math.inf
        emptied, sweep.emptied = sweep.emptied, set()
        later = math.inf
        dropped = 0
        for queue in emptied:
            if self.get(queue.name) is not queue:
                continue  # obliterated since (or obliterated and made again)
            if queue.idle(now):
                self._drop(queue)
                dropped += 1
            elif queue.windows_until > now and queue.idle(queue.windows_until):
                sweep.emptied.add(queue)
                later = min(later, queue.windows_until)
        self._tidier.freed(dropped)
        if later < sweep.due:
            sweep.due = later
            self._wheel.schedule(later, self._sweep_timer, sweep)

    def compact(self, now: float) -> None:
        """Prune every queue's stale heap entries and answered polls, and forget the idle
        queues at once (CompactMemory)."""
        for queue in list(self.values()):
            queue.compact()
            if queue.idle(now):
                self._drop(queue)

    def _drop(self, queue: QueueState) -> None:
        """Forget an idle queue; its stale heap entries are let go of in slices."""
        del self[queue.name]
        tidier = self._tidier
        tidier.bury(queue.compact_ready())
        self._changes.forget_queue(queue)
        tidier.tidied(queue)
