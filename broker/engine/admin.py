"""Operator commands: pausing, draining and cleaning queues, the dead-letter queue, per-queue
limits and settings, and broker-wide statistics (a mixin of Engine).

Queue settings (paused, rate limit, concurrency, stall and dead-letter configs) are stored as
records, so they survive a restart.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable
from typing import Any

import msgspec

from protocol import CommandError
from protocol import admin as cmd
from store import Record

from .dlq import RETRY_KEYS
from .errors import EngineError
from .model import (
    ACTIVE,
    COMPLETED,
    FAILED,
    PRIORITIZED,
    QUEUED_STATES,
    READY_STATES,
    WAITING,
    Job,
)
from .queues import QueueState
from .sink import ReplySink
from .state import EngineState

QUEUE = "queue"
# stallInterval 0: no stall detection unless set here or by a job's own stallTimeout (a job on
# a long lease, silent, is not a stalled job). gracePeriod is kept for the reply's shape.
DEFAULT_STALL_CONFIG = {"enabled": True, "stallInterval": 0, "maxStalls": 3, "gracePeriod": 0}
MAX_PAGE = 1000
"""The most jobs one GetJobs or Dlq reply lists."""
CLEAN_QUEUED = ("waiting", "wait", "delayed", "prioritized", "paused")
Reply = dict[str, Any]
log = logging.getLogger(__name__)

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(dict[str, Any]).decode


def settings_record(queue: QueueState) -> Record:
    """A queue's settings as a stored record."""
    body = {
        "paused": queue.paused,
        "rateLimit": queue.rate_limit,
        "concurrency": queue.concurrency,
        "stallConfig": queue.stall_config,
        "dlqConfig": queue.dlq_config,
        "groups": queue.group_settings,
    }
    return Record(QUEUE, queue.name, _encode(body))


