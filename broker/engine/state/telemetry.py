"""Per-queue minute counts of completed and failed jobs (the `Metrics {queue, type}` reply).

The same shape as the reference's (and BullMQ's) queue metrics: `meta` holds the running total,
the time of the last finish and the count of its minute; `data` the count of each minute,
newest first, for at most MAX_DATA_POINTS minutes (older minutes are dropped as time moves on).
Kept in memory only: after a restart the counts start again from zero.
"""

from __future__ import annotations

from typing import Any

MAX_DATA_POINTS = 20_160  # two weeks of minutes, the reference's default
MINUTE_MS = 60_000


class MinuteCounts:
    """One queue's finishes of one kind, counted per minute."""

    __slots__ = (
        "buckets", "minute", "minute_ends", "minute_starts", "prev_count", "prev_ts", "total",
    )  # fmt: skip

    def __init__(self) -> None:
        self.total = 0
        self.prev_ts = 0.0
        self.prev_count = 0
        self.buckets: dict[int, int] = {}
        # The minute of the last finish, and its bounds in epoch ms (empty until one).
        self.minute = 0
        self.minute_starts = self.minute_ends = 0.0

    def record(self, now: float, count: int = 1) -> None:
        """Count `count` finishes (one unless a batch) at `now` (epoch ms)."""
        if self.minute_starts <= now < self.minute_ends:  # the last finish's minute: most calls
            self.total += count
            count += self.prev_count
            self.buckets[self.minute] = count
            self.prev_ts = float(now)
            self.prev_count = count
            return
        minute = self.minute = int(now // MINUTE_MS)
        self.minute_starts = float(minute * MINUTE_MS)
        self.minute_ends = float((minute + 1) * MINUTE_MS)
        buckets = self.buckets
        self.total += count
        count = buckets[minute] = buckets.get(minute, 0) + count
        self.prev_ts = float(now)
        self.prev_count = count
        if len(buckets) > MAX_DATA_POINTS or next(iter(buckets)) <= minute - MAX_DATA_POINTS:
            cutoff = minute - MAX_DATA_POINTS
            for old in [m for m in buckets if m <= cutoff]:
                del buckets[old]

    def view(self, start: int, end: int) -> dict[str, Any]:
        """The reply's `{meta, data, count}`; `data` is entries start..end (-1: to the last)."""
        data: list[int] = []
        if self.buckets:
            newest = max(self.buckets)
            oldest = max(min(self.buckets), newest - MAX_DATA_POINTS + 1)
            data = [self.buckets.get(minute, 0) for minute in range(newest, oldest - 1, -1)]
        count = len(data)
        stop = count if end == -1 else min(count, end + 1)
        return {
            "meta": {"count": self.total, "prevTS": self.prev_ts, "prevCount": self.prev_count},
            "data": data[start:stop],  # empty when start >= stop
            "count": count,
        }


FORGET_SHARE = 10
"""Past its limit, QueueTelemetry forgets this fraction (1/10) of its queues at once."""


class QueueTelemetry:
    """Minute counts for every queue that finished a job, up to `limit` queues. They outlive
    their queue (a queue whose jobs are removed as they complete is forgotten when empty, and
    its counts still matter); past `limit`, the tenth whose last finish is oldest go."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queues: dict[str, dict[str, MinuteCounts]] = {}

    def record(self, queue: str, kind: str, now: float, count: int = 1) -> None:
        """A job of `queue` (or `count` jobs, a batch) finished as `kind` ("completed" or
        "failed") at `now`."""
        kinds = self.queues.get(queue)
        if kinds is None:
            if len(self.queues) >= self.limit:
                self._forget_oldest()
            kinds = self.queues[queue] = {}
        counts = kinds.get(kind)
        if counts is None:
            counts = kinds[kind] = MinuteCounts()
        counts.record(now, count)

    def _forget_oldest(self) -> None:
        """Forget the tenth of the queues (at least one) whose last finish is oldest: a sort
        per tenth of `limit` new queues, not a scan per new queue."""
        queues = self.queues

        def last_finish(name: str) -> float:
            return max(counts.prev_ts for counts in queues[name].values())

        oldest = sorted(queues, key=last_finish)[: max(len(queues) // FORGET_SHARE, 1)]
        for name in oldest:
            del queues[name]

    def view(self, queue: str, kind: str, start: int, end: int) -> dict[str, Any]:
        """The counts of `queue` for `kind` (empty when it never finished one)."""
        counts = self.queues.get(queue, {}).get(kind) or MinuteCounts()
        return counts.view(start, end)

    def forget(self, queue: str) -> None:
        """The queue was obliterated."""
        self.queues.pop(queue, None)
