"""Dead-letter commands: Dlq, RetryDlq, PurgeDlq, GetDlqStats, RemoveDlqJob and the DLQ
settings (a component).

A queue's dead-letter queue is its failed jobs; the rules that cap them and retry them
automatically run inside EngineState (dlq.py). This component reads the failed jobs and
changes them only through EngineState (revive, remove, apply_dlq_config).
"""

from __future__ import annotations

import heapq
from typing import Any

from broker.engine.components.bulk import BulkRunner
from broker.engine.components.bulk_queues import PURGE_DLQ, RETRY_DLQ, start_sweep
from broker.engine.components.pulls import Pulls
from broker.engine.routing import Routes
from broker.engine.rules.deadlines import dlq_reason
from broker.engine.rules.dlq import RETRY_KEYS, apply_dlq_config, auto_retry_due, dlq_config
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import FAILED, Job
from broker.engine.state.queues import QueueState
from protocol import admin as cmd
from protocol import groups as groups_cmd

MAX_PAGE = 1000
"""The most jobs one GetJobs or Dlq reply lists."""
Reply = dict[str, Any]
DLQ_REASONS = ("explicit_fail", "max_attempts_exceeded", "timeout", "stalled", "ttl_expired",
               "worker_lost", "unknown")  # fmt: skip


def _finished(job: Job) -> tuple[float, str]:
    return (job.completed_at or 0, job.id)


class DeadLetterCommands:
    """The dead-letter queue's commands (see the module docstring)."""

    def __init__(self, state: EngineState, pulls: Pulls, bulks: BulkRunner) -> None:
        self.state = state
        self.pulls = pulls  # (only for a bulk's constructor)
        self.bulks = bulks

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.Dlq, self.dlq)
        routes.add(cmd.RetryDlq, self.retry_dlq)
        routes.add(cmd.PurgeDlq, self.purge_dlq)
        routes.add(cmd.SetDlqConfig, self.set_dlq_config)
        routes.add(cmd.GetDlqConfig, self.get_dlq_config)
        routes.add(groups_cmd.GetDlqStats, self.dlq_stats)
        routes.add(groups_cmd.RemoveDlqJob, self.remove_dlq_job)
        return routes

    def dlq(self, session: ReplySink, command: cmd.Dlq, now: float) -> Reply:
        """Dlq: the queue's failed jobs, oldest failure first (at most MAX_PAGE)."""
        count = min(command.count, MAX_PAGE)
        failed = heapq.nsmallest(count, self.state.jobs_of(command.queue, (FAILED,)), key=_finished)
        return {"ok": True, "jobs": [job.to_wire_with_state() for job in failed]}

    def retry_dlq(self, session: ReplySink, command: cmd.RetryDlq, now: float) -> Reply | None:
        """RetryDlq: failed jobs go back to waiting with a fresh attempt budget; many of them
        in slices (bulk_queues.py)."""
        if command.jobId is not None:  # one job: looked up, not searched for
            job = self.state.jobs.get(command.jobId)
            retried = (
                job is not None
                and job.queue == command.queue
                and job.state == FAILED
                and self.state.revive(job, now)
            )
            if retried:
                event = {"queue": command.queue, "count": 1, "jobId": command.jobId}
                self.state.announce("dlq:retried", event)
            return {"ok": True, "count": int(retried)}
        if start_sweep(self.bulks, self.pulls, session, command, RETRY_DLQ, (FAILED,)):
            return None
        failed = self.state.jobs_of(command.queue, (FAILED,))
        count = sum(self.state.revive(job, now) for job in failed)
        if count:
            self.state.announce("dlq:retry-all", {"queue": command.queue, "count": count})
        return {"ok": True, "count": count}

    def purge_dlq(self, session: ReplySink, command: cmd.PurgeDlq, now: float) -> Reply | None:
        """PurgeDlq: delete the queue's failed jobs; many of them in slices."""
        if start_sweep(self.bulks, self.pulls, session, command, PURGE_DLQ, (FAILED,)):
            return None
        removed = self.state.remove_many(self.state.jobs_of(command.queue, (FAILED,)))
        reply = {"ok": True, "count": len(removed)}
        self.state.purge_later(removed)
        if removed:
            self.state.announce("dlq:purged", {"queue": command.queue, "count": len(removed)})
        return reply

    def set_dlq_config(self, session: ReplySink, command: cmd.SetDlqConfig, now: float) -> Reply:
        """SetDlqConfig: merged into the queue's, stored, and applied at once to the jobs
        already in its DLQ (caps and auto retries, see dlq.py)."""
        self.state.queues.admit((command.queue,), self.state.now)
        queue = self.state.queues.make(command.queue)
        queue.merge_dlq_config(command.config)
        self.state.changes.note_setting(queue.name)
        retries_changed = any(key in command.config for key in RETRY_KEYS)
        apply_dlq_config(self.state, queue, now, retries=retries_changed)
        event = {"queue": queue.name, "config": command.config}
        self.state.announce("config:dlq-changed", event)
        return {"ok": True}

    def get_dlq_config(self, session: ReplySink, command: cmd.GetDlqConfig, now: float) -> Reply:
        """GetDlqConfig: the queue's settings, with the defaults for those it did not set (the
        broker-wide caps standing in for caps it did not set)."""
        queue = self.state.queues.get(command.queue) or QueueState(command.queue)
        return {"ok": True, "config": dlq_config(self.state, queue)}

    def dlq_stats(self, session: ReplySink, command: groups_cmd.GetDlqStats, now: float) -> Reply:
        """GetDlqStats: the queue's failed jobs by reason, those due for an auto retry, and
        when the oldest and newest failed (trioq drops a failed job as it expires, so
        `expired` is 0)."""
        failed = self.state.jobs_of(command.queue, (FAILED,))
        by_reason = dict.fromkeys(DLQ_REASONS, 0)
        config = self.state.queues.make(command.queue).dlq_config if failed else {}
        pending = 0
        for job in failed:
            by_reason[dlq_reason(job)] += 1
            due = auto_retry_due(config, job)
            pending += due is not None and due <= now
        times = [job.completed_at or 0 for job in failed]
        stats = {
            "total": len(failed),
            "byReason": by_reason,
            "byQueue": {command.queue: len(failed)},
            "pendingRetry": pending,
            "expired": 0,
            "oldestEntry": min(times) if times else None,
            "newestEntry": max(times) if times else None,
        }
        return {"ok": True, "data": {"stats": stats}}

    def remove_dlq_job(
        self, session: ReplySink, command: groups_cmd.RemoveDlqJob, now: float
    ) -> Reply:
        """RemoveDlqJob: delete one failed job without retrying it."""
        job = self.state.jobs.get(command.jobId)
        removed = job is not None and job.queue == command.queue and job.state == FAILED
        if job is not None and removed:
            self.state.remove(job)
        return {"ok": True, "data": {"removed": removed}}
