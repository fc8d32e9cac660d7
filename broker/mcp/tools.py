"""The reference's 73 MCP tools (`bunqueue_*`): names, arguments and result shapes as
bunqueue-mcp declares them, each run as protocol commands through a Backend.

A tool returns a JSON value (sent as text, as the reference does) or `Text`; a broker error
becomes `ToolError`, answered `{"error": ...}` with `isError`. The four tools that remove jobs
for good (obliterate, drain, clean, purge the DLQ) ask for confirmation first (server.py);
`Tool.confirm` names the argument the confirmation must repeat, as the reference's guard does.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from .backend import Backend, Reply
from .handlers import HandlerRegistry
from .schema import (
    Schema,
    anything,
    array,
    boolean,
    cron_view,
    enum,
    job_view,
    number,
    obj,
    record,
    string,
    webhook_view,
    worker_view,
)

JOB_STATES = ("waiting", "prioritized", "delayed", "active", "completed", "failed", "paused",
              "waiting-children")  # fmt: skip
WEBHOOK_EVENTS = ("job.pushed", "job.started", "job.completed", "job.failed", "job.progress")
COUNT_KEYS = ("waiting", "prioritized", "delayed", "active", "completed", "failed", "paused")
# Broker errors that mean "no such job / not in that state": boolean tools answer false.
NEGATIVE_OUTCOMES = ("not found", "not active", "not delayed", "not in ", "invalid", "cannot move",
                     "token", "not waiting")  # fmt: skip


class ToolError(Exception):
    """The tool failed; its message is answered as `{"error": message}`."""


@attrs.frozen
class Text:
    """A tool result sent as it is, not as JSON (the Prometheus text)."""

    text: str


@attrs.frozen
class Context:
    """What a tool runs with: the broker's commands and the HTTP handler workers."""

    backend: Backend
    handlers: HandlerRegistry


Run = Callable[[Context, dict[str, Any]], Awaitable[Any]]


@attrs.frozen
class Tool:
    """One tool: its name, description, argument schema and what it does."""

    name: str
    description: str
    schema: Schema
    run: Run
    pretty: bool = False  # the reference indents this tool's JSON (JSON.stringify(x, null, 2))
    read_only: bool = False
    destructive: bool = False
    confirm: str | None = None  # the argument a confirmation repeats (a guarded tool)


TOOLS: dict[str, Tool] = {}


def tool(
    name: str,
    description: str,
    properties: dict[str, Schema] | None = None,
    required: tuple[str, ...] = (),
    **options: Any,
) -> Callable[[Run], Run]:
    """Register the decorated function as the tool `bunqueue_<name>`."""

    def register(run: Run) -> Run:
        full = f"bunqueue_{name}"
        TOOLS[full] = Tool(full, description, obj(properties or {}, required), run, **options)
        return run

    return register


async def ok(ctx: Context, message: dict[str, Any]) -> Reply:
    """Run a command; its reply, or ToolError with the broker's own message."""
    reply = await ctx.backend.run(message)
    if not reply.get("ok"):
        raise ToolError(str(reply.get("error") or f"{message['cmd']} failed"))
    return reply


async def flag(ctx: Context, message: dict[str, Any]) -> bool:
    """Run a command for a yes/no answer: false for a missing job or a wrong state (the
    reference's boolean tools), ToolError for anything else (a bad argument, auth)."""
    reply = await ctx.backend.run(message)
    if reply.get("ok"):
        return True
    error = str(reply.get("error") or "")
    if any(text in error.lower() for text in NEGATIVE_OUTCOMES):
        return False
    raise ToolError(error or f"{message['cmd']} failed")


async def lookup(ctx: Context, message: dict[str, Any]) -> Reply | None:
    """Run a lookup: None when the broker says not found, ToolError for other errors."""
    reply = await ctx.backend.run(message)
    if reply.get("ok"):
        return reply
    error = str(reply.get("error") or "")
    if "not found" in error.lower():
        return None
    raise ToolError(error or f"{message['cmd']} failed")


def fields(**values: Any) -> dict[str, Any]:
    """Command fields without the unset ones."""
    return {key: value for key, value in values.items() if value is not None}


JOB_ID = {"jobId": string("Job ID")}
QUEUE = {"queue": string("Queue name")}
TIMEOUT = number("Long-poll timeout in ms (0 = no wait)", 0, 30000)
OWNER = string("Lease owner: the pulled job is locked to it and carries a lock token")
LOCK_TTL = number("Lock duration in ms (with owner)", 1000, 86_400_000)
TOKEN = string("Lock token (for a job pulled with an owner)")


# -- jobs -----------------------------------------------------------------------------------


@tool(
    "add_job", "Add a job to a queue. Returns the job ID.",
    {**QUEUE, "name": string("Job name/type"), "data": record("Job payload data"),
     "priority": number("Priority (higher = processed first)"),
     "delay": number("Delay in milliseconds before processing"),
     "attempts": number("Max retry attempts (default: 3)")},
    ("queue", "name", "data"), pretty=True,
)  # fmt: skip
async def add_job(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="PUSH", queue=a["queue"], name=a["name"], data=a["data"],
                                 priority=a.get("priority"), delay=a.get("delay"),
                                 maxAttempts=a.get("attempts")))  # fmt: skip
    return {"jobId": str(reply["id"])}


BULK_JOB = obj(
    {"name": string("Job name"), "data": record("Job payload"), "priority": number("Priority"),
     "delay": number("Delay in ms")}, ("name", "data"),
)  # fmt: skip


