"""The MCP server: the tools (tools.py), the reference's five resources and three prompts, and
the confirmation asked before a tool removes jobs for good. Built on the official SDK's
low-level `Server`, which validates every call's arguments against the tool's schema.

Confirmation (what the reference's `BUNQUEUE_MCP_CONFIRM=destructive` mode asks; always on
here): a client that can ask its user (MCP elicitation) is asked, with the impact (how many
jobs would go); otherwise the agent must repeat the target in `confirm` (the queue name) after
the user approved, and a call without it is refused with the impact and how to confirm.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from pydantic import AnyUrl

from .. import __version__
from .tools import TOOLS, Context, Text, Tool, ToolError, broker_stats, job_counts, workers

log = logging.getLogger(__name__)

SERVER_NAME = "bunqueue-mcp"  # the reference's name: agents configured for it find the same
MAX_QUEUES_IN_REPORT = 50


def text(value: Any, pretty: bool = False) -> str:
    """A JSON value as the reference writes it (`JSON.stringify`, indented or compact)."""
    if pretty:
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tool_listing(tool: Tool) -> types.Tool:
    """A tool as `tools/list` shows it: a guarded tool's schema has `confirm`."""
    schema = tool.schema
    if tool.confirm is not None:
        confirm = {
            "type": "string",
            "description": f"Only when the client cannot ask the user: the exact {tool.confirm} "
            "this call acts on, set after the user explicitly approved it.",
        }
        schema = {**schema, "properties": {**schema["properties"], "confirm": confirm}}
    annotations = types.ToolAnnotations(
        readOnlyHint=tool.read_only,
        destructiveHint=tool.destructive and not tool.read_only,
        openWorldHint=tool.name in ("bunqueue_register_handler", "bunqueue_add_webhook"),
    )
    return types.Tool(
        name=tool.name, description=tool.description, inputSchema=schema, annotations=annotations
    )


def error_result(message: str, **details: Any) -> types.CallToolResult:
    """A tool error, as the reference answers it (`{"error": ...}`, isError)."""
    content = types.TextContent(type="text", text=text({"error": message, **details}))
    return types.CallToolResult(content=[content], isError=True)


def build_server(context: Context) -> Server[Any, Any]:
    """A server with every tool, resource and prompt, running them in `context`."""
    server: Server[Any, Any] = Server(SERVER_NAME, version=__version__)
    listing = [tool_listing(tool) for tool in TOOLS.values()]

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return listing

    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        tool = TOOLS.get(name)
        if tool is None:
            return error_result(f"Unknown tool: {name}")
        if tool.confirm is not None:
            refusal = await confirmation(server, context, tool, arguments)
            if refusal is not None:
                return refusal
        arguments = {key: value for key, value in arguments.items() if key != "confirm"}
        try:
            result = await tool.run(context, arguments)
        except ToolError as exc:
            return error_result(str(exc))
        body = result.text if isinstance(result, Text) else text(result, tool.pretty)
        return types.CallToolResult(content=[types.TextContent(type="text", text=body)])

    register_resources(server, context)
    register_prompts(server, context)
    return server


async def confirmation(
    server: Server[Any, Any], context: Context, tool: Tool, arguments: dict[str, Any]
) -> types.CallToolResult | None:
    """None when the call may run; else the refusal to answer."""
    assert tool.confirm is not None
    target = str(arguments.get(tool.confirm, ""))
    impact = await describe_impact(context, tool, arguments)
    request = server.request_context
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if request.session.check_client_capability(wanted):
        answer = await request.session.elicit(
            message=f"{impact}\n\nRun it?",
            requestedSchema={
                "type": "object",
                "properties": {
                    "confirm": {"type": "boolean", "title": "Run this operation", "default": False}
                },
                "required": ["confirm"],
            },
            related_request_id=request.request_id,
        )
        if answer.action == "accept" and (answer.content or {}).get("confirm") is True:
            return None
        return error_result("The user did not confirm this operation.", executed=False,
                            impact=impact)  # fmt: skip
    if arguments.get("confirm") == target:
        return None
    how = (
        f"Show the impact to the user and ask for approval. Only after the user explicitly "
        f"approves, call {tool.name} again with confirm: {json.dumps(target)}."
    )
    return error_result(
        "Confirmation required for a destructive operation.",
        executed=False, impact=impact, howToConfirm=how,
    )  # fmt: skip


