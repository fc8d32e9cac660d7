"""Operator commands: draining, cleaning and listing queues, and broker-wide statistics (a
component).

It owns nothing: it reads EngineState and removes jobs through it (bulk removals go in slices,
housekeeping.py). Obliterate answers the queue's parked polls through Pulls. Settings are
settings.py's, the dead-letter queue deadletters.py's.
"""

from __future__ import annotations

import heapq
import math
import os
from typing import Any

from broker.engine.components.bulk import BulkRunner
from broker.engine.components.bulk_queues import (
    CLEAN,
    DRAIN,
    OBLITERATE,
    register_sweeps,
    start_sweep,
)
from broker.engine.components.deadletters import MAX_PAGE
from broker.engine.components.info import BrokerInfo
from broker.engine.components.pulls import Pulls
from broker.engine.errors import EngineError
from broker.engine.routing import Routes
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    FAILED,
    PRIORITIZED,
    QUEUED_STATES,
    READY_STATES,
    WAITING,
    Job,
)
from protocol import admin as cmd

__all__ = ["MAX_PAGE", "QueueAdmin", "rss_mib"]

CLEAN_QUEUED = ("waiting", "wait", "delayed", "prioritized", "paused")
Reply = dict[str, Any]


class QueueAdmin:
    """Drain, Obliterate, ListQueues, Clean, GetJobs, GetCountsPerPriority, GetJobByCustomId,
    RetryCompleted, Stats, Metrics, Prometheus, TrimEvents, StorageStatus."""

    def __init__(
        self, state: EngineState, pulls: Pulls, info: BrokerInfo, bulks: BulkRunner
    ) -> None:
        self.state = state
        self.pulls = pulls
        self.info = info
        self.bulks = bulks
        register_sweeps(bulks, pulls)

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.Drain, self.drain)
        routes.add(cmd.Obliterate, self.obliterate)
        routes.add(cmd.ListQueues, self.list_queues)
        routes.add(cmd.Clean, self.clean)
        routes.add(cmd.GetJobs, self.get_jobs)
        routes.add(cmd.GetCountsPerPriority, self.counts_per_priority)
        routes.add(cmd.GetJobByCustomId, self.job_by_custom_id)
        routes.add(cmd.RetryCompleted, self.retry_completed)
        routes.add(cmd.Stats, self.stats)
        routes.add(cmd.Metrics, self.metrics)
        routes.add(cmd.Prometheus, self.prometheus_metrics)
        routes.add(cmd.TrimEvents, self.trim_events)
        routes.add(cmd.StorageStatus, self.storage_status)
        return routes

    def drain(self, session: ReplySink, command: cmd.Drain, now: float) -> Reply | None:
        """Drain: remove the jobs that wait to run; active and finished ones stay. Many are
        removed in slices (bulk_queues.py)."""
        if start_sweep(self.bulks, self.pulls, session, command, DRAIN, QUEUED_STATES):
            return None
        removed = self.state.remove_many(self.state.jobs_of(command.queue, QUEUED_STATES))
        reply = {"ok": True, "count": len(removed)}
        self.state.purge_later(removed)
        if removed:
            self.state.announce("queue:drained", {"queue": command.queue, "count": len(removed)})
        return reply

    def obliterate(self, session: ReplySink, command: cmd.Obliterate, now: float) -> Reply | None:
        """Obliterate: every job of the queue, in any state, and its settings, are gone. Many
        jobs are removed in slices (bulk_queues.py)."""
        if start_sweep(self.bulks, self.pulls, session, command, OBLITERATE, None):
            return None
        removed = self.state.remove_many(self.state.jobs_of(command.queue))
        queue = self.state.queues.drop_now(command.queue)
        self.state.observers.telemetry.forget(command.queue)
        if queue is not None:
            self.state.upkeep.bury(queue.compact_ready())  # let go of in slices with the jobs
            self.state.changes.note_setting(queue.name)
            self.pulls.answer_empty(queue.waiters)
            if queue.crons:  # its crons stay (CronDelete removes them): so does the queue
                self.state.queues.make(queue.name).add_crons(queue.crons)
        self.state.purge_later(removed)
        self.state.announce("queue:obliterated", {"queue": command.queue})
        self.state.announce("queue:removed", {"queue": command.queue})
        return {"ok": True}

    def list_queues(self, session: ReplySink, command: cmd.ListQueues, now: float) -> Reply:
        """ListQueues: the queues that hold something, by name (one emptied in the last
        second, not forgotten yet, is not listed: it answers as a queue that does not exist)."""
        return {"ok": True, "queues": sorted(self.state.queues.live(now))}

    def clean(self, session: ReplySink, command: cmd.Clean, now: float) -> Reply | None:
        """Clean: remove jobs older than `grace` ms in the state named (queued by default).
        Many are removed in slices (bulk_queues.py)."""
        state = command.state
        queued = state is None or state in CLEAN_QUEUED
        states = QUEUED_STATES if state is None or queued else frozenset((state,))
        clean = {"grace": command.grace, "limit": command.limit, "by_completion": not queued}
        if start_sweep(self.bulks, self.pulls, session, command, CLEAN, states, **clean):
            return None
        if queued:
            jobs = self.state.jobs_of(command.queue, QUEUED_STATES)
            old = [job for job in jobs if now - job.created_at >= command.grace]
        else:
            jobs = self.state.jobs_of(command.queue, states)
            old = [job for job in jobs if now - (job.completed_at or now) >= command.grace]
        old.sort(key=lambda job: (job.created_at, job.id))
        removed = self.state.remove_many(old[: command.limit])
        reply = {"ok": True, "count": len(removed), "ids": [job.id for job in removed]}
        self.state.purge_later(removed)
        if removed:
            named = {} if command.state is None else {"state": command.state}
            event = {"queue": command.queue, **named, "count": len(removed)}
            self.state.announce("queue:cleaned", event)
        return reply

    def get_jobs(self, session: ReplySink, command: cmd.GetJobs, now: float) -> Reply:
        """GetJobs: jobs in the states asked for, oldest first, one page of at most MAX_PAGE
        (a larger `limit` is cut to it, so no listing builds a huge reply in one pass)."""
        states = set(command.state)
        queue = self.state.queues.get(command.queue)
        paused = False
        if command.explicit and queue is not None and queue.paused:
            # A paused queue's ready jobs are listed as paused, and only as paused.
            paused = "paused" in states
            states -= READY_STATES
            if paused:
                states |= READY_STATES
        jobs = self.state.jobs_of(command.queue, states)
        end = command.offset + min(command.limit, MAX_PAGE)
        first = heapq.nsmallest(end, jobs, key=_age) if end < len(jobs) else sorted(jobs, key=_age)
        page = first[command.offset : end]
        listed = [job.to_wire_with_state() for job in page]
        if paused:  # their state is `paused` there, as the reference lists them
            for entry in listed:
                if entry.state in READY_STATES:
                    entry.state = "paused"
        return {"ok": True, "jobs": listed}

    def counts_per_priority(
        self, session: ReplySink, command: cmd.GetCountsPerPriority, now: float
    ) -> Reply:
        """GetCountsPerPriority: queued jobs by priority (keys are strings)."""
        return {"ok": True, "queue": command.queue, "counts": self.priority_counts(command.queue)}

    def priority_counts(self, queue: str) -> dict[str, int]:
        """The queue's queued jobs by priority, keyed by the priority as a string."""
        counts: dict[str, int] = {}
        for job in self.state.jobs_of(queue, QUEUED_STATES):
            key = str(int(job.priority) if float(job.priority).is_integer() else job.priority)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def job_by_custom_id(
        self, session: ReplySink, command: cmd.GetJobByCustomId, now: float
    ) -> Reply:
        """GetJobByCustomId."""
        job = self.state.jobs.get(command.customId)
        if job is None or job.custom_id != command.customId:
            raise EngineError("Job not found")
        return {"ok": True, "job": job.to_wire_with_state()}

    def retry_completed(self, session: ReplySink, command: cmd.RetryCompleted, now: float) -> Reply:
        """RetryCompleted: completed jobs run again (result and progress cleared)."""
        done = self.state.jobs_of(command.queue, (COMPLETED,))
        if command.id is not None:
            done = [job for job in done if job.id == command.id]
        count = 0
        for job in done:
            if self.state.revive(job, now):
                job.result = None
                job.progress = 0
                count += 1
        return {"ok": True, "count": count}

    def stats(self, session: ReplySink, command: cmd.Stats, now: float) -> Reply:
        """Stats: job counts over every queue, uptime, totals."""
        return {"ok": True, "stats": self.broker_stats(now)}

    def broker_stats(self, now: float) -> dict[str, float]:
        """Job counts over every queue, uptime (whole milliseconds) and failures since start
        (Stats, DashboardOverview)."""
        totals: dict[str, int] = {}
        for queue in self.state.queues.values():
            for state, count in queue.counts.items():
                totals[state] = totals.get(state, 0) + count
        ready = totals.get(WAITING, 0) + totals.get(PRIORITIZED, 0)
        return {
            "waiting": ready,
            "active": totals.get(ACTIVE, 0),
            "delayed": totals.get("delayed", 0),
            "dlq": totals.get(FAILED, 0),
            "completed": totals.get(COMPLETED, 0),
            "failed": self.state.observers.totals["failed"],
            "uptime": math.floor(now - self.info.started_ms),  # whole ms, as the reference
        }

    def metrics(self, session: ReplySink, command: cmd.Metrics, now: float) -> Reply:
        """Metrics: totals since start, and this process's memory; with a queue, its minute
        counts of completed or failed jobs (`{meta, data, count}`, see telemetry.py)."""
        if command.queue is not None and command.type is not None:  # both or neither
            view = self.state.observers.telemetry.view(
                command.queue, command.type, command.start, command.end
            )
            return {"ok": True, "data": view}
        totals = self.state.observers.totals
        return {
            "ok": True,
            "metrics": {
                "totalPushed": totals["pushed"],
                "totalPulled": totals["pulled"],
                "totalCompleted": totals["completed"],
                "totalFailed": totals["failed"],
                "memoryUsageMb": rss_mib(),
            },
        }

    def prometheus_metrics(self, session: ReplySink, command: cmd.Prometheus, now: float) -> Reply:
        """Prometheus: the exposition text the HTTP `/prometheus` route serves."""
        if self.info.prometheus is None:
            raise EngineError("Prometheus metrics are not available")
        return {"ok": True, "data": {"metrics": self.info.prometheus()}}

    def trim_events(self, session: ReplySink, command: cmd.TrimEvents, now: float) -> Reply:
        """TrimEvents: trioq keeps no per-queue event journal (events go to listeners as they
        happen), so there is never anything to trim."""
        return {"ok": True, "data": {"removed": 0}}

    def storage_status(self, session: ReplySink, command: cmd.StorageStatus, now: float) -> Reply:
        """StorageStatus: a broker whose store fails stops, so a running one is healthy."""
        return {"ok": True, "data": {"diskFull": False, "error": None, "since": None}}


def _age(job: Job) -> tuple[float, str]:
    return (job.created_at, job.id)


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