@tool(
    "add_jobs_bulk", "Add multiple jobs to a queue in a single operation.",
    {**QUEUE, "jobs": array(BULK_JOB, "Array of jobs to add")}, ("queue", "jobs"), pretty=True,
)  # fmt: skip
async def add_jobs_bulk(ctx: Context, a: dict[str, Any]) -> Any:
    jobs = [fields(name=j["name"], data=j["data"], priority=j.get("priority"),
                   delay=j.get("delay")) for j in a["jobs"]]  # fmt: skip
    reply = await ok(ctx, {"cmd": "PUSHB", "queue": a["queue"], "jobs": jobs})
    return {"jobIds": [str(job_id) for job_id in reply.get("ids") or []]}


async def job_with_state(ctx: Context, message: dict[str, Any]) -> Any:
    found = await lookup(ctx, message)
    if found is None or not found.get("job"):
        raise ToolError("Job not found")
    job = found["job"]
    state = await ctx.backend.run({"cmd": "GetState", "id": job["id"]})
    return job_view(job, state.get("state") if state.get("ok") else None)


@tool(
    "get_job", "Get a job by ID. Returns job details including state, progress, and data.",
    JOB_ID, ("jobId",), read_only=True, pretty=True,
)  # fmt: skip
async def get_job(ctx: Context, a: dict[str, Any]) -> Any:
    return await job_with_state(ctx, {"cmd": "GetJob", "id": a["jobId"]})