async def describe_impact(context: Context, tool: Tool, arguments: dict[str, Any]) -> str:
    """What the guarded call would do, with counts from the broker (best effort)."""
    queue = str(arguments.get("queue", ""))
    try:
        counts = await job_counts(context, queue)
    except ToolError:
        return f"Run {tool.name.removeprefix('bunqueue_')} with {text(arguments)}."
    if tool.name == "bunqueue_obliterate_queue":
        listed = ", ".join(f"{count} {state}" for state, count in counts.items())
        return (f'Permanently delete queue "{queue}" and every job in it ({listed}), including '
                "results and logs.")  # fmt: skip
    if tool.name == "bunqueue_drain_queue":
        waiting = ", ".join(f"{counts[s]} {s}" for s in ("waiting", "prioritized", "delayed",
                                                          "paused"))  # fmt: skip
        return f'Remove every job still waiting to run in queue "{queue}" ({waiting}); ' \
               "active jobs keep running."  # fmt: skip
    if tool.name == "bunqueue_purge_dlq":
        return (f'Permanently delete {counts["failed"]} dead letter entries of queue "{queue}"; '
                "they can no longer be inspected or retried.")  # fmt: skip
    state = arguments.get("state") or "completed and failed"
    limit = f" (at most {arguments['limit']})" if "limit" in arguments else ""
    return (f"Permanently remove {state} jobs older than {arguments.get('graceMs')} ms from "
            f'queue "{queue}"{limit}.')  # fmt: skip


# -- resources ------------------------------------------------------------------------------

RESOURCES = {
    "stats": "Overall queue server statistics",
    "queues": "All queues with job counts per state",
    "crons": "All scheduled cron jobs",
    "workers": "Active workers and their status",
    "webhooks": "Registered webhooks",
}


async def resource_value(context: Context, name: str) -> Any:
    """The current value of the resource `bunqueue://<name>`."""
    if name == "stats":
        return await broker_stats(context)
    if name == "queues":
        names = (await TOOLS["bunqueue_list_queues"].run(context, {}))["queues"]
        return [{"name": queue, **await job_counts(context, queue)} for queue in names]
    if name == "crons":
        return (await TOOLS["bunqueue_list_crons"].run(context, {}))["crons"]
    if name == "workers":
        return await workers(context)
    return (await TOOLS["bunqueue_list_webhooks"].run(context, {}))["webhooks"]


def register_resources(server: Server[Any, Any], context: Context) -> None:
    """The reference's five read-only JSON resources."""

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [
            types.Resource(
                uri=AnyUrl(f"bunqueue://{name}"),
                name=name,
                description=description,
                mimeType="application/json",
            )
            for name, description in RESOURCES.items()
        ]

    @server.read_resource()
    async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
        name = str(uri).removeprefix("bunqueue://")
        if name not in RESOURCES:
            raise ValueError(f"Unknown resource: {uri}")
        try:
            value = await resource_value(context, name)
        except ToolError as exc:
            value = {"error": str(exc), "isError": True}
        return [
            ReadResourceContents(content=text(value, pretty=True), mime_type="application/json")
        ]


# -- prompts --------------------------------------------------------------------------------

PROMPTS = [
    types.Prompt(
        name="bunqueue_health_report",
        description="Generate a comprehensive health report for the bunqueue server with "
        "severity levels (OK/WARNING/CRITICAL).",
    ),
    types.Prompt(
        name="bunqueue_debug_queue",
        description="Deep diagnostic of a specific queue: job counts, pause status, DLQ "
        "entries, active jobs, and priority distribution.",
        arguments=[
            types.PromptArgument(name="queue", description="Queue name to debug", required=True)
        ],
    ),
    types.Prompt(
        name="bunqueue_incident_response",
        description="Incident response playbook: identifies backed-up queues, checks worker "
        'health, provides step-by-step triage for "jobs not processing".',
        arguments=[
            types.PromptArgument(
                name="queue",
                description="Specific queue to investigate (omit to check all)",
                required=False,
            )
        ],
    ),
]


def prompt(description: str, body: str) -> types.GetPromptResult:
    """A prompt of one user message."""
    message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=body))
    return types.GetPromptResult(description=description, messages=[message])


async def run(context: Context, name: str, **arguments: Any) -> Any:
    return await TOOLS[f"bunqueue_{name}"].run(context, arguments)


async def health_report(context: Context) -> types.GetPromptResult:
    stats = await broker_stats(context)
    storage = await run(context, "get_storage_status")
    queues = (await run(context, "list_queues"))["queues"]
    found_workers = await workers(context)
    crons = (await run(context, "list_crons"))["crons"]
    memory = await run(context, "get_memory_stats")
    details = []
    for queue in queues[:MAX_QUEUES_IN_REPORT]:
        paused = (await run(context, "is_paused", queue=queue))["paused"]
        details.append(
            {"name": queue, "counts": await job_counts(context, queue), "paused": paused}
        )
    shown = f"{len(details)} of {len(queues)}" if len(queues) > len(details) else len(details)
    body = f"""Analyze the following bunqueue server health data and produce a structured health report.

For each area, assign a severity level: OK, WARNING, or CRITICAL.

## System Stats
{text(stats, True)}

## Storage Status
{text(storage, True)}

## Queue Details ({shown} queues)
{text(details, True)}

## Workers ({len(found_workers)} registered)
{text(found_workers, True)}

## Cron Jobs ({len(crons)} scheduled)
{text(crons, True)}

## Memory Stats
{text(memory, True)}

---

Produce a report with these sections:
1. **Overall Health** — One-line summary with overall severity
2. **Storage** — Disk health (CRITICAL if diskFull or error present)
3. **Queues** — Per-queue assessment: flag if failed > 10% of total, flag if paused
4. **Workers** — Worker count and heartbeat freshness (stale if >60s ago)
5. **Memory** — Collections near capacity limits
6. **Cron Jobs** — Scheduled job status, any missed next_run times
7. **Recommendations** — Prioritized list of actions to take"""  # noqa: E501
    return prompt("Comprehensive bunqueue server health report", body)


