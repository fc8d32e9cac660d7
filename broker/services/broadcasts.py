"""The events the broker publishes by itself, as the reference does: `queue:counts` after job
events (coalesced: one per touched queue every COUNTS_COALESCE_S), `stats:snapshot` every
STATS_PERIOD_S and `health:status` every HEALTH_PERIOD_S. Each is built only while some
subscriber or listener wants it (events.py), so they cost nothing when nobody listens.

The snapshots read the engine's state between its passes (Trio runs one task at a time, and
the actor changes nothing outside a pass); counts are eventually exact, as the reference's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import trio

from ..engine.components.workers import WORKER_TIMEOUT_MS
from ..engine.core import Engine
from ..engine.state.model import ACTIVE, COMPLETED, DELAYED, FAILED, PRIORITIZED, WAITING
from ..events import EventBus
from .metrics_reference import resident_bytes

COUNTS_COALESCE_S = 0.010  # the reference's
STATS_PERIOD_S = 5.0
HEALTH_PERIOD_S = 10.0
MAX_SNAPSHOT_QUEUES = 1000  # a snapshot names at most this many queues (by name)
MIB = 1024 * 1024


class Broadcasts:
    """Publishes the counts and the periodic snapshots on `bus` (run `run` in a nursery).

    `transports()` gives the open connections as (tcp, websocket, sse)."""

    def __init__(
        self,
        bus: EventBus,
        engine: Engine,
        now_ms: Callable[[], float],
        transports: Callable[[], tuple[int, int, int]],
    ) -> None:
        self.bus = bus
        self.engine = engine
        self.now_ms = now_ms
        self.transports = transports
        self.pending: set[str] = set()  # queues whose counts are due
        self._counts_due = trio.Event()
        self._last_totals: tuple[float, int, int] | None = None  # (when, pushed, pulled)
        bus.on_queue_touched = self.touched

    def touched(self, queue: str) -> None:
        """A job event of `queue` was published (while `queue:counts` is wanted)."""
        self.pending.add(queue)
        self._counts_due.set()

    async def run(self) -> None:
        """Publish until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._publish_counts)
            nursery.start_soon(self._every, STATS_PERIOD_S, "stats:snapshot", self.stats)
            nursery.start_soon(self._every, HEALTH_PERIOD_S, "health:status", self.health)

    async def _publish_counts(self) -> None:
        while True:
            await self._counts_due.wait()
            await trio.sleep(COUNTS_COALESCE_S)  # one message per queue for a burst of events
            self._counts_due = trio.Event()
            queues, self.pending = self.pending, set()
            if self.bus.wants("queue:counts"):
                now = self.now_ms()
                self.bus.publish(
                    {"event": "queue:counts", "ts": now, "data": self.counts(name)}
                    for name in sorted(queues)
                )

    async def _every(self, period_s: float, name: str, build: Callable[[], dict[str, Any]]):
        """Every `period_s` while someone wants `name`; asleep (no wake-up) while nobody does."""
        while True:
            if not self.bus.wants(name):
                await self.bus.wait_changed()
                continue
            await trio.sleep(period_s)
            if self.bus.wants(name):
                self.bus.publish([{"event": name, "ts": self.now_ms(), "data": build()}])

    def counts(self, name: str) -> dict[str, Any]:
        """`queue:counts`: the queue's jobs by state (a paused queue's ready jobs count as
        waiting and prioritized, as in the reference)."""
        queue = self.engine.state.queues.get(name)
        counts = queue.counts if queue is not None else {}
        data: dict[str, Any] = {"queue": name}
        for state in (WAITING, PRIORITIZED, ACTIVE, COMPLETED, FAILED, DELAYED):
            data[state] = counts.get(state, 0)
        return data

    def stats(self) -> dict[str, Any]:
        """`stats:snapshot`: the Stats totals, rates since the last snapshot, every queue's
        counts (the first MAX_SNAPSHOT_QUEUES by name), workers and crons."""
        engine, now = self.engine, self.now_ms()
        stats = engine.admin.broker_stats(now)
        totals = engine.state.observers.totals
        push_rate, pull_rate = self._rates(now, totals["pushed"], totals["pulled"])
        queues: dict[str, Any] = {}
        every = engine.state.queues
        for name in heapq.nsmallest(MAX_SNAPSHOT_QUEUES, every):  # no sort of them all
            queue = engine.state.queues[name]
            counts = queue.counts
            queues[name] = {
                "waiting": counts[WAITING] + counts[PRIORITIZED],
                "active": counts[ACTIVE],
                "delayed": counts[DELAYED],
                "dlq": counts[FAILED],
                "paused": queue.paused,
            }
        workers = engine.workers.summaries(now)
        live = [w for w in workers if now - w["lastSeen"] < WORKER_TIMEOUT_MS]
        snapshot = {
            "waiting": stats["waiting"],
            "active": stats["active"],
            "delayed": stats["delayed"],
            "completed": stats["completed"],
            "dlq": stats["dlq"],
            "totalPushed": totals["pushed"],
            "totalCompleted": totals["completed"],
            "totalFailed": totals["failed"],
            "pushPerSec": push_rate,
            "pullPerSec": pull_rate,
            "uptime": stats["uptime"],
            "queues": queues,
            "workers": {"total": len(workers), "active": len(live)},
            "cronJobs": len(engine.crons.crons),
        }
        if len(every) > MAX_SNAPSHOT_QUEUES:
            snapshot["queuesOmitted"] = len(every) - MAX_SNAPSHOT_QUEUES
        return snapshot

    def _rates(self, now: float, pushed: int, pulled: int) -> tuple[float, float]:
        """Jobs pushed and pulled per second since the previous snapshot (0 for the first)."""
        last, self._last_totals = self._last_totals, (now, pushed, pulled)
        if last is None or now <= last[0]:
            return 0.0, 0.0
        seconds = (now - last[0]) / 1000
        return (pushed - last[1]) / seconds, (pulled - last[2]) / seconds

    def health(self) -> dict[str, Any]:
        """`health:status`: up, process uptime in seconds, memory in MiB (trioq has no
        JavaScript heap: `heapUsed` is the resident size too), open connections."""
        rss = round(resident_bytes() / MIB)
        tcp, websocket, sse = self.transports()
        uptime = int((self.now_ms() - self.engine.started_ms) // 1000)
        return {
            "ok": True,
            "uptime": uptime,
            "memory": {"rss": rss, "heapUsed": rss},
            "connections": {"ws": websocket, "sse": sse, "tcp": tcp},
        }