@tool(
    "get_job_state",
    "Get the current state of a job (waiting, delayed, active, completed, failed).",
    JOB_ID, ("jobId",), read_only=True,
)  # fmt: skip
async def get_job_state(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ctx.backend.run({"cmd": "GetState", "id": a["jobId"]})
    return {"jobId": a["jobId"], "state": reply.get("state") or "unknown"}


@tool(
    "get_job_result", "Get the result of a completed job.", JOB_ID, ("jobId",),
    read_only=True, pretty=True,
)  # fmt: skip
async def get_job_result(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ctx.backend.run({"cmd": "GetResult", "id": a["jobId"]})
    return {"jobId": a["jobId"], "result": reply.get("result")}


@tool("cancel_job", "Cancel a waiting or delayed job.", {"jobId": string("Job ID to cancel")},
      ("jobId",), destructive=True)  # fmt: skip
async def cancel_job(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": await flag(ctx, {"cmd": "Cancel", "id": a["jobId"]}), "jobId": a["jobId"]}


@tool(
    "promote_job", "Promote a delayed job to waiting state for immediate processing.",
    {"jobId": string("Job ID to promote")}, ("jobId",),
)  # fmt: skip
async def promote_job(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": await flag(ctx, {"cmd": "Promote", "id": a["jobId"]}), "jobId": a["jobId"]}


@tool(
    "update_progress", "Update job progress (0-100).",
    {**JOB_ID, "progress": number("Progress value (0-100)", 0, 100),
     "message": string("Optional progress message")}, ("jobId", "progress"),
)  # fmt: skip
async def update_progress(ctx: Context, a: dict[str, Any]) -> Any:
    message = fields(cmd="Progress", id=a["jobId"], progress=a["progress"],
                     message=a.get("message"))  # fmt: skip
    return {"success": await flag(ctx, message), "jobId": a["jobId"], "progress": a["progress"]}


@tool(
    "get_children_values",
    "Get return values from all child jobs of a parent job. Used with FlowProducer workflows.",
    {"parentJobId": string("Parent job ID")}, ("parentJobId",), read_only=True, pretty=True,
)  # fmt: skip
async def get_children_values(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "GetChildrenValues", "id": a["parentJobId"]})
    return {"parentJobId": a["parentJobId"], "children": (reply.get("data") or {}).get("values")}


@tool(
    "get_job_by_custom_id",
    "Look up a job by its custom ID (set via jobId option during creation).",
    {"customId": string("Custom job ID")}, ("customId",), read_only=True, pretty=True,
)  # fmt: skip
async def get_job_by_custom_id(ctx: Context, a: dict[str, Any]) -> Any:
    return await job_with_state(ctx, {"cmd": "GetJobByCustomId", "customId": a["customId"]})


@tool(
    "wait_for_job",
    "Wait for a job to complete within a timeout. Returns true if completed, false if timed out.",
    {"jobId": string("Job ID to wait for"),
     "timeoutMs": number("Maximum wait time in milliseconds", 100, 30000)},
    ("jobId", "timeoutMs"), read_only=True,
)  # fmt: skip
async def wait_for_job(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "WaitJob", "id": a["jobId"], "timeout": a["timeoutMs"]})
    return {"jobId": a["jobId"], "completed": reply.get("completed") is True}


# -- job management -----------------------------------------------------------------------


@tool(
    "update_job_data", "Update the payload data of a job.",
    {**JOB_ID, "data": record("New job payload data")}, ("jobId", "data"),
)  # fmt: skip
async def update_job_data(ctx: Context, a: dict[str, Any]) -> Any:
    success = await flag(ctx, {"cmd": "Update", "id": a["jobId"], "data": a["data"]})
    return {"success": success, "jobId": a["jobId"]}


@tool(
    "change_job_priority",
    "Change the priority of a waiting job. Higher priority = processed first.",
    {**JOB_ID, "priority": number("New priority value")}, ("jobId", "priority"),
)  # fmt: skip
async def change_job_priority(ctx: Context, a: dict[str, Any]) -> Any:
    message = {"cmd": "ChangePriority", "id": a["jobId"], "priority": a["priority"]}
    return {"success": await flag(ctx, message), "jobId": a["jobId"], "priority": a["priority"]}


@tool(
    "move_to_delayed", "Move a job to delayed state with a specific delay in milliseconds.",
    {**JOB_ID, "delay": number("Delay in milliseconds", 0)}, ("jobId", "delay"),
)  # fmt: skip
async def move_to_delayed(ctx: Context, a: dict[str, Any]) -> Any:
    message = {"cmd": "MoveToDelayed", "id": a["jobId"], "delay": a["delay"]}
    return {"success": await flag(ctx, message), "jobId": a["jobId"], "delay": a["delay"]}


@tool(
    "discard_job", "Discard a job permanently, removing it from the queue.",
    {"jobId": string("Job ID to discard")}, ("jobId",),
)  # fmt: skip
async def discard_job(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": await flag(ctx, {"cmd": "Discard", "id": a["jobId"]}), "jobId": a["jobId"]}


@tool("get_progress", "Get the progress and progress message of a job.", JOB_ID, ("jobId",),
      read_only=True)  # fmt: skip
async def get_progress(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await lookup(ctx, {"cmd": "GetProgress", "id": a["jobId"]})
    if reply is None:
        raise ToolError("Job not found")
    return {"jobId": a["jobId"], "progress": reply.get("progress") or 0,
            "message": reply.get("message")}  # fmt: skip


@tool(
    "change_delay", "Change the delay of a delayed job.",
    {**JOB_ID, "delay": number("New delay in milliseconds", 0)}, ("jobId", "delay"),
)  # fmt: skip
async def change_delay(ctx: Context, a: dict[str, Any]) -> Any:
    message = {"cmd": "ChangeDelay", "id": a["jobId"], "delay": a["delay"]}
    return {"success": await flag(ctx, message), "jobId": a["jobId"], "delay": a["delay"]}


# -- consumption ----------------------------------------------------------------------------


def pulled(job: dict[str, Any], token: Any) -> dict[str, Any]:
    view = job_view(job, "active")
    if token:
        view["token"] = token
    return view


@tool(
    "pull_job", "Pull a single job from a queue for processing. Returns null if no jobs available.",
    {**QUEUE, "timeoutMs": TIMEOUT, "owner": OWNER, "lockTtl": LOCK_TTL}, ("queue",), pretty=True,
)  # fmt: skip
async def pull_job(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="PULL", queue=a["queue"], timeout=a.get("timeoutMs"),
                                 owner=a.get("owner"), lockTtl=a.get("lockTtl")))  # fmt: skip
    job = reply.get("job")
    return {"job": pulled(job, reply.get("token")) if job else None}


@tool(
    "pull_job_batch", "Pull multiple jobs from a queue in one operation.",
    {**QUEUE, "count": number("Number of jobs to pull", 1, 1000), "timeoutMs": TIMEOUT,
     "owner": OWNER, "lockTtl": LOCK_TTL}, ("queue", "count"), pretty=True,
)  # fmt: skip
async def pull_job_batch(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="PULLB", queue=a["queue"], count=a["count"],
                                 timeout=a.get("timeoutMs"), owner=a.get("owner"),
                                 lockTtl=a.get("lockTtl")))  # fmt: skip
    jobs = reply.get("jobs") or []
    tokens = reply.get("tokens") or [None] * len(jobs)
    views = [pulled(job, token) for job, token in zip(jobs, tokens, strict=False)]
    return {"count": len(views), "jobs": views}


@tool(
    "ack_job", "Acknowledge a job as completed with an optional result.",
    {"jobId": string("Job ID to acknowledge"), "result": anything("Optional result data"),
     "token": TOKEN}, ("jobId",),
)  # fmt: skip
async def ack_job(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, fields(cmd="ACK", id=a["jobId"], result=a.get("result"), token=a.get("token")))
    return {"success": True, "jobId": a["jobId"]}


@tool(
    "ack_job_batch", "Acknowledge multiple jobs as completed in one operation.",
    {"jobIds": array(string("Job ID"), "Array of job IDs to acknowledge", 1),
     "tokens": array(string("Lock token"), "Lock tokens, one per job ('' for none)")},
    ("jobIds",),
)  # fmt: skip
async def ack_job_batch(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, fields(cmd="ACKB", ids=a["jobIds"], tokens=a.get("tokens")))
    return {"success": True, "count": len(a["jobIds"])}


@tool(
    "fail_job", "Mark a job as failed with an optional error message.",
    {"jobId": string("Job ID to fail"), "error": string("Error message"), "token": TOKEN,
     "unrecoverable": boolean("Fail for good (no retry)")}, ("jobId",),
)  # fmt: skip
async def fail_job(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, fields(cmd="FAIL", id=a["jobId"], error=a.get("error"), token=a.get("token"),
                         unrecoverable=a.get("unrecoverable")))  # fmt: skip
    return {"success": True, "jobId": a["jobId"]}


@tool(
    "job_heartbeat", "Send a heartbeat for an active job to prevent stall detection.",
    {**JOB_ID, "token": TOKEN}, ("jobId",),
)  # fmt: skip
async def job_heartbeat(ctx: Context, a: dict[str, Any]) -> Any:
    message = fields(cmd="JobHeartbeat", id=a["jobId"], token=a.get("token"))
    return {"success": await flag(ctx, message), "jobId": a["jobId"]}


@tool(
    "job_heartbeat_batch", "Send heartbeats for multiple active jobs at once.",
    {"jobIds": array(string("Job ID"), "Array of job IDs", 1),
     "tokens": array(string("Lock token"), "Lock tokens, one per job ('' for none)")},
    ("jobIds",),
)  # fmt: skip
async def job_heartbeat_batch(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="JobHeartbeatB", ids=a["jobIds"], tokens=a.get("tokens")))
    return {"success": True, "acknowledged": (reply.get("data") or {}).get("count", 0)}


@tool(
    "extend_lock", "Extend the lock on an active job to prevent it from being reclaimed.",
    {**JOB_ID, "token": string("Lock token"),
     "duration": number("Extension duration in milliseconds", 1000)},
    ("jobId", "token", "duration"),
)  # fmt: skip
async def extend_lock(ctx: Context, a: dict[str, Any]) -> Any:
    message = {"cmd": "ExtendLock", "id": a["jobId"], "token": a["token"],
               "duration": a["duration"]}  # fmt: skip
    return {"success": await flag(ctx, message), "jobId": a["jobId"]}


# -- queues ---------------------------------------------------------------------------------


@tool("list_queues", "List all queues.", read_only=True)
async def list_queues(ctx: Context, a: dict[str, Any]) -> Any:
    return {"queues": (await ok(ctx, {"cmd": "ListQueues"})).get("queues") or []}


@tool("count_jobs", "Count total jobs in a queue (all states).", QUEUE, ("queue",),
      read_only=True)  # fmt: skip
async def count_jobs(ctx: Context, a: dict[str, Any]) -> Any:
    counts = await job_counts(ctx, a["queue"])
    return {"queue": a["queue"], "count": sum(counts.values())}


@tool(
    "get_jobs", "List jobs in a queue with optional state filter and pagination.",
    {**QUEUE, "state": enum(JOB_STATES, "Filter by job state"),
     "start": number("Start index for pagination (default: 0)", 0),
     "end": number("End index for pagination (default: 20)", 0)},
    ("queue",), read_only=True, pretty=True,
)  # fmt: skip
async def get_jobs(ctx: Context, a: dict[str, Any]) -> Any:
    start, end = int(a.get("start", 0)), int(a.get("end", 20))
    reply = await ok(ctx, fields(cmd="GetJobs", queue=a["queue"], state=a.get("state"),
                                 offset=start, limit=max(0, end - start)))  # fmt: skip
    jobs = [job_view(job, a.get("state")) for job in reply.get("jobs") or []]
    return {"queue": a["queue"], "count": len(jobs), "jobs": jobs}


async def job_counts(ctx: Context, queue: str) -> dict[str, int]:
    counts = (await ok(ctx, {"cmd": "GetJobCounts", "queue": queue})).get("counts") or {}
    return {key: counts.get(key, 0) for key in COUNT_KEYS} | counts


@tool(
    "get_job_counts",
    "Get job counts per state for a queue (waiting, delayed, active, completed, failed).",
    QUEUE, ("queue",), read_only=True,
)  # fmt: skip
async def get_job_counts(ctx: Context, a: dict[str, Any]) -> Any:
    return {"queue": a["queue"], **await job_counts(ctx, a["queue"])}


def queue_message(queue: str, message: str) -> dict[str, Any]:
    return {"success": True, "queue": queue, "message": message}


@tool(
    "pause_queue",
    "Pause job processing on a queue. No new jobs will be processed until resumed.",
    QUEUE, ("queue",),
)  # fmt: skip
async def pause_queue(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "Pause", "queue": a["queue"]})
    return queue_message(a["queue"], "Queue paused")


