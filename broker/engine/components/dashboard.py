"""Dashboard views: DashboardOverview, DashboardQueues, DashboardQueue (a component).

Read only: composed from the other components' answers (QueueAdmin's Stats and counts per
priority, JobCommands' GetJobCounts, the workers and the crons) and EngineState's counts.
"""

from __future__ import annotations

from typing import Any

from broker.engine.components.admin import QueueAdmin, rss_mib
from broker.engine.components.crons import CronScheduler
from broker.engine.components.jobs import JobCommands
from broker.engine.components.workers import WorkerRegistry
from broker.engine.routing import Routes
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import ACTIVE, FAILED
from protocol import groups as cmd

Reply = dict[str, Any]
DASHBOARD_DLQ_PREVIEW = 10


class Dashboard:
    """The dashboard views (see the module docstring)."""

    def __init__(
        self,
        state: EngineState,
        admin: QueueAdmin,
        jobs: JobCommands,
        workers: WorkerRegistry,
        crons: CronScheduler,
    ) -> None:
        self.state = state
        self.admin = admin
        self.jobs = jobs
        self.workers = workers
        self.crons = crons

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.DashboardOverview, self.dashboard_overview)
        routes.add(cmd.DashboardQueues, self.dashboard_queues)
        routes.add(cmd.DashboardQueue, self.dashboard_queue)
        return routes

    def dashboard_overview(
        self, session: ReplySink, command: cmd.DashboardOverview, now: float
    ) -> Reply:
        """DashboardOverview: broker-wide counts and totals, workers and crons."""
        stats = self.admin.broker_stats(now)
        totals = self.state.observers.totals
        stats.update(
            totalPushed=totals["pushed"],
            totalPulled=totals["pulled"],
            totalCompleted=totals["completed"],
            totalFailed=totals["failed"],
        )
        workers = self.workers.summaries(now)
        active = sum(worker["status"] == "active" for worker in workers)
        data = {
            "stats": stats,
            "memory": {"rss": rss_mib()},
            "workers": {"total": len(workers), "active": active, "list": workers},
            "crons": self.crons.summaries(),
            "timestamp": now,
        }
        return {"ok": True, "data": data}

    def dashboard_queues(
        self, session: ReplySink, command: cmd.DashboardQueues, now: float
    ) -> Reply:
        """DashboardQueues: the counts of every queue that holds something (as ListQueues)."""
        queues = [
            {
                "name": name,
                "waiting": queue.counts["waiting"],
                "prioritized": queue.counts["prioritized"],
                "delayed": queue.counts["delayed"],
                "active": queue.counts[ACTIVE],
                "dlq": queue.counts[FAILED],
                "paused": queue.paused,
            }
            for name, queue in sorted(self.state.queues.live(now).items())
        ]
        return {"ok": True, "data": {"queues": queues, "timestamp": now}}

    def dashboard_queue(self, session: ReplySink, command: cmd.DashboardQueue, now: float) -> Reply:
        """DashboardQueue: one queue's counts (paused view), priorities and DLQ preview."""
        counts = self.jobs.counts_of(command.queue)
        priorities = self.admin.priority_counts(command.queue)
        failed = self.state.jobs_of(command.queue, (FAILED,))
        failed.sort(key=lambda j: (j.completed_at or 0, j.id))
        preview = [
            {
                "id": j.id,
                "data": j.to_wire().data,
                "attempts": j.attempts,
                "createdAt": j.created_at,
            }
            for j in failed[:DASHBOARD_DLQ_PREVIEW]
        ]
        queue = self.state.queues.get(command.queue)
        data = {
            "name": command.queue,
            "counts": counts,
            "paused": bool(queue and queue.paused),
            "priorityCounts": priorities,
            "dlqPreview": preview,
            "timestamp": now,
        }
        return {"ok": True, "data": data}
