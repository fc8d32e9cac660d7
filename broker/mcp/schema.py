"""JSON Schema helpers for the tools' arguments (what the reference declares with zod), and
the views of jobs, crons, workers and webhooks its tools answer with."""

from __future__ import annotations

import datetime
from typing import Any

Schema = dict[str, Any]


def string(description: str, **extra: Any) -> Schema:
    """A string argument."""
    return {"type": "string", "description": description, **extra}


def number(description: str, minimum: float | None = None, maximum: float | None = None) -> Schema:
    """A number argument, optionally bounded (inclusive)."""
    schema: Schema = {"type": "number", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def boolean(description: str) -> Schema:
    """A boolean argument."""
    return {"type": "boolean", "description": description}


def record(description: str) -> Schema:
    """A JSON object of any keys (a job's payload)."""
    return {"type": "object", "additionalProperties": {}, "description": description}


def anything(description: str) -> Schema:
    """Any JSON value."""
    return {"description": description}


def array(items: Schema, description: str, min_items: int | None = None) -> Schema:
    """An array argument."""
    schema: Schema = {"type": "array", "items": items, "description": description}
    if min_items is not None:
        schema["minItems"] = min_items
    return schema


def enum(values: tuple[str, ...], description: str) -> Schema:
    """A string out of `values`."""
    return {"type": "string", "enum": list(values), "description": description}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    """An object schema (the tool's arguments, or a nested item)."""
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def iso(ms: Any) -> str | None:
    """Epoch milliseconds as JavaScript's `toISOString` writes them (None when not a time)."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return None
    try:
        moment = datetime.datetime.fromtimestamp(int(ms) / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def job_view(job: dict[str, Any], state: str | None = None) -> dict[str, Any]:
    """A job as the reference's tools show it: id, name, queue, data, priority, progress,
    attempts, maxAttempts, createdAt and startedAt (ISO times), with its state when known and
    the lock token of a job pulled with an owner."""
    view: dict[str, Any] = {
        "id": str(job.get("id")),
        "name": job.get("name") or "default",
        "queue": job.get("queue") or "",
        "data": job.get("data"),
        "priority": job.get("priority") or 0,
        "progress": job.get("progress") or 0,
        "attempts": job.get("attempts") or 0,
        "maxAttempts": job.get("maxAttempts") or 3,
        "createdAt": iso(job.get("createdAt")),
    }
    started = iso(job.get("startedAt"))
    if started is not None:
        view["startedAt"] = started
    if state is not None:
        view["state"] = state
    return view


def cron_view(cron: dict[str, Any]) -> dict[str, Any]:
    """A cron as the reference's tools show it (the unused one of schedule/repeatEvery left
    out, nextRun as an ISO time)."""
    view: dict[str, Any] = {"name": cron.get("name"), "queue": cron.get("queue")}
    if cron.get("schedule") is not None:
        view["schedule"] = cron["schedule"]
    if cron.get("repeatEvery") is not None:
        view["repeatEvery"] = cron["repeatEvery"]
    view["nextRun"] = iso(cron.get("nextRun"))
    view["executions"] = cron.get("executions") or 0
    return view


def worker_view(worker: dict[str, Any]) -> dict[str, Any]:
    """A registered worker as the reference's tools show it."""
    return {
        "id": str(worker.get("id") or worker.get("workerId")),
        "name": worker.get("name"),
        "queues": worker.get("queues") or [],
        "active": worker.get("activeJobs") or 0,
        "processed": worker.get("processedJobs") or 0,
        "failed": worker.get("failedJobs") or 0,
        "lastHeartbeat": worker.get("lastSeen") or 0,
    }


def webhook_view(hook: dict[str, Any]) -> dict[str, Any]:
    """A webhook as the reference's tools show it."""
    view = {"id": str(hook.get("id") or hook.get("webhookId")), "url": hook.get("url")}
    view["events"] = hook.get("events") or []
    if hook.get("queue") is not None:
        view["queue"] = hook["queue"]
    view["enabled"] = hook.get("enabled", True)
    return view