@tool("resume_queue", "Resume job processing on a paused queue.", QUEUE, ("queue",))
async def resume_queue(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "Resume", "queue": a["queue"]})
    return queue_message(a["queue"], "Queue resumed")


@tool(
    "drain_queue",
    "Remove all waiting jobs from a queue. Active jobs continue processing.",
    QUEUE, ("queue",), destructive=True, confirm="queue",
)  # fmt: skip
async def drain_queue(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "Drain", "queue": a["queue"]})
    return {"success": True, "queue": a["queue"], "removed": reply.get("count", 0)}


@tool(
    "obliterate_queue",
    "Remove ALL data from a queue (waiting, active, completed, failed). Destructive operation.",
    QUEUE, ("queue",), destructive=True, confirm="queue",
)  # fmt: skip
async def obliterate_queue(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "Obliterate", "queue": a["queue"]})
    return queue_message(a["queue"], "Queue obliterated")


@tool(
    "clean_queue", "Remove old jobs from a queue based on grace period and state.",
    {**QUEUE, "graceMs": number("Grace period in ms - only remove jobs older than this", 0),
     "state": enum(("completed", "failed"),
                   "State to clean (default: both completed and failed)"),
     "limit": number("Maximum number of jobs to remove", 1)},
    ("queue", "graceMs"), destructive=True, confirm="queue",
)  # fmt: skip
async def clean_queue(ctx: Context, a: dict[str, Any]) -> Any:
    ids: list[str] = []
    limit = a.get("limit")
    for state in [a["state"]] if a.get("state") else ["completed", "failed"]:
        left = None if limit is None else int(limit) - len(ids)
        if left is not None and left <= 0:
            break
        reply = await ok(ctx, fields(cmd="Clean", queue=a["queue"], grace=a["graceMs"],
                                     state=state, limit=left))  # fmt: skip
        ids += [str(job_id) for job_id in reply.get("ids") or []]
    return {"success": True, "queue": a["queue"], "removed": len(ids), "ids": ids}


@tool("is_paused", "Check if a queue is currently paused.", QUEUE, ("queue",), read_only=True)
async def is_paused(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "IsPaused", "queue": a["queue"]})
    return {"queue": a["queue"], "paused": reply.get("paused") is True}


