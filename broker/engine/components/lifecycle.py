"""Handlers for the rest of a job's life: logs, leases, transitions, progress, WaitJob.

A component. It owns the WaitJob requests (`job_waiters`); the jobs are EngineState's, the
lease checks leases.py's. Each handler checks first and mutates after, like jobs.py's.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import msgspec

from broker.engine.errors import EngineError
from broker.engine.routing import Routes
from broker.engine.rules.deadlines import WAIT_JOB
from broker.engine.rules.leases import active_job, leased
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    FAILED,
    QUEUED_STATES,
    READY_STATES,
    UNKNOWN,
    WAITING_CHILDREN,
    Job,
)
from protocol import lifecycle as cmd
from protocol.jobspec import check_group_priority
from protocol.values import utf8_size

MAX_LOGS = 100
MAX_LOG_BYTES = 1024 * 1024
"""The bytes (UTF-8) of a job's log messages together; past it the oldest lines go."""
LOCK_INVALID = "Lock not found or invalid token"
# WaitJob requests one connection may have waiting at once: below its 50 requests in flight,
# so a client waiting for many jobs can still send the ACK that ends a wait.
MAX_WAITS_PER_CONNECTION = 40
TOO_MANY_WAITS = (
    f"Too many WaitJob requests waiting on this connection (at most {MAX_WAITS_PER_CONNECTION})"
)
Reply = dict[str, Any]


