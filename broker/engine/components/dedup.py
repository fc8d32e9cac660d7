"""Deduplication keys as commands: GetDeduplicationJobId, RemoveDeduplicationKey,
RemoveJobDeduplicationKey (a component).

The keys themselves are EngineState's KeyRegistry (keys.py), taken and freed as jobs move;
this component looks owners up and frees a key on request.
"""

from __future__ import annotations

from typing import Any

from broker.engine.routing import Routes
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.keys import UNIQUE
from protocol import groups as cmd

Reply = dict[str, Any]


class DedupKeys:
    """The dedup-key commands (see the module docstring)."""

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.GetDeduplicationJobId, self.dedup_job_id)
        routes.add(cmd.RemoveDeduplicationKey, self.remove_dedup_key)
        routes.add(cmd.RemoveJobDeduplicationKey, self.remove_job_dedup_key)
        return routes

    def dedup_job_id(
        self, session: ReplySink, command: cmd.GetDeduplicationJobId, now: float
    ) -> Reply:
        """GetDeduplicationJobId: the job holding the key, or null."""
        owner = self.state.keys.owner((UNIQUE, command.queue, command.deduplicationId), now)
        return {"ok": True, "data": {"jobId": owner}}

    def remove_dedup_key(
        self, session: ReplySink, command: cmd.RemoveDeduplicationKey, now: float
    ) -> Reply:
        """RemoveDeduplicationKey: 1 when a job held the key (it no longer does), else 0."""
        owner = self.state.keys.owner((UNIQUE, command.queue, command.deduplicationId), now)
        if owner is None:
            return {"ok": True, "data": {"count": 0}}
        self._drop_unique_key(command.queue, command.deduplicationId, owner)
        return {"ok": True, "data": {"count": 1}}

    def remove_job_dedup_key(
        self, session: ReplySink, command: cmd.RemoveJobDeduplicationKey, now: float
    ) -> Reply:
        """RemoveJobDeduplicationKey: whether the job held its uniqueKey (it no longer does)."""
        job = self.state.jobs.get(command.id)
        key = job.unique_key if job is not None else None
        held = False
        if job is not None and key is not None:
            held = self.state.keys.owner((UNIQUE, job.queue, key), now) == job.id
            if held:
                self._drop_unique_key(job.queue, key, job.id)
        return {"ok": True, "data": {"removed": held}}

    def _drop_unique_key(self, queue: str, key: str, owner: str) -> None:
        # The job forgets its key too, so a restart does not take it again.
        self.state.keys.free((UNIQUE, queue, key), owner)
        job = self.state.jobs.get(owner)
        if job is not None and job.unique_key == key:
            job.unique_key = None
            self.state.touch(job)