@tool(
    "get_counts_per_priority",
    "Get job count breakdown by priority level for a queue. Counts only waiting/delayed "
    "(queued) jobs — active, completed and failed jobs are not included.",
    QUEUE, ("queue",), read_only=True, pretty=True,
)  # fmt: skip
async def get_counts_per_priority(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "GetCountsPerPriority", "queue": a["queue"]})
    return {"queue": a["queue"], "priorities": reply.get("counts") or {}}


# -- dead letters ---------------------------------------------------------------------------


@tool(
    "get_dlq",
    "Get Dead Letter Queue entries for a queue. Shows jobs that permanently failed.",
    {**QUEUE, "limit": number("Max entries to return (default: 20)", 1)},
    ("queue",), read_only=True, pretty=True,
)  # fmt: skip
async def get_dlq(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "Dlq", "queue": a["queue"], "count": a.get("limit", 20)})
    jobs = [job_view(job, "failed") for job in reply.get("jobs") or []]
    return {"queue": a["queue"], "count": len(jobs), "jobs": jobs}


@tool(
    "retry_dlq", "Retry jobs from the Dead Letter Queue. Moves them back to waiting state.",
    {**QUEUE, "jobId": string("Specific job ID to retry (omit to retry all)")}, ("queue",),
)  # fmt: skip
async def retry_dlq(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="RetryDlq", queue=a["queue"], jobId=a.get("jobId")))
    return {"success": True, "queue": a["queue"], "retried": reply.get("count", 0)}


@tool(
    "purge_dlq", "Remove all entries from the Dead Letter Queue permanently.",
    QUEUE, ("queue",), destructive=True, confirm="queue",
)  # fmt: skip
async def purge_dlq(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "PurgeDlq", "queue": a["queue"]})
    return {"success": True, "queue": a["queue"], "purged": reply.get("count", 0)}


@tool(
    "retry_completed",
    "Retry completed jobs - move them back to waiting state for reprocessing.",
    {**QUEUE, "jobId": string("Specific job ID to retry (omit to retry all completed)")},
    ("queue",),
)  # fmt: skip
async def retry_completed(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="RetryCompleted", queue=a["queue"], id=a.get("jobId")))
    return {"success": True, "queue": a["queue"], "retried": reply.get("count", 0)}


# -- crons ----------------------------------------------------------------------------------


@tool(
    "add_cron", "Add a recurring cron job. Use either a cron pattern or repeatEvery interval.",
    {"name": string("Unique cron job name"), "queue": string("Target queue name"),
     "data": record("Job payload data"),
     "schedule": string('Cron pattern (e.g., "0 * * * *" for hourly)'),
     "repeatEvery": number("Alternative: repeat every N milliseconds"),
     "priority": number("Job priority")},
    ("name", "queue", "data"), pretty=True,
)  # fmt: skip
async def add_cron(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="Cron", name=a["name"], queue=a["queue"], data=a["data"],
                                 schedule=a.get("schedule"), repeatEvery=a.get("repeatEvery"),
                                 priority=a.get("priority")))  # fmt: skip
    return {"success": True, **cron_view(reply.get("cron") or {})}


@tool("list_crons", "List all scheduled cron jobs with their next run times.", read_only=True,
      pretty=True)  # fmt: skip
async def list_crons(ctx: Context, a: dict[str, Any]) -> Any:
    crons = [cron_view(c) for c in (await ok(ctx, {"cmd": "CronList"})).get("crons") or []]
    return {"count": len(crons), "crons": crons}


@tool("get_cron", "Get details of a specific cron job by name.",
      {"name": string("Cron job name")}, ("name",), read_only=True, pretty=True)  # fmt: skip
async def get_cron(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await lookup(ctx, {"cmd": "CronGet", "name": a["name"]})
    if reply is None or not reply.get("cron"):
        raise ToolError("Cron not found")
    return cron_view(reply["cron"])


@tool("delete_cron", "Delete a cron job by name.", {"name": string("Cron job name to delete")},
      ("name",), destructive=True)  # fmt: skip
async def delete_cron(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": await flag(ctx, {"cmd": "CronDelete", "name": a["name"]}),
            "name": a["name"]}  # fmt: skip


# -- limits ---------------------------------------------------------------------------------


@tool(
    "set_rate_limit", "Set rate limit for a queue (max jobs processed per second).",
    {**QUEUE, "limit": number("Max jobs per second", 1)}, ("queue", "limit"),
)  # fmt: skip
async def set_rate_limit(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "RateLimit", "queue": a["queue"], "limit": a["limit"]})
    return {"success": True, "queue": a["queue"], "rateLimit": a["limit"]}


@tool("clear_rate_limit", "Remove rate limit from a queue, allowing unlimited throughput.",
      QUEUE, ("queue",))  # fmt: skip
async def clear_rate_limit(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "RateLimitClear", "queue": a["queue"]})
    return queue_message(a["queue"], "Rate limit cleared")


@tool(
    "set_concurrency", "Set concurrency limit for a queue (max simultaneous active jobs).",
    {**QUEUE, "limit": number("Max concurrent jobs", 1)}, ("queue", "limit"),
)  # fmt: skip
async def set_concurrency(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "SetConcurrency", "queue": a["queue"], "limit": a["limit"]})
    return {"success": True, "queue": a["queue"], "concurrency": a["limit"]}


@tool("clear_concurrency", "Remove concurrency limit from a queue.", QUEUE, ("queue",))
async def clear_concurrency(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "ClearConcurrency", "queue": a["queue"]})
    return queue_message(a["queue"], "Concurrency limit cleared")


# -- webhooks -------------------------------------------------------------------------------


