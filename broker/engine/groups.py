"""Stored group settings and the remaining commands of the official client: dedup keys, queue
limits, DLQ stats, legacy flow edits and the dashboard views (a mixin of Engine).

Group settings (concurrency, rate limit, pause, a temporary block) are queue settings: they
are stored with the queue's record and survive a restart, and every PULL of the queue obeys
them (queues.py `group_options`). A change that may let parked pulls start jobs marks the
queue for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol import groups as cmd

from .admin import rss_mib
from .deadlines import GROUP_WAKE, TIMEOUT_REASON, TTL_REASON
from .dlq import auto_retry_due
from .errors import EngineError
from .keys import UNIQUE
from .model import ACTIVE, FAILED, QUEUED_STATES, WAITING_CHILDREN, Job
from .queues import QueueState
from .sink import ReplySink

if TYPE_CHECKING:
    from .crons import CronScheduler
    from .workers import WorkerRegistry
from .state import NOT_STARTED, EngineState

Reply = dict[str, Any]
DLQ_REASONS = ("explicit_fail", "max_attempts_exceeded", "timeout", "stalled", "ttl_expired",
               "worker_lost", "unknown")  # fmt: skip
DASHBOARD_DLQ_PREVIEW = 10


def dlq_reason(job: Job) -> str:
    """The reference's failure category for a failed job (from trioq's failure text)."""
    reason = job.failed_reason or ""
    if reason == TTL_REASON:
        return "ttl_expired"
    if reason == TIMEOUT_REASON:
        return "timeout"
    if "stall" in reason.lower() or "lock expired" in reason.lower():
        return "stalled"
    if job.attempts >= job.max_attempts:
        return "max_attempts_exceeded"
    return "explicit_fail"


class GroupHandlers:
    """Group settings, dedup keys, limits, DLQ stats, flow edits, dashboard (Engine mixin)."""

    state: EngineState
    started_ms: float
    crons: CronScheduler
    workers: WorkerRegistry

    def _active_job(self, job_id: str, token: str | None) -> Job:  # provided by Engine
        raise NotImplementedError

    def group_handlers(self) -> dict[type, Any]:
        """Command type -> handler, for the engine's dispatch table."""
        return {
            cmd.SetGroupConcurrency: self.set_group_concurrency,
            cmd.GetGroupConcurrency: self.get_group_concurrency,
            cmd.RemoveGroupConcurrency: self.remove_group_concurrency,
            cmd.SetGroupRateLimit: self.set_group_rate_limit,
            cmd.GetGroupRateLimit: self.get_group_rate_limit,
            cmd.RemoveGroupRateLimit: self.remove_group_rate_limit,
            cmd.GetGroupRateLimitTtl: self.get_group_rate_limit_ttl,
            cmd.RateLimitGroup: self.rate_limit_group,
            cmd.PauseGroup: self.pause_group,
            cmd.ResumeGroup: self.resume_group,
            cmd.IsGroupPaused: self.is_group_paused,
            cmd.GetGroupJobsCount: self.group_jobs_count,
            cmd.GetGroupActiveCount: self.group_active_count,
            cmd.GetGroupsJobsCount: self.groups_jobs_count,
            cmd.GetQueueLimits: self.queue_limits,
            cmd.GetDlqStats: self.dlq_stats,
            cmd.RemoveDlqJob: self.remove_dlq_job,
            cmd.GetDeduplicationJobId: self.dedup_job_id,
            cmd.RemoveDeduplicationKey: self.remove_dedup_key,
            cmd.RemoveJobDeduplicationKey: self.remove_job_dedup_key,
            cmd.MoveToWaitingChildren: self.move_to_waiting_children,
            cmd.RemoveChildDependency: self.remove_child_dependency,
            cmd.RemoveUnprocessedChildren: self.remove_unprocessed_children,
            cmd.DashboardOverview: self.dashboard_overview,
            cmd.DashboardQueues: self.dashboard_queues,
            cmd.DashboardQueue: self.dashboard_queue,
        }

    # -- group settings ------------------------------------------------------------------------

    def _group_setting(self, queue_name: str, group: str) -> Any:
        queue = self.state.queues.get(queue_name)
        return None if queue is None else queue.group_settings.get(group)

    def _set_group(self, command: cmd.GroupQuery, key: str, value: Any) -> bool:
        """Set (value not None) or drop one setting; True when that changed anything."""
        queue = self.state.queue(command.queue)
        settings = queue.group_settings.get(command.groupId, {})
        before = settings.get(key)
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
        if settings:
            queue.group_settings[command.groupId] = settings
        else:
            queue.group_settings.pop(command.groupId, None)
        self.state.changed_settings.add(queue.name)
        self.state.dirty_queues.add(queue)  # a lifted limit may serve parked pulls
        return before != value

    def set_group_concurrency(self, session: ReplySink, command: Any, now: float) -> Reply:
        """SetGroupConcurrency."""
        self._set_group(command, "concurrency", command.concurrency)
        return {"ok": True}

    def get_group_concurrency(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupConcurrency: the setting, or null."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"concurrency": settings.get("concurrency")}}

    def remove_group_concurrency(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveGroupConcurrency: whether there was one."""
        return {"ok": True, "data": {"removed": self._set_group(command, "concurrency", None)}}

    def set_group_rate_limit(self, session: ReplySink, command: Any, now: float) -> Reply:
        """SetGroupRateLimit: at most `max` starts per `duration` ms."""
        self._set_group(command, "limit", {"max": command.max, "duration": command.duration})
        return {"ok": True}

    def get_group_rate_limit(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupRateLimit: `{max, duration}`, or null."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"limit": settings.get("limit")}}

    def remove_group_rate_limit(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveGroupRateLimit: whether there was one."""
        return {"ok": True, "data": {"removed": self._set_group(command, "limit", None)}}

    def get_group_rate_limit_ttl(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupRateLimitTtl: ms until the group may start a job again (0: it may now)."""
        queue = self.state.queues.get(command.queue)
        frees = None
        if queue is not None:
            options = queue.group_options(command.groupId, None)
            if options is not None:
                frees = queue.group_frees_at(command.groupId, options)
        return {"ok": True, "data": {"ttl": max(frees - now, 0) if frees else 0}}

    def rate_limit_group(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RateLimitGroup: no start of the group for `duration` ms."""
        self._set_group(command, "blockedUntil", now + command.duration)
        queue = self.state.queue(command.queue)
        self.state.wheel.schedule(now + command.duration, GROUP_WAKE, queue)  # then serve polls
        return {"ok": True}

    def pause_group(self, session: ReplySink, command: Any, now: float) -> Reply:
        """PauseGroup: whether it was running."""
        return {"ok": True, "data": {"changed": self._set_group(command, "paused", True)}}

    def resume_group(self, session: ReplySink, command: Any, now: float) -> Reply:
        """ResumeGroup: whether it was paused."""
        return {"ok": True, "data": {"changed": self._set_group(command, "paused", None)}}

    def is_group_paused(self, session: ReplySink, command: Any, now: float) -> Reply:
        """IsGroupPaused."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"paused": bool(settings.get("paused"))}}

    def group_jobs_count(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupJobsCount: the group's jobs not yet started."""
        queue = self.state.queues.get(command.queue)
        count = queue.group_pending.get(command.groupId, 0) if queue else 0
        return {"ok": True, "data": {"count": count}}

    def group_active_count(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupActiveCount: the group's active jobs."""
        queue = self.state.queues.get(command.queue)
        count = queue.group_active.get(command.groupId, 0) if queue else 0
        return {"ok": True, "data": {"count": count}}

    def groups_jobs_count(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetGroupsJobsCount: grouped jobs of the queue not yet started, all groups."""
        queue = self.state.queues.get(command.queue)
        count = sum(queue.group_pending.values()) if queue else 0
        return {"ok": True, "data": {"count": count}}

    # -- queue limits and dead letters ---------------------------------------------------------

    def queue_limits(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetQueueLimits: the queue's limits and whether they hold starts back now."""
        queue = self.state.queues.get(command.queue) or QueueState(command.queue)
        ttl = 0.0
        if queue.rate_limit is not None:
            limit = queue.rate_limit
            tokens = min(limit, queue.tokens + (now - queue.tokens_at) * limit / 1000)
            ttl = 0.0 if tokens >= 1 else (1 - tokens) * 1000 / limit
        maxed = queue.concurrency is not None and queue.counts[ACTIVE] >= queue.concurrency
        limits = {
            "rateLimit": queue.rate_limit,
            "rateLimitTtl": ttl,
            "concurrencyLimit": queue.concurrency,
            "maxed": maxed,
        }
        return {"ok": True, "data": {"limits": limits}}

    def _failed_of(self, queue: str) -> list[Job]:
        return [j for j in self.state.jobs.values() if j.queue == queue and j.state == FAILED]

    def dlq_stats(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetDlqStats: the queue's failed jobs by reason, those due for an auto retry, and
        when the oldest and newest failed (trioq drops a failed job as it expires, so
        `expired` is 0)."""
        failed = self._failed_of(command.queue)
        by_reason = dict.fromkeys(DLQ_REASONS, 0)
        config = self.state.queue(command.queue).dlq_config if failed else {}
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

    def remove_dlq_job(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveDlqJob: delete one failed job without retrying it."""
        job = self.state.jobs.get(command.jobId)
        removed = job is not None and job.queue == command.queue and job.state == FAILED
        if removed:
            self.state.remove(job)  # type: ignore[arg-type]
        return {"ok": True, "data": {"removed": removed}}

    # -- dedup keys ----------------------------------------------------------------------------

    def dedup_job_id(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetDeduplicationJobId: the job holding the key, or null."""
        owner = self.state.key_owner(UNIQUE, command.queue, command.deduplicationId, now)
        return {"ok": True, "data": {"jobId": owner}}

    def remove_dedup_key(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveDeduplicationKey: 1 when a job held the key (it no longer does), else 0."""
        owner = self.state.key_owner(UNIQUE, command.queue, command.deduplicationId, now)
        if owner is None:
            return {"ok": True, "data": {"count": 0}}
        self._drop_unique_key(command.queue, command.deduplicationId, owner)
        return {"ok": True, "data": {"count": 1}}

    def remove_job_dedup_key(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveJobDeduplicationKey: whether the job held its uniqueKey (it no longer does)."""
        job = self.state.jobs.get(command.id)
        key = job.unique_key if job is not None else None
        held = key is not None and self.state.key_owner(UNIQUE, job.queue, key, now) == job.id  # type: ignore[union-attr]
        if held:
            self._drop_unique_key(job.queue, key, job.id)  # type: ignore[union-attr, arg-type]
        return {"ok": True, "data": {"removed": held}}

    def _drop_unique_key(self, queue: str, key: str, owner: str) -> None:
        # The job forgets its key too, so a restart does not take it again.
        self.state.keys.release((UNIQUE, queue, key), owner)
        job = self.state.jobs.get(owner)
        if job is not None and job.unique_key == key:
            job.unique_key = None
            self.state.touch(job)

    # -- flow edits ----------------------------------------------------------------------------

    def move_to_waiting_children(self, session: ReplySink, command: Any, now: float) -> Reply:
        """MoveToWaitingChildren: an active job (token if leased) waits for its unfinished
        dependencies and children (those attached while it ran, by UpdateParent); with none
        left it stays active and the answer is `moved: false` (BullMQ's rule)."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state != ACTIVE:
            raise EngineError("Job is not active")
        self._active_job(command.id, command.token)
        pending = [
            dep
            for dep in dict.fromkeys([*job.depends_on, *job.children_ids])
            if dep != job.id and not self.state.completed_once(dep)
        ]
        if not pending:
            return {"ok": True, "data": {"moved": False}}
        job.depends_on = list(dict.fromkeys([*job.depends_on, *pending]))
        self.state.wait_for_children(job, now)
        return {"ok": True, "data": {"moved": True}}

    def remove_child_dependency(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveChildDependency: detach a not-yet-finished child from its waiting parent;
        the parent runs once nothing else is pending. `removed: false` when there was no
        such edge to drop."""
        child = self.state.jobs.get(command.id)
        if child is None:
            raise EngineError(f"Job not found: {command.id}")
        if child.parent_id is None:
            raise EngineError(f"Job {command.id} has no parent")
        parent = self.state.jobs.get(child.parent_id)
        removable = (
            parent is not None
            and parent.state == WAITING_CHILDREN
            and child.id in parent.depends_on
            and child.state in (*QUEUED_STATES, WAITING_CHILDREN, ACTIVE)
        )
        if not removable:
            return {"ok": True, "removed": False}
        parent.children_ids = [i for i in parent.children_ids if i != child.id]  # type: ignore[union-attr]
        child.parent_id = None
        self.state.touch(child)
        self.state.drop_dependency(parent, child.id, now)  # type: ignore[arg-type]
        return {"ok": True, "removed": True}

    def remove_unprocessed_children(self, session: ReplySink, command: Any, now: float) -> Reply:
        """RemoveUnprocessedChildren: the parent's children that have not started are removed
        (active and finished ones stay); the parent stops waiting for them."""
        parent = self.state.jobs.get(command.id)
        if parent is None:
            return {"ok": True}
        for child_id in list(parent.children_ids):
            child = self.state.jobs.get(child_id)
            if child is None or child.state not in NOT_STARTED:
                continue
            self.state.remove(child)
            if parent.state == WAITING_CHILDREN and child_id in parent.depends_on:
                self.state.drop_dependency(parent, child_id, now)
        return {"ok": True}

    # -- dashboard -----------------------------------------------------------------------------

    def dashboard_overview(self, session: ReplySink, command: Any, now: float) -> Reply:
        """DashboardOverview: broker-wide counts and totals, workers and crons."""
        stats = self.stats(session, command, now)["stats"]  # type: ignore[attr-defined]
        totals = self.state.totals
        stats.update(
            totalPushed=totals["pushed"],
            totalPulled=totals["pulled"],
            totalCompleted=totals["completed"],
            totalFailed=totals["failed"],
        )
        workers = self.workers.list(session, command, now)["data"]["workers"]
        active = sum(worker["status"] == "active" for worker in workers)
        data = {
            "stats": stats,
            "memory": {"rss": rss_mib()},
            "workers": {"total": len(workers), "active": active, "list": workers},
            "crons": self.crons.summaries(),
            "timestamp": now,
        }
        return {"ok": True, "data": data}

    def dashboard_queues(self, session: ReplySink, command: Any, now: float) -> Reply:
        """DashboardQueues: every queue's counts."""
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
            for name, queue in sorted(self.state.queues.items())
        ]
        return {"ok": True, "data": {"queues": queues, "timestamp": now}}

    def dashboard_queue(self, session: ReplySink, command: Any, now: float) -> Reply:
        """DashboardQueue: one queue's counts (paused view), priorities and DLQ preview."""
        counts = self.get_job_counts(session, command, now)["counts"]  # type: ignore[attr-defined]
        priorities = self.counts_per_priority(session, command, now)["counts"]  # type: ignore[attr-defined]
        failed = sorted(self._failed_of(command.queue), key=lambda j: (j.completed_at or 0, j.id))
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