class Lifecycle:
    """Logs, leases, transitions, progress and WaitJob."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        # WaitJob requests by job id: (sink, reqId), answered when the job finishes.
        self.job_waiters: dict[str, list[tuple[ReplySink, Any]]] = {}
        self.waits_of: dict[ReplySink, int] = {}  # how many WaitJobs each connection has waiting

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.AddLog, self.add_log)
        routes.add(cmd.GetLogs, self.get_logs)
        routes.add(cmd.ClearLogs, self.clear_logs)
        routes.add(cmd.ExtendLock, self.extend_lock)
        routes.add(cmd.ExtendLocks, self.extend_locks)
        routes.add(cmd.ChangeDelay, self.change_delay)
        routes.add(cmd.MoveToDelayed, self.move_to_delayed)
        routes.add(cmd.MoveToWait, self.move_to_wait)
        routes.add(cmd.Promote, self.promote)
        routes.add(cmd.PromoteJobs, self.promote_jobs)
        routes.add(cmd.ChangePriority, self.change_priority)
        routes.add(cmd.Update, self.update)
        routes.add(cmd.Cancel, self.cancel)
        routes.add(cmd.Discard, self.discard)
        routes.add(cmd.Progress, self.progress)
        routes.add(cmd.GetProgress, self.get_progress)
        routes.add(cmd.WaitJob, self.wait_job)
        routes.add(cmd.CompactMemory, self.compact_memory)
        return routes

    def _job(self, job_id: str, error: str) -> Job:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise EngineError(error)
        return job

    def add_log(self, session: ReplySink, command: cmd.AddLog, now: float) -> Reply:
        """AddLog: keep at most 100 lines (or the job's keepLogs) and MAX_LOG_BYTES of
        messages, the oldest dropped (a line is at most 64 KiB: protocol/lifecycle.py)."""
        job = self._job(command.id, "Job not found")
        logs = job.logs if job.logs is not None else []
        logs.append({"message": command.message, "level": command.level, "timestamp": now})
        cap = MAX_LOGS
        if job.keep_logs is not None and job.keep_logs >= 0:
            cap = min(cap, int(job.keep_logs))
        if len(logs) > cap:
            del logs[: len(logs) - cap]  # the oldest go
        size = sum(utf8_size(line["message"]) for line in logs)
        while size > MAX_LOG_BYTES:
            size -= utf8_size(logs.pop(0)["message"])  # the oldest go
        job.logs = logs
        self.state.touch(job)
        return {"ok": True, "data": {"added": True}}

    def get_logs(self, session: ReplySink, command: cmd.GetLogs, now: float) -> Reply:
        """GetLogs: lines `start`..`end` (inclusive, negative from the end) and the total."""
        job = self.state.jobs.get(command.id)
        logs = (job.logs or []) if job is not None else []
        start = 0 if command.start is None else command.start
        if command.end is None or command.end == -1:
            page = logs[start:]
        else:
            page = logs[start : command.end + 1]
        return {"ok": True, "data": {"logs": page, "count": len(logs)}}

    def clear_logs(self, session: ReplySink, command: cmd.ClearLogs, now: float) -> Reply:
        """ClearLogs: keep the newest `keepLogs` lines (0: none); unknown jobs are a no-op."""
        job = self.state.jobs.get(command.id)
        if job is not None and job.logs:
            keep = command.keepLogs  # a whole number of lines, or Infinity: all of them
            if keep < len(job.logs):
                job.logs = job.logs[-int(keep) :] if keep else []
            self.state.touch(job)
        return {"ok": True}

    def extend_lock(self, session: ReplySink, command: cmd.ExtendLock, now: float) -> Reply:
        """ExtendLock: the lease runs `duration` ms from now (omitted: its current TTL)."""
        job = leased(self.state, command.id, command.token)
        if job is None:
            raise EngineError(LOCK_INVALID)
        ttl = job.lock_ttl if command.duration is None else command.duration
        self.state.renew_lease(job, now, ttl)
        return {"ok": True}

    def extend_locks(self, session: ReplySink, command: cmd.ExtendLocks, now: float) -> Reply:
        """ExtendLocks: how many of the leases were extended."""
        count = 0
        for job_id, token, duration in zip(
            command.ids, command.tokens, command.durations, strict=True
        ):
            job = leased(self.state, job_id, token)
            if job is not None:
                self.state.renew_lease(job, now, job.lock_ttl if duration is None else duration)
                count += 1
        return {"ok": True, "count": count}

    def change_delay(self, session: ReplySink, command: cmd.ChangeDelay, now: float) -> Reply:
        """ChangeDelay: a queued job runs `delay` ms from now; an active one goes back."""
        job = self.state.jobs.get(command.id)
        if job is not None and job.state == ACTIVE:
            active_job(self.state, command.id, command.token)
            self.state.return_to_queue(job, now, now + command.delay)
        elif job is None or job.state not in QUEUED_STATES:
            raise EngineError("Job not found or cannot change delay")
        else:
            self.state.reschedule(job, now, now + command.delay)
        self.state.emit("delay-changed", job, newDelay=command.delay)
        return {"ok": True}

    def move_to_delayed(self, session: ReplySink, command: cmd.MoveToDelayed, now: float) -> Reply:
        """MoveToDelayed: an active job goes back (token if leased), and a waiting, delayed or
        prioritized one is re-delayed, to run `delay` ms from now."""
        job = self.state.jobs.get(command.id)
        if job is None:
            raise EngineError("Job not found")
        if job.state in QUEUED_STATES:
            self.state.reschedule(job, now, now + command.delay)
        elif job.state != ACTIVE:
            raise EngineError(f"Job is not active (current state: {job.state})")
        else:
            active_job(self.state, command.id, command.token)
            self.state.return_to_queue(job, now, now + command.delay)
        self.state.emit("moved-to-delayed", job, delay=command.delay)
        return {"ok": True}

    def move_to_wait(self, session: ReplySink, command: cmd.MoveToWait, now: float) -> Reply:
        """MoveToWait: active -> waiting (token if leased), delayed -> ready, failed -> retried."""
        job = self.state.jobs.get(command.id)
        state = job.state if job is not None else UNKNOWN
        if job is None or state not in (ACTIVE, DELAYED, FAILED, *READY_STATES):
            raise EngineError(f"Cannot move job from state '{state}' to waiting")
        if state == ACTIVE:
            active_job(self.state, command.id, command.token)
            self.state.return_to_queue(job, now, now)
        elif state == DELAYED:
            self.state.reschedule(job, now, now)
        elif state == FAILED:
            self.state.revive(job, now)
        return {"ok": True}

    def promote(self, session: ReplySink, command: cmd.Promote, now: float) -> Reply:
        """Promote: a delayed job is ready now."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state != DELAYED:
            raise EngineError("Job not found or not delayed")
        self.state.reschedule(job, now, now)
        self.state.emit("promoted", job)
        return {"ok": True}

    def promote_jobs(self, session: ReplySink, command: cmd.PromoteJobs, now: float) -> Reply:
        """PromoteJobs: the queue's delayed jobs (soonest first, up to `count`) are ready now."""
        queue = self.state.queues.get(command.queue)
        delayed = sorted(queue.delayed, key=lambda job: (job.run_at, job.id)) if queue else []
        if command.count is not None:
            delayed = delayed[: command.count]
        for job in delayed:
            self.state.reschedule(job, now, now)
        return {"ok": True, "count": len(delayed)}

    def change_priority(self, session: ReplySink, command: cmd.ChangePriority, now: float) -> Reply:
        """ChangePriority: a queued job takes its new place."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state not in QUEUED_STATES:
            raise EngineError("Job not found or not in queue")
        if job.group_id is not None:
            check_group_priority(command.priority)
        job.priority = command.priority
        if job.state in READY_STATES:
            self.state.make_ready(job)  # a fresh heap entry; the old one is stale
        else:
            self.state.touch(job)
        self.state.emit("priority-changed", job, newPriority=command.priority)
        return {"ok": True}

    def update(self, session: ReplySink, command: cmd.Update, now: float) -> Reply:
        """Update: replace the data of a job that has not finished."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state not in (*QUEUED_STATES, ACTIVE, WAITING_CHILDREN):
            raise EngineError("Job not found or cannot be updated")
        job.data = command.data
        self.state.touch(job)
        self.state.emit("data-updated", job)
        return {"ok": True}

    def cancel(self, session: ReplySink, command: cmd.Cancel, now: float) -> Reply:
        """Cancel: remove a job that has not started (queued or waiting for dependencies)."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state not in (*QUEUED_STATES, WAITING_CHILDREN):
            raise EngineError("Job not found or cannot be cancelled")
        self.state.remove(job)
        return {"ok": True}

    def discard(self, session: ReplySink, command: cmd.Discard, now: float) -> Reply:
        """Discard: a queued or active job fails at once, without retries."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state not in (*QUEUED_STATES, ACTIVE, WAITING_CHILDREN):
            raise EngineError("Job not found")
        if job.state == ACTIVE:
            active_job(self.state, command.id, command.token)
        self.state.fail(job, now, "Job discarded", False)
        self.state.emit("discarded", job)
        return {"ok": True}

    def progress(self, session: ReplySink, command: cmd.Progress, now: float) -> Reply:
        """Progress: an active job reports how far it got (also a heartbeat)."""
        job = self.state.jobs.get(command.id)
        if job is None:
            raise EngineError("Job not found")
        if job.state != ACTIVE:
            raise EngineError(f"Job is not active (current state: {job.state})")
        job.progress = command.progress
        job.progress_message = command.message
        job.last_heartbeat = now
        self.state.touch(job)
        self.state.emit("progress", job, progress=command.progress)
        return {"ok": True}

    def get_progress(self, session: ReplySink, command: cmd.GetProgress, now: float) -> Reply:
        """GetProgress: an active job's progress and message."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state != ACTIVE:
            raise EngineError("Job not found or not active")
        return {"ok": True, "progress": job.progress, "message": job.progress_message}

    def wait_job(self, session: ReplySink, command: cmd.WaitJob, now: float) -> Reply | None:
        """WaitJob: answer when the job completes (or fails), or after `timeout` ms. A job
        that completed and was forgotten since (removed on completion, or by retention) is
        still known to have completed; its result is not kept."""
        # An id pushed again leaves done_ids (state/engine_state.py).
        if command.id in self.state.deps.done_ids:
            return {"ok": True, "completed": True, "result": None}
        job = self._job(command.id, "Job not found")
        if job.state in (COMPLETED, FAILED):
            return finished_reply(job)
        waiting = self.waits_of.get(session, 0)
        if waiting >= MAX_WAITS_PER_CONNECTION:
            raise EngineError(TOO_MANY_WAITS)
        self.waits_of[session] = waiting + 1
        self.job_waiters.setdefault(job.id, []).append((session, command.reqId))
        self.state.wheel.schedule(now + command.timeout, WAIT_JOB, (job.id, session, command.reqId))
        return None

    def answer_job_waiters(self) -> None:
        """Answer WaitJob requests of the jobs that finished in this pass."""
        observers = self.state.observers
        if not self.job_waiters:  # nobody waits (a drain may have finished a million jobs)
            observers.drop_finished()
            return
        done = self.state.deps.done_ids
        for job in reversed(observers.take_finished()):
            for session, req_id in self.job_waiters.pop(job.id, ()):
                session.stage_reply(finished_reply(job, done), req_id)
                self._wait_ended(session)

    def wait_timed_out(self, target: tuple[str, Any, Any]) -> None:
        """A WaitJob's time is up: answer `completed: false` if it is still waiting."""
        job_id, session, req_id = target
        waiting = self.job_waiters.get(job_id, [])
        if (session, req_id) in waiting:
            waiting.remove((session, req_id))
            if not waiting:
                del self.job_waiters[job_id]
            session.stage_reply({"ok": True, "completed": False}, req_id)
            self._wait_ended(session)

    def _wait_ended(self, session: ReplySink) -> None:
        """One of the connection's WaitJobs was answered."""
        left = self.waits_of.pop(session, 1) - 1
        if left > 0:
            self.waits_of[session] = left

    def compact_memory(self, session: ReplySink, command: cmd.CompactMemory, now: float) -> Reply:
        """CompactMemory: drop stale heap and timer entries and idle empty queues."""
        self.state.compact()
        return {"ok": True}


def finished_reply(job: Job, done_ids: Container[str] = ()) -> Reply:
    """What WaitJob answers for a finished job. One forgotten as it completed (removed on
    completion, or pushed out of retention in the same pass) is still a completion: its id is
    among `done_ids`, and its result still on it."""
    if job.state == COMPLETED or (not job.state and job.id in done_ids):
        result = None if job.result is None else msgspec.Raw(job.result)
        return {"ok": True, "completed": True, "result": result}
    return {"ok": True, "completed": False, "state": job.state or UNKNOWN}