class AdminHandlers:
    """Queue control, DLQ, limits, settings and statistics."""

    state: EngineState
    started_ms: float
    # Renders the Prometheus exposition; the app sets it (the engine knows no HTTP/metrics).
    prometheus: Callable[[], str] | None

    def admin_handlers(self) -> dict[type, Any]:
        """Command type -> handler, for the engine's dispatch table."""
        return {
            cmd.Pause: self.pause,
            cmd.Resume: self.resume,
            cmd.IsPaused: self.is_paused,
            cmd.Drain: self.drain,
            cmd.Obliterate: self.obliterate,
            cmd.ListQueues: self.list_queues,
            cmd.Clean: self.clean,
            cmd.GetJobs: self.get_jobs,
            cmd.GetCountsPerPriority: self.counts_per_priority,
            cmd.GetJobByCustomId: self.job_by_custom_id,
            cmd.Dlq: self.dlq,
            cmd.RetryDlq: self.retry_dlq,
            cmd.PurgeDlq: self.purge_dlq,
            cmd.RetryCompleted: self.retry_completed,
            cmd.RateLimit: self.rate_limit,
            cmd.RateLimitClear: self.rate_limit_clear,
            cmd.SetConcurrency: self.set_concurrency,
            cmd.ClearConcurrency: self.clear_concurrency,
            cmd.SetStallConfig: self.set_stall_config,
            cmd.GetStallConfig: self.get_stall_config,
            cmd.SetDlqConfig: self.set_dlq_config,
            cmd.GetDlqConfig: self.get_dlq_config,
            cmd.Stats: self.stats,
            cmd.Metrics: self.metrics,
            cmd.StorageStatus: self.storage_status,
            cmd.Prometheus: self.prometheus_metrics,
            cmd.TrimEvents: self.trim_events,
        }

    def _jobs_of(self, queue: str, states: Any = None) -> list[Job]:
        return [
            job
            for job in self.state.jobs.values()
            if job.queue == queue and (states is None or job.state in states)
        ]

    def _settings_changed(self, queue: QueueState) -> None:
        self.state.changed_settings.add(queue.name)

    # -- queue control -------------------------------------------------------------------------

    def pause(self, session: ReplySink, command: cmd.Pause, now: float) -> Reply:
        """Pause: pulls get nothing from this queue until Resume (pushes still land)."""
        queue = self.state.queue(command.queue)
        queue.paused = True
        self._settings_changed(queue)
        return {"ok": True}

    def resume(self, session: ReplySink, command: cmd.Resume, now: float) -> Reply:
        """Resume: parked pulls are served at once."""
        queue = self.state.queue(command.queue)
        queue.paused = False
        self._settings_changed(queue)
        self.state.dirty_queues.add(queue)
        return {"ok": True}

    def is_paused(self, session: ReplySink, command: cmd.IsPaused, now: float) -> Reply:
        """IsPaused."""
        queue = self.state.queues.get(command.queue)
        return {"ok": True, "paused": bool(queue and queue.paused)}

    def _remove_all(self, jobs: list[Job]) -> list[Job]:
        """Forget `jobs` (those still there); returns the ones removed."""
        return self.state.remove_many(jobs)

    def _answer_removal(self, removed: list[Job], reply: Reply) -> Reply:
        """The reply of a bulk removal, whose jobs and rows go in slices (housekeeping.py)."""
        self.state.purge_later(removed)
        return reply

    def drain(self, session: ReplySink, command: cmd.Drain, now: float) -> Reply:
        """Drain: remove the jobs that wait to run; active and finished ones stay."""
        removed = self._remove_all(self._jobs_of(command.queue, QUEUED_STATES))
        reply = {"ok": True, "count": len(removed)}
        return self._answer_removal(removed, reply)

    def obliterate(self, session: ReplySink, command: cmd.Obliterate, now: float) -> Reply:
        """Obliterate: every job of the queue, in any state, and its settings, are gone."""
        removed = self._remove_all(self._jobs_of(command.queue))
        queue = self.state.queues.pop(command.queue, None)
        self.state.telemetry.forget(command.queue)
        if queue is not None:
            self.state.graveyard.bury(queue.ready)  # its entries go in slices with the jobs
            queue.ready = []
            self._settings_changed(queue)
            for waiter in queue.waiters:
                if not waiter.done and not waiter.session.closed:
                    waiter.done = True
                    waiter.session.stage_reply(self._pulled(waiter, [], []), waiter.req_id)  # type: ignore[attr-defined]
        return self._answer_removal(removed, {"ok": True})

    def list_queues(self, session: ReplySink, command: cmd.ListQueues, now: float) -> Reply:
        """ListQueues: names, sorted."""
        return {"ok": True, "queues": sorted(self.state.queues)}

    def clean(self, session: ReplySink, command: cmd.Clean, now: float) -> Reply:
        """Clean: remove jobs older than `grace` ms in the state named (queued by default)."""
        state = command.state
        if state is None or state in CLEAN_QUEUED:
            jobs = self._jobs_of(command.queue, QUEUED_STATES)
            old = [job for job in jobs if now - job.created_at >= command.grace]
        else:
            jobs = self._jobs_of(command.queue, (state,))
            old = [job for job in jobs if now - (job.completed_at or now) >= command.grace]
        old.sort(key=lambda job: (job.created_at, job.id))
        removed = self._remove_all(old[: command.limit])
        reply = {"ok": True, "count": len(removed), "ids": [job.id for job in removed]}
        return self._answer_removal(removed, reply)

    # -- queries -------------------------------------------------------------------------------

    def get_jobs(self, session: ReplySink, command: cmd.GetJobs, now: float) -> Reply:
        """GetJobs: jobs in the states asked for, oldest first, one page of at most MAX_PAGE
        (a larger `limit` is cut to it, so no listing builds a huge reply in one pass)."""
        states = set(command.state)
        queue = self.state.queues.get(command.queue)
        if command.explicit and queue is not None and queue.paused:
            # A paused queue's ready jobs are listed as paused, and only as paused.
            paused = "paused" in states
            states -= READY_STATES
            if paused:
                states |= READY_STATES
        jobs = self._jobs_of(command.queue, states)
        end = command.offset + min(command.limit, MAX_PAGE)
        first = heapq.nsmallest(end, jobs, key=_age) if end < len(jobs) else sorted(jobs, key=_age)
        page = first[command.offset : end]
        return {"ok": True, "jobs": [job.to_wire_with_state() for job in page]}

    def counts_per_priority(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetCountsPerPriority: queued jobs by priority (keys are strings)."""
        counts: dict[str, int] = {}
        for job in self._jobs_of(command.queue, QUEUED_STATES):
            key = str(int(job.priority) if float(job.priority).is_integer() else job.priority)
            counts[key] = counts.get(key, 0) + 1
        return {"ok": True, "queue": command.queue, "counts": counts}

    def job_by_custom_id(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetJobByCustomId."""
        job = self.state.jobs.get(command.customId)
        if job is None or job.custom_id != command.customId:
            raise EngineError("Job not found")
        return {"ok": True, "job": job.to_wire_with_state()}

    # -- dead letters --------------------------------------------------------------------------

    def dlq(self, session: ReplySink, command: cmd.Dlq, now: float) -> Reply:
        """Dlq: the queue's failed jobs, oldest failure first (at most MAX_PAGE)."""
        count = min(command.count, MAX_PAGE)
        failed = heapq.nsmallest(count, self._jobs_of(command.queue, (FAILED,)), key=_finished)
        return {"ok": True, "jobs": [job.to_wire_with_state() for job in failed]}

    def retry_dlq(self, session: ReplySink, command: cmd.RetryDlq, now: float) -> Reply:
        """RetryDlq: failed jobs go back to waiting with a fresh attempt budget."""
        failed = self._jobs_of(command.queue, (FAILED,))
        if command.jobId is not None:
            failed = [job for job in failed if job.id == command.jobId]
        return {"ok": True, "count": sum(self.state.revive(job, now) for job in failed)}

    def purge_dlq(self, session: ReplySink, command: cmd.PurgeDlq, now: float) -> Reply:
        """PurgeDlq: delete the queue's failed jobs."""
        removed = self._remove_all(self._jobs_of(command.queue, (FAILED,)))
        reply = {"ok": True, "count": len(removed)}
        return self._answer_removal(removed, reply)

    def retry_completed(self, session: ReplySink, command: cmd.RetryCompleted, now: float) -> Reply:
        """RetryCompleted: completed jobs run again (result and progress cleared)."""
        done = self._jobs_of(command.queue, (COMPLETED,))
        if command.id is not None:
            done = [job for job in done if job.id == command.id]
        count = 0
        for job in done:
            if self.state.revive(job, now):
                job.result = None
                job.progress = 0
                count += 1
        return {"ok": True, "count": count}

    # -- limits and settings -------------------------------------------------------------------

    def rate_limit(self, session: ReplySink, command: cmd.RateLimit, now: float) -> Reply:
        """RateLimit: at most `limit` jobs of the queue start per second."""
        queue = self.state.queue(command.queue)
        queue.rate_limit = command.limit
        queue.tokens, queue.tokens_at = float(command.limit), now
        self._settings_changed(queue)
        return {"ok": True}

    def rate_limit_clear(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RateLimitClear."""
        queue = self.state.queue(command.queue)
        queue.rate_limit = None
        self._settings_changed(queue)
        self.state.dirty_queues.add(queue)
        return {"ok": True}

    def set_concurrency(self, session: ReplySink, command: cmd.SetConcurrency, now: float) -> Reply:
        """SetConcurrency: at most `limit` jobs of the queue active at once."""
        queue = self.state.queue(command.queue)
        queue.concurrency = command.limit
        self._settings_changed(queue)
        self.state.dirty_queues.add(queue)
        return {"ok": True}

    def clear_concurrency(self, session: ReplySink, command: Any, now: float) -> Reply:
        """ClearConcurrency."""
        queue = self.state.queue(command.queue)
        queue.concurrency = None
        self._settings_changed(queue)
        self.state.dirty_queues.add(queue)
        return {"ok": True}

    def set_stall_config(
        self, session: ReplySink, command: cmd.SetStallConfig, now: float
    ) -> Reply:
        """SetStallConfig: merged into the queue's (stallInterval applies to jobs without
        their own stallTimeout; maxStalls to every stall count)."""
        queue = self.state.queue(command.queue)
        queue.stall_config = {**queue.stall_config, **command.config}
        self._settings_changed(queue)
        return {"ok": True}

    def get_stall_config(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetStallConfig: the defaults merged with what was set."""
        queue = self.state.queues.get(command.queue)
        config = {**DEFAULT_STALL_CONFIG, **(queue.stall_config if queue else {})}
        return {"ok": True, "config": config}

    def set_dlq_config(self, session: ReplySink, command: cmd.SetDlqConfig, now: float) -> Reply:
        """SetDlqConfig: merged into the queue's, stored, and applied at once to the jobs
        already in its DLQ (caps and auto retries, see dlq.py)."""
        queue = self.state.queue(command.queue)
        queue.dlq_config = {**queue.dlq_config, **command.config}
        self._settings_changed(queue)
        retries_changed = any(key in command.config for key in RETRY_KEYS)
        self.state.apply_dlq_config(queue, now, retries=retries_changed)
        return {"ok": True}

    def get_dlq_config(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetDlqConfig: the queue's settings, with the defaults for those it did not set (the
        broker-wide caps standing in for caps it did not set)."""
        queue = self.state.queues.get(command.queue) or QueueState(command.queue)
        return {"ok": True, "config": self.state.dlq_config(queue)}

    # -- statistics ----------------------------------------------------------------------------

    def stats(self, session: ReplySink, command: Any, now: float) -> Reply:
        """Stats: job counts over every queue, uptime, totals."""
        totals: dict[str, int] = {}
        for queue in self.state.queues.values():
            for state, count in queue.counts.items():
                totals[state] = totals.get(state, 0) + count
        ready = totals.get(WAITING, 0) + totals.get(PRIORITIZED, 0)
        return {
            "ok": True,
            "stats": {
                "waiting": ready,
                "active": totals.get(ACTIVE, 0),
                "delayed": totals.get("delayed", 0),
                "dlq": totals.get(FAILED, 0),
                "completed": totals.get(COMPLETED, 0),
                "failed": self.state.totals["failed"],
                "uptime": now - self.started_ms,
            },
        }

    def metrics(self, session: ReplySink, command: cmd.Metrics, now: float) -> Reply:
        """Metrics: totals since start, and this process's memory; with a queue, its minute
        counts of completed or failed jobs (`{meta, data, count}`, see telemetry.py)."""
        if command.queue is not None:
            view = self.state.telemetry.view(
                command.queue, command.type, command.start, command.end
            )
            return {"ok": True, "data": view}
        totals = self.state.totals
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

    def prometheus_metrics(self, session: ReplySink, command: Any, now: float) -> Reply:
        """Prometheus: the exposition text the HTTP `/prometheus` route serves."""
        if self.prometheus is None:
            raise EngineError("Prometheus metrics are not available")
        return {"ok": True, "data": {"metrics": self.prometheus()}}

    def trim_events(self, session: ReplySink, command: cmd.TrimEvents, now: float) -> Reply:
        """TrimEvents: trioq keeps no per-queue event journal (events go to listeners as they
        happen), so there is never anything to trim."""
        return {"ok": True, "data": {"removed": 0}}

    def storage_status(self, session: ReplySink, command: Any, now: float) -> Reply:
        """StorageStatus: a broker whose store fails stops, so a running one is healthy."""
        return {"ok": True, "data": {"diskFull": False, "error": None, "since": None}}

    def restore_settings(self, records: list[Record], now: float) -> None:
        """Load stored queue settings (after the jobs: DLQ settings apply to failed jobs)."""
        for record in records:
            if record.kind != QUEUE:
                continue
            body = _decode(record.body)
            queue = self.state.queue(record.key)
            queue.paused = body.get("paused", False)
            queue.rate_limit = body.get("rateLimit")
            queue.concurrency = body.get("concurrency")
            queue.stall_config = body.get("stallConfig") or {}
            queue.dlq_config = self._stored_dlq_config(queue, body.get("dlqConfig") or {})
            queue.group_settings = body.get("groups") or {}
            queue.tokens = float(queue.rate_limit or 0)
            if queue.dlq_config:
                self.state.apply_dlq_config(queue, now)

    def _stored_dlq_config(self, queue: QueueState, stored: dict[str, Any]) -> dict[str, Any]:
        """Stored DLQ settings, checked as SetDlqConfig checks them: earlier brokers stored
        settings they did not enforce, unchecked (`maxEntries: 0` would now empty the DLQ).
        Invalid ones are dropped, with a warning, and the store is corrected."""
        try:
            return cmd.dlq_config_of(stored)
        except CommandError as exc:
            log.warning("queue %s: stored DLQ settings %r ignored: %s", queue.name, stored, exc)
            self._settings_changed(queue)
            return {}

    def take_settings_writes(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Queue settings to write or delete since the last commit."""
        writes, deletes = [], []
        for name in self.state.changed_settings:
            queue = self.state.queues.get(name)
            if queue is None:
                deletes.append((QUEUE, name))
            else:
                writes.append(settings_record(queue))
        self.state.changed_settings.clear()
        return writes, deletes


def _age(job: Job) -> tuple[float, str]:
    return (job.created_at, job.id)


def _finished(job: Job) -> tuple[float, str]:
    return (job.completed_at or 0, job.id)


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
