"""Group settings and counts: Set/Get/RemoveGroupConcurrency, group rate limits, Pause/
ResumeGroup, the group counts and GetQueueLimits (a component).

Group settings (concurrency, rate limit, pause, a temporary block) are queue settings: they
live in the queue's `group_settings` (QueueState), are stored with the queue's record and
survive a restart. This component only writes them; PULL obeys them (pulls.py, through
QueueState.group_options and group_admits). A change that may let parked pulls start jobs
marks the queue for them. PUSH's groupMaxSize check is admission.py's.
"""

from __future__ import annotations

from typing import Any

from broker.engine.routing import Routes
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import ACTIVE
from broker.engine.state.queues import QueueState
from protocol import groups as cmd

Reply = dict[str, Any]


class Groups:
    """Group settings and counts (see the module docstring)."""

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.SetGroupConcurrency, self.set_group_concurrency)
        routes.add(cmd.GetGroupConcurrency, self.get_group_concurrency)
        routes.add(cmd.RemoveGroupConcurrency, self.remove_group_concurrency)
        routes.add(cmd.SetGroupRateLimit, self.set_group_rate_limit)
        routes.add(cmd.GetGroupRateLimit, self.get_group_rate_limit)
        routes.add(cmd.RemoveGroupRateLimit, self.remove_group_rate_limit)
        routes.add(cmd.GetGroupRateLimitTtl, self.get_group_rate_limit_ttl)
        routes.add(cmd.RateLimitGroup, self.rate_limit_group)
        routes.add(cmd.PauseGroup, self.pause_group)
        routes.add(cmd.ResumeGroup, self.resume_group)
        routes.add(cmd.IsGroupPaused, self.is_group_paused)
        routes.add(cmd.GetGroupJobsCount, self.group_jobs_count)
        routes.add(cmd.GetGroupActiveCount, self.group_active_count)
        routes.add(cmd.GetGroupsJobsCount, self.groups_jobs_count)
        routes.add(cmd.GetQueueLimits, self.queue_limits)
        return routes

    def _group_setting(self, queue_name: str, group: str) -> Any:
        queue = self.state.queues.get(queue_name)
        return None if queue is None else queue.group_settings.get(group)

    def _set_group(self, command: cmd.GroupQuery, key: str, value: Any) -> bool:
        """Set (value not None) or drop one setting; True when that changed anything. Setting
        one may make the queue (within --max-queues); dropping one never does."""
        queue = self.state.queues.get(command.queue)
        if queue is None:
            if value is None:
                return False
            self.state.queues.admit((command.queue,), self.state.now)
            queue = self.state.queues.make(command.queue)
        settings = queue.group_settings.get(command.groupId, {})
        before = settings.get(key)
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
        queue.set_group(command.groupId, settings)
        self.state.changes.note_setting(queue.name)
        # Its last setting undone, it may hold nothing.
        self.state.queues.note_emptied(queue, self.state.now)
        self.state.changes.note_dirty(queue)  # a lifted limit may serve parked pulls
        return before != value

    def set_group_concurrency(
        self, session: ReplySink, command: cmd.SetGroupConcurrency, now: float
    ) -> Reply:
        """SetGroupConcurrency."""
        self._set_group(command, "concurrency", command.concurrency)
        return {"ok": True}

    def get_group_concurrency(
        self, session: ReplySink, command: cmd.GetGroupConcurrency, now: float
    ) -> Reply:
        """GetGroupConcurrency: the setting, or null."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"concurrency": settings.get("concurrency")}}

    def remove_group_concurrency(
        self, session: ReplySink, command: cmd.RemoveGroupConcurrency, now: float
    ) -> Reply:
        """RemoveGroupConcurrency: whether there was one."""
        return {"ok": True, "data": {"removed": self._set_group(command, "concurrency", None)}}

    def set_group_rate_limit(
        self, session: ReplySink, command: cmd.SetGroupRateLimit, now: float
    ) -> Reply:
        """SetGroupRateLimit: at most `max` starts per `duration` ms."""
        self._set_group(command, "limit", {"max": command.max, "duration": command.duration})
        return {"ok": True}

    def get_group_rate_limit(
        self, session: ReplySink, command: cmd.GetGroupRateLimit, now: float
    ) -> Reply:
        """GetGroupRateLimit: `{max, duration}`, or null."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"limit": settings.get("limit")}}

    def remove_group_rate_limit(
        self, session: ReplySink, command: cmd.RemoveGroupRateLimit, now: float
    ) -> Reply:
        """RemoveGroupRateLimit: whether there was one."""
        return {"ok": True, "data": {"removed": self._set_group(command, "limit", None)}}

    def get_group_rate_limit_ttl(
        self, session: ReplySink, command: cmd.GetGroupRateLimitTtl, now: float
    ) -> Reply:
        """GetGroupRateLimitTtl: ms until the group may start a job again (0: it may now)."""
        queue = self.state.queues.get(command.queue)
        frees = None
        if queue is not None:
            options = queue.group_options(command.groupId, None)
            if options is not None:
                frees = queue.group_frees_at(command.groupId, options)
        return {"ok": True, "data": {"ttl": max(frees - now, 0) if frees else 0}}

    def rate_limit_group(
        self, session: ReplySink, command: cmd.RateLimitGroup, now: float
    ) -> Reply:
        """RateLimitGroup: no start of the group for `duration` ms. A pull the block holds back
        schedules its own wake-up for when it ends (pulls.py, `_wake_when_group_frees`)."""
        self._set_group(command, "blockedUntil", now + command.duration)
        return {"ok": True}

    def pause_group(self, session: ReplySink, command: cmd.PauseGroup, now: float) -> Reply:
        """PauseGroup: whether it was running."""
        return {"ok": True, "data": {"changed": self._set_group(command, "paused", True)}}

    def resume_group(self, session: ReplySink, command: cmd.ResumeGroup, now: float) -> Reply:
        """ResumeGroup: whether it was paused."""
        return {"ok": True, "data": {"changed": self._set_group(command, "paused", None)}}

    def is_group_paused(self, session: ReplySink, command: cmd.IsGroupPaused, now: float) -> Reply:
        """IsGroupPaused."""
        settings = self._group_setting(command.queue, command.groupId) or {}
        return {"ok": True, "data": {"paused": bool(settings.get("paused"))}}

    def group_jobs_count(
        self, session: ReplySink, command: cmd.GetGroupJobsCount, now: float
    ) -> Reply:
        """GetGroupJobsCount: the group's jobs not yet started."""
        queue = self.state.queues.get(command.queue)
        count = queue.group_pending.get(command.groupId, 0) if queue else 0
        return {"ok": True, "data": {"count": count}}

    def group_active_count(
        self, session: ReplySink, command: cmd.GetGroupActiveCount, now: float
    ) -> Reply:
        """GetGroupActiveCount: the group's active jobs."""
        queue = self.state.queues.get(command.queue)
        count = queue.group_active.get(command.groupId, 0) if queue else 0
        return {"ok": True, "data": {"count": count}}

    def groups_jobs_count(
        self, session: ReplySink, command: cmd.GetGroupsJobsCount, now: float
    ) -> Reply:
        """GetGroupsJobsCount: grouped jobs of the queue not yet started, all groups."""
        queue = self.state.queues.get(command.queue)
        count = sum(queue.group_pending.values()) if queue else 0
        return {"ok": True, "data": {"count": count}}

    def queue_limits(self, session: ReplySink, command: cmd.GetQueueLimits, now: float) -> Reply:
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