@tool(
    "add_webhook", "Add a webhook to receive notifications for job events.",
    {"url": string("Webhook URL to receive POST requests", format="uri"),
     "events": array(enum(WEBHOOK_EVENTS, "Event"), "Events to subscribe to"),
     "queue": string("Limit to a specific queue (omit for all queues)")},
    ("url", "events"), pretty=True,
)  # fmt: skip
async def add_webhook(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, fields(cmd="AddWebhook", url=a["url"], events=a["events"],
                                 queue=a.get("queue")))  # fmt: skip
    hook = {**(reply.get("data") or {}), "enabled": True}
    return {"success": True, **webhook_view(hook)}


@tool("remove_webhook", "Remove a webhook by ID.", {"id": string("Webhook ID to remove")},
      ("id",), destructive=True)  # fmt: skip
async def remove_webhook(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": await flag(ctx, {"cmd": "RemoveWebhook", "webhookId": a["id"]}),
            "id": a["id"]}  # fmt: skip


@tool("list_webhooks", "List all registered webhooks.", read_only=True, pretty=True)
async def list_webhooks(ctx: Context, a: dict[str, Any]) -> Any:
    data = (await ok(ctx, {"cmd": "ListWebhooks"})).get("data") or {}
    hooks = [webhook_view(hook) for hook in data.get("webhooks") or []]
    return {"count": len(hooks), "webhooks": hooks}


@tool(
    "set_webhook_enabled", "Enable or disable a webhook without removing it.",
    {"id": string("Webhook ID"), "enabled": boolean("Whether the webhook should be enabled")},
    ("id", "enabled"),
)  # fmt: skip
async def set_webhook_enabled(ctx: Context, a: dict[str, Any]) -> Any:
    message = {"cmd": "SetWebhookEnabled", "id": a["id"], "enabled": a["enabled"]}
    return {"success": await flag(ctx, message), "id": a["id"], "enabled": a["enabled"]}


# -- workers --------------------------------------------------------------------------------


@tool(
    "register_worker", "Register a new worker to process jobs from specified queues.",
    {"name": string("Worker name/identifier"),
     "queues": array(string("Queue name"), "Queues this worker will process", 1)},
    ("name", "queues"), pretty=True,
)  # fmt: skip
async def register_worker(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "RegisterWorker", "name": a["name"], "queues": a["queues"]})
    return {"success": True, "worker": worker_view(reply.get("data") or {})}


@tool(
    "unregister_worker", "Unregister a worker, removing it from the active workers list.",
    {"workerId": string("Worker ID to unregister")}, ("workerId",),
)  # fmt: skip
async def unregister_worker(ctx: Context, a: dict[str, Any]) -> Any:
    success = await flag(ctx, {"cmd": "UnregisterWorker", "workerId": a["workerId"]})
    return {"success": success, "workerId": a["workerId"]}


@tool("worker_heartbeat", "Send a heartbeat to keep a registered worker alive.",
      {"workerId": string("Worker ID")}, ("workerId",))  # fmt: skip
async def worker_heartbeat(ctx: Context, a: dict[str, Any]) -> Any:
    success = await flag(ctx, {"cmd": "Heartbeat", "id": a["workerId"]})
    return {"success": success, "workerId": a["workerId"]}


# -- monitoring -----------------------------------------------------------------------------


async def broker_stats(ctx: Context) -> dict[str, Any]:
    """Stats with the totals since start (Metrics), as the reference's get_stats."""
    stats = (await ok(ctx, {"cmd": "Stats"})).get("stats") or {}
    return {**stats, **((await ok(ctx, {"cmd": "Metrics"})).get("metrics") or {})}


@tool(
    "get_stats",
    "Get overall queue server statistics including throughput, memory usage, and uptime.",
    read_only=True, pretty=True,
)  # fmt: skip
async def get_stats(ctx: Context, a: dict[str, Any]) -> Any:
    return await broker_stats(ctx)


@tool(
    "get_queue_stats",
    "Get detailed statistics for a specific queue including job counts per state.",
    QUEUE, ("queue",), read_only=True, pretty=True,
)  # fmt: skip
async def get_queue_stats(ctx: Context, a: dict[str, Any]) -> Any:
    return {"queue": a["queue"], **await job_counts(ctx, a["queue"])}


async def workers(ctx: Context) -> list[dict[str, Any]]:
    data = (await ok(ctx, {"cmd": "ListWorkers"})).get("data") or {}
    return [worker_view(worker) for worker in data.get("workers") or []]


@tool(
    "list_workers",
    "List all registered workers with their status, queues, and processing stats.",
    read_only=True, pretty=True,
)  # fmt: skip
async def list_workers(ctx: Context, a: dict[str, Any]) -> Any:
    found = await workers(ctx)
    return {"count": len(found), "workers": found}


@tool("get_job_logs", "Get log entries for a specific job.", JOB_ID, ("jobId",),
      read_only=True, pretty=True)  # fmt: skip
async def get_job_logs(ctx: Context, a: dict[str, Any]) -> Any:
    reply = await ok(ctx, {"cmd": "GetLogs", "id": a["jobId"]})
    logs = (reply.get("data") or {}).get("logs") or []
    return {"jobId": a["jobId"], "count": len(logs), "logs": logs}


@tool(
    "add_job_log", "Add a log entry to a job.",
    {**JOB_ID, "message": string("Log message"),
     "level": enum(("info", "warn", "error"), "Log level (default: info)")},
    ("jobId", "message"),
)  # fmt: skip
async def add_job_log(ctx: Context, a: dict[str, Any]) -> Any:
    message = fields(cmd="AddLog", id=a["jobId"], message=a["message"], level=a.get("level"))
    return {"success": await flag(ctx, message), "jobId": a["jobId"]}