async def debug_queue(context: Context, queue: str) -> types.GetPromptResult:
    counts = await job_counts(context, queue)
    paused = (await run(context, "is_paused", queue=queue))["paused"]
    dlq = (await run(context, "get_dlq", queue=queue, limit=10))["jobs"]
    active = (await run(context, "get_jobs", queue=queue, state="active"))["jobs"]
    priorities = (await run(context, "get_counts_per_priority", queue=queue))["priorities"]
    total = sum(counts[key] for key in ("waiting", "delayed", "active", "completed", "failed"))
    body = f"""Analyze the following diagnostic data for bunqueue queue "{queue}" and identify any issues.

## Job State Breakdown
{text(counts, True)}

## Queue Status
- Paused: {json.dumps(paused)}
- Total jobs: {total}

## Active Jobs ({len(active)} currently processing)
{text(active, True)}

## Dead Letter Queue ({len(dlq)} entries, showing up to 10)
{text(dlq, True)}

## Priority Distribution
{text(priorities, True)}

---

Analyze and report:
1. **Queue Health** — Overall assessment (HEALTHY, DEGRADED, or UNHEALTHY)
2. **Backlog Analysis** — Waiting-to-active ratio, is the queue growing?
3. **Failure Analysis** — Failed count, DLQ entries, common patterns
4. **Stuck Jobs** — Active jobs that may be stalled (check startedAt timestamps)
5. **Priority Issues** — Priority starvation (low-priority jobs not processed)
6. **Recommendations** — Specific actions to resolve identified issues"""  # noqa: E501
    return prompt(f'Deep diagnostic for queue "{queue}"', body)


async def incident_response(context: Context, queue: str | None) -> types.GetPromptResult:
    every = (await run(context, "list_queues"))["queues"]
    found_workers = await workers(context)
    stats = await broker_stats(context)
    diagnostics = []
    for name in [queue] if queue else every[:MAX_QUEUES_IN_REPORT]:
        counts = await job_counts(context, name)
        paused = (await run(context, "is_paused", queue=name))["paused"]
        dlq = (await run(context, "get_dlq", queue=name, limit=5))["count"]
        diagnostics.append({"name": name, "counts": counts, "paused": paused, "dlqEntries": dlq})
    flagged = [
        q for q in diagnostics
        if q["paused"] or q["dlqEntries"] > 0
        or (q["counts"]["waiting"] > 0 and q["counts"]["active"] == 0)
    ]  # fmt: skip
    body = f"""INCIDENT: Jobs are not being processed. Triage and resolve.

## System Overview
{text(stats, True)}

## Workers ({len(found_workers)} registered)
{text(found_workers, True)}

## Queue Diagnostics ({len(diagnostics)} queues)
{text(diagnostics, True)}

## Flagged Queues ({len(flagged)} problematic)
{text(flagged, True)}

---

Run through this checklist:

### Step 1: Worker Health
- Are workers registered? (0 workers = root cause)
- Are heartbeats fresh? (stale if lastHeartbeat > 60s ago)
- Are workers assigned to the affected queues?

### Step 2: Queue Status
- Which queues are paused? (Use `bunqueue_resume_queue` to unpause)
- Which have waiting > 0 but active = 0? (These are stuck)

### Step 3: Throughput
- Is throughput zero or abnormally low?
- Compare push rate vs pull rate

### Step 4: DLQ Analysis
- Which queues have DLQ entries?
- Are jobs failing repeatedly? (Use `bunqueue_get_dlq` for details)

### Step 5: Root Cause & Resolution
Identify the most likely root cause and provide specific actions using bunqueue tools."""
    description = (f'Incident response for queue "{queue}"' if queue
                   else "Incident response: jobs not processing")  # fmt: skip
    return prompt(description, body)


def register_prompts(server: Server[Any, Any], context: Context) -> None:
    """The reference's three prompt templates."""

    @server.list_prompts()
    async def list_prompts() -> list[types.Prompt]:
        return PROMPTS

    @server.get_prompt()
    async def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        arguments = arguments or {}
        try:
            if name == "bunqueue_health_report":
                return await health_report(context)
            if name == "bunqueue_debug_queue":
                if not arguments.get("queue"):
                    raise ValueError("Missing required argument: queue")
                return await debug_queue(context, arguments["queue"])
            if name == "bunqueue_incident_response":
                return await incident_response(context, arguments.get("queue") or None)
        except ToolError as exc:
            return prompt("Error gathering bunqueue data",
                          f"Failed to gather bunqueue data: {exc}\n\nThe server may be "
                          "unreachable. Check connectivity and try again.")  # fmt: skip
        raise ValueError(f"Unknown prompt: {name}")
