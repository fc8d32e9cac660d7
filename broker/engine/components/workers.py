"""Registered workers: what the SDKs' Worker classes announce about themselves.

Workers register (an upsert: SDKs register twice at start), heartbeat, and unregister; a worker
registered on a connection is dropped when that connection closes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.engine.errors import EngineError
from broker.engine.routing import Routes
from broker.engine.sink import ReplySink
from protocol import commands as cmd

WORKER_TIMEOUT_MS = 30_000


class WorkerRegistry:
    """Worker records by id."""

    def __init__(self) -> None:
        self._workers: dict[str, dict[str, Any]] = {}
        self._sessions: dict[str, ReplySink] = {}
        # Records an event for the subscribers (the engine sets EngineState.announce).
        self.announce: Callable[[str, dict[str, Any]], None] = lambda name, data: None

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.RegisterWorker, self.register)
        routes.add(cmd.UnregisterWorker, self.unregister)
        routes.add(cmd.Heartbeat, self.heartbeat)
        routes.add(cmd.ListWorkers, self.list_workers)
        return routes

    def register(
        self, session: ReplySink, command: cmd.RegisterWorker, now: float
    ) -> dict[str, Any]:
        """RegisterWorker: create or refresh a worker record bound to this connection."""
        worker_id = command.workerId or command.name
        record = self._workers.get(worker_id) or {
            "workerId": worker_id,
            "registeredAt": now,
            "activeJobs": 0,
            "processedJobs": 0,
            "failedJobs": 0,
            "currentJob": None,
        }
        record.update(
            name=command.name,
            queues=command.queues,
            concurrency=command.concurrency,
            hostname=command.hostname,
            pid=command.pid,
            status="active",
            lastSeen=now,
        )
        self._workers[worker_id] = record
        self._sessions[worker_id] = session
        event = {key: record[key] for key in ("name", "queues", "hostname", "pid")}
        self.announce("worker:connected", {"workerId": worker_id, **event})
        return {"ok": True, "data": record}

    def unregister(
        self, session: ReplySink, command: cmd.UnregisterWorker, now: float
    ) -> dict[str, Any]:
        """UnregisterWorker: forget a worker."""
        if self._workers.pop(command.workerId, None) is None:
            raise EngineError("Worker not found")
        self._sessions.pop(command.workerId, None)
        self.announce("worker:disconnected", {"workerId": command.workerId})
        return {"ok": True, "data": {"removed": True}}

    def heartbeat(self, session: ReplySink, command: cmd.Heartbeat, now: float) -> dict[str, Any]:
        """Heartbeat: a worker reports it is alive, with its counters."""
        record = self._workers.get(command.id)
        if record is None:
            raise EngineError("Worker not found")
        record["lastSeen"] = now
        for wire, key in (
            ("activeJobs", "activeJobs"),
            ("processed", "processedJobs"),
            ("failed", "failedJobs"),
        ):
            value = getattr(command, wire)
            if value is not None:
                record[key] = value
        return {"ok": True, "data": {"ok": True}}

    def list_workers(
        self, session: ReplySink, command: cmd.ListWorkers, now: float
    ) -> dict[str, Any]:
        """ListWorkers: every worker, `stale` when not seen for 30 s."""
        workers = self.summaries(now)
        return {"ok": True, "data": {"workers": workers, "stats": {"total": len(workers)}}}

    def summaries(self, now: float) -> list[dict[str, Any]]:
        """Every worker as ListWorkers shows it."""
        workers = []
        for record in self._workers.values():
            stale = now - record["lastSeen"] > WORKER_TIMEOUT_MS
            entry = dict(record, id=record["workerId"], status="stale" if stale else "active")
            workers.append(entry)
        return workers

    def disconnect(self, session: ReplySink) -> None:
        """Drop the workers registered on a closed connection."""
        for worker_id, owner in list(self._sessions.items()):
            if owner is session:
                del self._sessions[worker_id]
                record = self._workers.pop(worker_id, None)
                if record is not None:  # the reference's event for a worker whose client left
                    event = {"workerId": worker_id, "name": record["name"]}
                    self.announce("worker:disconnected", event)