@tool("get_storage_status", "Get storage health status. Reports if disk is full or has errors.",
      read_only=True, pretty=True)  # fmt: skip
async def get_storage_status(ctx: Context, a: dict[str, Any]) -> Any:
    data = (await ok(ctx, {"cmd": "StorageStatus"})).get("data") or {}
    return {"diskFull": data.get("diskFull", False), "error": data.get("error")}


@tool(
    "get_per_queue_stats",
    "Get detailed statistics broken down per queue (throughput, latency, etc.).",
    read_only=True, pretty=True,
)  # fmt: skip
async def get_per_queue_stats(ctx: Context, a: dict[str, Any]) -> Any:
    data = (await ok(ctx, {"cmd": "DashboardQueues"})).get("data") or {}
    keys = ("waiting", "prioritized", "delayed", "active", "dlq")
    return {q["name"]: {key: q.get(key, 0) for key in keys} for q in data.get("queues") or []}


@tool(
    "get_memory_stats",
    "Get memory usage statistics (jobIndex, completedJobs, cache sizes, etc.).",
    read_only=True, pretty=True,
)  # fmt: skip
async def get_memory_stats(ctx: Context, a: dict[str, Any]) -> Any:
    data = (await ok(ctx, {"cmd": "DashboardOverview"})).get("data") or {}
    return data.get("memory") or {}


@tool("get_prometheus_metrics", "Get metrics in Prometheus exposition format for monitoring.",
      read_only=True)  # fmt: skip
async def get_prometheus_metrics(ctx: Context, a: dict[str, Any]) -> Any:
    return Text(((await ok(ctx, {"cmd": "Prometheus"})).get("data") or {}).get("metrics") or "")


@tool(
    "clear_job_logs",
    "Clear log entries for a specific job, optionally keeping the last N entries.",
    {**JOB_ID, "keepLogs": number(
        "Number of recent log entries to keep (default: 0 = clear all)", 0)},
    ("jobId",), destructive=True,
)  # fmt: skip
async def clear_job_logs(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, fields(cmd="ClearLogs", id=a["jobId"], keepLogs=a.get("keepLogs")))
    return {"success": True, "jobId": a["jobId"]}


@tool("compact_memory", "Force memory compaction to free unused memory.")
async def compact_memory(ctx: Context, a: dict[str, Any]) -> Any:
    await ok(ctx, {"cmd": "CompactMemory"})
    return {"success": True, "message": "Memory compaction triggered"}


# -- flows ----------------------------------------------------------------------------------

JOB_OPTS = obj({"priority": number("Priority (higher = processed first)"),
                "delay": number("Delay in ms before processing"),
                "attempts": number("Max retry attempts")})  # fmt: skip
STEP = obj(
    {"name": string("Job name/type"), "queueName": string("Queue to run in"),
     "data": record("Job payload data"), "opts": JOB_OPTS}, ("name", "queueName", "data"),
)  # fmt: skip
FLOW_NODE: Schema = obj(
    {"name": string("Job name/type"), "queueName": string("Queue to run in"),
     "data": record("Job payload data"), "opts": JOB_OPTS,
     "children": {"type": "array", "items": {"$ref": "#/$defs/flowJob"},
                  "description": "Child jobs (processed BEFORE parent)"}},
    ("name", "queueName"),
)  # fmt: skip
MAX_FLOW_DEPTH = 100


def flow_input(step: dict[str, Any], **links: Any) -> dict[str, Any]:
    """One PUSHF node's job options, from a flow step and its links to other nodes."""
    opts = step.get("opts") or {}
    return fields(name=step["name"], data=step.get("data") or {}, priority=opts.get("priority"),
                  delay=opts.get("delay"), maxAttempts=opts.get("attempts"), **links)  # fmt: skip


def plan_tree(node: dict[str, Any], parent: str | None, jobs: list[dict[str, Any]],
              depth: int = 0) -> dict[str, Any]:  # fmt: skip
    """Add `node` and its children to the PUSHF graph (children first); its result node."""
    if depth > MAX_FLOW_DEPTH:
        raise ToolError(f"flow exceeds the {MAX_FLOW_DEPTH} level depth limit")
    job_id = str(uuid.uuid4())
    children = [plan_tree(child, job_id, jobs, depth + 1) for child in node.get("children") or []]
    child_ids = [child["jobId"] for child in children] or None
    links = fields(parentId=parent, dependsOn=child_ids, childrenIds=child_ids)
    jobs.append({"id": job_id, "queue": node["queueName"], "input": flow_input(node, **links)})
    result: dict[str, Any] = {"jobId": job_id, "name": node["name"], "queueName": node["queueName"]}
    if children:
        result["children"] = children
    return result


@tool(
    "add_flow",
    "Create a job flow tree (BullMQ v5 compatible). Children are processed BEFORE their parent. "
    "Use for complex dependency graphs.",
    {"name": string("Root job name/type"), "queueName": string("Root queue name"),
     "data": record("Root job payload"), "opts": JOB_OPTS,
     "children": {"type": "array", "items": FLOW_NODE,
                  "description": "Child jobs (processed BEFORE this job)"}},
    ("name", "queueName"), pretty=True,
)  # fmt: skip
async def add_flow(ctx: Context, a: dict[str, Any]) -> Any:
    jobs: list[dict[str, Any]] = []
    root = plan_tree(a, None, jobs)
    await ok(ctx, {"cmd": "PUSHF", "jobs": jobs})
    return root


@tool(
    "add_flow_chain",
    "Create a sequential job pipeline: step[0] → step[1] → step[2]. Each step depends on the "
    "previous one completing first.",
    {"steps": array(STEP, "Steps executed in order, each depending on the previous", 1)},
    ("steps",), pretty=True,
)  # fmt: skip
async def add_flow_chain(ctx: Context, a: dict[str, Any]) -> Any:
    ids = [str(uuid.uuid4()) for _ in a["steps"]]
    jobs = [
        {"id": job_id, "queue": step["queueName"],
         "input": flow_input(step, dependsOn=[ids[index - 1]] if index else None)}
        for index, (job_id, step) in enumerate(zip(ids, a["steps"], strict=True))
    ]  # fmt: skip
    await ok(ctx, {"cmd": "PUSHF", "jobs": jobs})
    return {"jobIds": ids}


@tool(
    "add_flow_bulk_then",
    "Fan-out/fan-in: run parallel jobs, then execute a final job when ALL parallel jobs "
    "complete.",
    {"parallel": array(STEP, "Jobs that run in parallel", 1),
     "final": {**STEP, "description": "Final job that runs after all parallel jobs complete"}},
    ("parallel", "final"), pretty=True,
)  # fmt: skip
async def add_flow_bulk_then(ctx: Context, a: dict[str, Any]) -> Any:
    parallel_ids = [str(uuid.uuid4()) for _ in a["parallel"]]
    final_id = str(uuid.uuid4())
    jobs = [{"id": job_id, "queue": step["queueName"], "input": flow_input(step, parentId=final_id)}
            for job_id, step in zip(parallel_ids, a["parallel"], strict=True)]  # fmt: skip
    final = a["final"]
    links = {"dependsOn": parallel_ids, "childrenIds": parallel_ids}
    jobs.append({"id": final_id, "queue": final["queueName"], "input": flow_input(final, **links)})
    await ok(ctx, {"cmd": "PUSHF", "jobs": jobs})
    return {"parallelIds": parallel_ids, "finalId": final_id}


async def flow_node(ctx: Context, job_id: str, depth: int, max_children: int | None) -> Any:
    reply = await lookup(ctx, {"cmd": "GetJob", "id": job_id})
    job = reply.get("job") if reply else None
    if not job:
        return None
    node: dict[str, Any] = {"jobId": str(job["id"]), "name": job.get("name") or "default",
                            "queueName": job.get("queue")}  # fmt: skip
    child_ids = job.get("childrenIds") or []
    if depth > 1 and child_ids:
        children = []
        for child_id in child_ids[:max_children]:
            child = await flow_node(ctx, str(child_id), depth - 1, max_children)
            if child is not None:
                children.append(child)
        node["children"] = children
    return node


@tool(
    "get_flow",
    "Retrieve a flow tree starting from a job. Shows the full dependency graph with children.",
    {"jobId": string("Job ID to get flow tree for"),
     "queueName": string("Queue name where the job is located"),
     "depth": number("Max traversal depth (default: 10)", 1),
     "maxChildren": number("Max children per level", 1)},
    ("jobId", "queueName"), read_only=True, pretty=True,
)  # fmt: skip
async def get_flow(ctx: Context, a: dict[str, Any]) -> Any:
    limit = a.get("maxChildren")
    node = await flow_node(ctx, a["jobId"], int(a.get("depth", 10)), limit and int(limit))
    if node is None or node["queueName"] != a["queueName"]:
        raise ToolError("Flow not found")
    return node


# -- HTTP handlers --------------------------------------------------------------------------


@tool(
    "register_handler",
    "Register an HTTP handler on a queue. Spawns a worker that auto-processes jobs by making "
    "HTTP requests. Combine with bunqueue_add_cron for recurring tasks.",
    {"queue": string("Queue name to attach the handler to"),
     "url": string("HTTP endpoint URL to call when a job is processed", format="uri"),
     "method": enum(("GET", "POST", "PUT", "DELETE"), "HTTP method (GET, POST, PUT, DELETE)"),
     "headers": {"type": "object", "additionalProperties": {"type": "string"},
                 "description": "Custom HTTP headers"},
     "body": anything("Request body template for POST/PUT (defaults to job data)"),
     "timeoutMs": number("Request timeout in ms (default: 30000)", 1000, 120000)},
    ("queue", "url", "method"), pretty=True,
)  # fmt: skip
async def register_handler(ctx: Context, a: dict[str, Any]) -> Any:
    timeout = a.get("timeoutMs") or 30000
    try:
        ctx.handlers.register(a["queue"], a["url"], a["method"], a.get("headers") or {},
                              a.get("body"), timeout)  # fmt: skip
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return {
        "success": True, "queue": a["queue"],
        "handler": {"url": a["url"], "method": a["method"], "timeoutMs": timeout},
        "message": f'Worker started. Jobs in "{a["queue"]}" will be processed via '
                   f'{a["method"]} {a["url"]}',
    }  # fmt: skip


@tool(
    "unregister_handler", "Remove an HTTP handler from a queue and stop its worker.",
    {"queue": string("Queue name to remove the handler from")}, ("queue",),
)  # fmt: skip
async def unregister_handler(ctx: Context, a: dict[str, Any]) -> Any:
    return {"success": ctx.handlers.unregister(a["queue"]), "queue": a["queue"]}


@tool("list_handlers", "List all active HTTP handlers and their workers.", read_only=True,
      pretty=True)  # fmt: skip
async def list_handlers(ctx: Context, a: dict[str, Any]) -> Any:
    handlers = ctx.handlers.list()
    return {"count": len(handlers), "handlers": handlers}


# add_flow's children are flow jobs with children of their own (the reference's z.lazy).
TOOLS["bunqueue_add_flow"].schema["$defs"] = {"flowJob": FLOW_NODE}
