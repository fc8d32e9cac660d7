"""The HTTP route table: every route of the HTTP port's requests, in one list (`TABLE`).

A command route (`Route`) names the TCP command it runs and how that command's fields come from
the path, the query string and the JSON body. A page (`Page`) is answered by the HTTP server
itself, from what only it knows (health, metrics) or from several commands (dashboard views);
an open page is served without a token, while the stored jobs load and on a standby.
What takes over a connection instead of answering one request is decided before the table:
the WebSocket upgrade (`/ws`), server-sent events (`/events`) and the MCP server (`/mcp`).

Routes follow the reference server's (bunqueue's HTTP API), so a client written for it finds
every route it uses. A route only builds a message; the HTTP server then decodes and validates it
exactly as a TCP frame, so both ports answer the same way. README's "Operating" section lists
the table for users.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

Answer = tuple[int, str, bytes]
"""An HTTP answer: status, content type, body."""


@dataclass(frozen=True)
class Request:
    """What a route builds its command from: path parameters, query string, JSON body."""

    path: dict[str, str]
    query: dict[str, list[str]]
    body: dict[str, Any]

    def arg(self, name: str) -> str | None:
        """The first value of a query parameter, or None."""
        values = self.query.get(name)
        return values[0] if values else None


Build = Callable[[Request], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    """One HTTP route: method, path pattern, command and the status an `ok: false` gets."""

    method: str
    pattern: re.Pattern[str]
    command: str
    build: Build
    failure_status: int = 400
    reads_body: bool = False


def _path(template: str) -> re.Pattern[str]:
    """`/queues/:queue/jobs` as a pattern with one named group per `:name` segment."""
    regex = re.sub(r":(\w+)", r"(?P<\1>[^/]+)", template)
    return re.compile(regex)


def _params(*path_names: str, body: tuple[str, ...] = (), query: tuple[str, ...] = ()) -> Build:
    """Fields taken as they are: from the path, then the body, then the query string."""

    def build(request: Request) -> dict[str, Any]:
        message: dict[str, Any] = {}
        for name in query:
            value = request.arg(name)
            if value is not None:
                message[name] = value
        for name in body:
            if name in request.body:
                message[name] = request.body[name]
        for name in path_names:
            message[name] = request.path[name]
        return message

    return build


def _whole_body(*path_names: str) -> Build:
    """Every body field passes through (the command's own validation reads them)."""

    def build(request: Request) -> dict[str, Any]:
        return {**request.body, **{name: request.path[name] for name in path_names}}

    return build


def _push(request: Request) -> dict[str, Any]:
    body = dict(request.body)
    if "maxAttempts" not in body and "attempts" in body:  # the reference's alias
        body["maxAttempts"] = body.pop("attempts")
    if not isinstance(body.get("name"), str):
        body["name"] = "default"
    return {**body, "queue": request.path["queue"]}


def _push_batch(request: Request) -> dict[str, Any]:
    jobs = request.body.get("jobs", [])
    if isinstance(jobs, list):
        jobs = [
            {**job, "name": job["name"] if isinstance(job.get("name"), str) else "default"}
            if isinstance(job, dict)
            else job
            for job in jobs
        ]
    return {"queue": request.path["queue"], "jobs": jobs}


def _pull(request: Request) -> dict[str, Any]:
    # An HTTP pull belongs to no connection, so it is detached (never released on close).
    return {"queue": request.path["queue"], "timeout": request.arg("timeout") or 0, "detach": True}


def _pull_batch(request: Request) -> dict[str, Any]:
    message = _params("queue", body=("count", "timeout", "owner", "lockTtl"))(request)
    return {**message, "detach": True}


def _list_jobs(request: Request) -> dict[str, Any]:
    states = [
        state.strip()
        for name in ("state", "status", "states")
        for value in request.query.get(name, [])
        for state in value.split(",")
        if state.strip()
    ]
    message: dict[str, Any] = {"queue": request.path["queue"]}
    if states:
        message["state"] = states[0] if len(states) == 1 else states
    for name in ("limit", "offset"):
        if request.arg(name) is not None:
            message[name] = request.arg(name)
    return message


def _config(request: Request) -> dict[str, Any]:
    config = request.body.get("config", request.body)
    return {"queue": request.path["queue"], "config": config}


def _concurrency(request: Request) -> dict[str, Any]:
    limit = request.body.get("concurrency", request.body.get("limit"))
    return {"queue": request.path["queue"], "limit": limit}


def _cron(request: Request) -> dict[str, Any]:
    body = dict(request.body)
    if not isinstance(body.get("jobName"), str):
        body["jobName"] = "default"
    return body


def _clean(request: Request) -> dict[str, Any]:
    message = _params("queue", body=("state", "limit"))(request)
    grace = request.body.get("grace")
    message["grace"] = grace if isinstance(grace, int | float) else 0
    return message


_ack_fields = _params("id", body=("result", "token", "removeOnComplete"))
_delay_fields = _params("id", body=("delay", "token"))
_locks_fields = _params(body=("ids", "tokens", "durations"))
_QUEUE = "/queues/:queue"
_JOB = "/jobs/:id"
NOT_FOUND = 404


def _route(method: str, path: str, command: str, build: Build, failure_status: int = 400) -> Route:
    return Route(method, _path(path), command, build, failure_status, method in ("POST", "PUT"))


ROUTES: list[Route] = [  # the command routes
    # Jobs in a queue.
    _route("POST", f"{_QUEUE}/jobs", "PUSH", _push),
    _route("GET", f"{_QUEUE}/jobs", "PULL", _pull),
    _route("POST", f"{_QUEUE}/jobs/bulk", "PUSHB", _push_batch),
    _route("POST", f"{_QUEUE}/jobs/pull-batch", "PULLB", _pull_batch),
    _route("GET", f"{_QUEUE}/jobs/list", "GetJobs", _list_jobs),
    # One job.
    _route("POST", "/jobs/ack-batch", "ACKB", _params(body=("ids", "results", "tokens"))),
    _route("POST", "/jobs/extend-locks", "ExtendLocks", _locks_fields),
    _route("POST", "/jobs/heartbeat-batch", "JobHeartbeatB", _params(body=("ids", "tokens"))),
    _route("GET", "/jobs/custom/:customId", "GetJobByCustomId", _params("customId"), NOT_FOUND),
    _route("GET", _JOB, "GetJob", _params("id"), NOT_FOUND),
    _route("DELETE", _JOB, "Cancel", _params("id"), NOT_FOUND),
    _route("POST", f"{_JOB}/ack", "ACK", _ack_fields),
    _route(
        "POST",
        f"{_JOB}/fail",
        "FAIL",
        _params("id", body=("error", "token", "unrecoverable", "stack", "removeOnFail")),
    ),
    _route("POST", f"{_JOB}/promote", "Promote", _params("id")),
    _route("PUT", f"{_JOB}/data", "Update", _params("id", body=("data",))),
    _route("GET", f"{_JOB}/state", "GetState", _params("id"), NOT_FOUND),
    _route("GET", f"{_JOB}/result", "GetResult", _params("id"), NOT_FOUND),
    _route("GET", f"{_JOB}/progress", "GetProgress", _params("id"), NOT_FOUND),
    _route("POST", f"{_JOB}/progress", "Progress", _params("id", body=("progress", "message"))),
    _route("PUT", f"{_JOB}/priority", "ChangePriority", _params("id", body=("priority", "lifo"))),
    _route("POST", f"{_JOB}/discard", "Discard", _params("id")),
    _route("POST", f"{_JOB}/move-to-delayed", "MoveToDelayed", _delay_fields),
    _route("PUT", f"{_JOB}/delay", "ChangeDelay", _params("id", body=("delay",))),
    _route("GET", f"{_JOB}/children", "GetChildrenValues", _params("id"), NOT_FOUND),
    _route("GET", f"{_JOB}/logs", "GetLogs", _params("id"), NOT_FOUND),
    _route("POST", f"{_JOB}/logs", "AddLog", _params("id", body=("message", "level"))),
    _route("DELETE", f"{_JOB}/logs", "ClearLogs", _params("id", body=("keepLogs",))),
    _route("POST", f"{_JOB}/heartbeat", "JobHeartbeat", _params("id", body=("token", "duration"))),
    _route("POST", f"{_JOB}/wait", "WaitJob", _params("id", body=("timeout",))),
    _route("POST", f"{_JOB}/extend-lock", "ExtendLock", _params("id", body=("duration", "token"))),
    _route("POST", f"{_JOB}/move-to-wait", "MoveToWait", _params("id", body=("token",))),
    # Queues.
    _route("GET", "/queues", "ListQueues", _params()),
    _route("GET", f"{_QUEUE}/counts", "GetJobCounts", _params("queue")),
    _route("GET", f"{_QUEUE}/count", "Count", _params("queue")),
    _route("GET", f"{_QUEUE}/priority-counts", "GetCountsPerPriority", _params("queue")),
    _route("GET", f"{_QUEUE}/paused", "IsPaused", _params("queue")),
    _route("POST", f"{_QUEUE}/pause", "Pause", _params("queue")),
    _route("POST", f"{_QUEUE}/resume", "Resume", _params("queue")),
    _route("POST", f"{_QUEUE}/drain", "Drain", _params("queue")),
    _route("POST", f"{_QUEUE}/obliterate", "Obliterate", _params("queue")),
    _route("POST", f"{_QUEUE}/clean", "Clean", _clean),
    _route("POST", f"{_QUEUE}/promote-jobs", "PromoteJobs", _params("queue", body=("count",))),
    _route("POST", f"{_QUEUE}/retry-completed", "RetryCompleted", _params("queue", body=("id",))),
    _route("GET", f"{_QUEUE}/dlq", "Dlq", _params("queue", query=("count",))),
    _route("POST", f"{_QUEUE}/dlq/retry", "RetryDlq", _params("queue", body=("jobId",))),
    _route("POST", f"{_QUEUE}/dlq/purge", "PurgeDlq", _params("queue")),
    _route("PUT", f"{_QUEUE}/rate-limit", "RateLimit", _params("queue", body=("limit",))),
    _route("DELETE", f"{_QUEUE}/rate-limit", "RateLimitClear", _params("queue")),
    _route("PUT", f"{_QUEUE}/concurrency", "SetConcurrency", _concurrency),
    _route("DELETE", f"{_QUEUE}/concurrency", "ClearConcurrency", _params("queue")),
    _route("GET", f"{_QUEUE}/stall-config", "GetStallConfig", _params("queue")),
    _route("PUT", f"{_QUEUE}/stall-config", "SetStallConfig", _config),
    _route("GET", f"{_QUEUE}/dlq-config", "GetDlqConfig", _params("queue")),
    _route("PUT", f"{_QUEUE}/dlq-config", "SetDlqConfig", _config),
    # Crons, webhooks, workers, monitoring.
    _route("GET", "/crons", "CronList", _params()),
    _route("POST", "/crons", "Cron", _cron),
    _route("GET", "/crons/:name", "CronGet", _params("name"), NOT_FOUND),
    _route("DELETE", "/crons/:name", "CronDelete", _params("name"), NOT_FOUND),
    _route("GET", "/webhooks", "ListWebhooks", _params()),
    _route("POST", "/webhooks", "AddWebhook", _params(body=("url", "events", "queue", "secret"))),
    _route("DELETE", "/webhooks/:webhookId", "RemoveWebhook", _params("webhookId"), NOT_FOUND),
    _route("PUT", "/webhooks/:id/enabled", "SetWebhookEnabled", _params("id", body=("enabled",))),
    _route("GET", "/workers", "ListWorkers", _params()),
    _route("POST", "/workers", "RegisterWorker", _whole_body()),
    _route("DELETE", "/workers/:workerId", "UnregisterWorker", _params("workerId"), NOT_FOUND),
    _route(
        "POST",
        "/workers/:id/heartbeat",
        "Heartbeat",
        _params("id", body=("activeJobs", "processed", "failed")),
    ),
    _route("GET", "/ping", "Ping", _params()),
    _route("GET", "/storage", "StorageStatus", _params()),
]


class Pages(Protocol):
    """The pages the HTTP server answers itself (http.py's `HttpServer`)."""

    async def page_live(self, request: Request) -> Answer:
        """Liveness: the process answers."""
        ...

    async def page_health(self, request: Request) -> Answer:
        """Health: loading or healthy, version, uptime, queues (and the role on PostgreSQL)."""
        ...

    async def page_ready(self, request: Request) -> Answer:
        """Readiness: 200 once commands are served here, else 503."""
        ...

    async def page_metrics(self, request: Request) -> Answer:
        """The Prometheus text."""
        ...

    async def page_stats(self, request: Request) -> Answer:
        """Stored job counts and the totals since start."""
        ...

    async def page_queues_summary(self, request: Request) -> Answer:
        """Every queue with its pause state and job counts."""
        ...

    async def page_dashboard(self, request: Request) -> Answer:
        """The dashboard's overview."""
        ...

    async def page_dashboard_queues(self, request: Request) -> Answer:
        """One page of the dashboard's queues."""
        ...

    async def page_dashboard_queue(self, request: Request) -> Answer:
        """One queue for the dashboard."""
        ...

    async def page_heap_stats(self, request: Request) -> Answer:
        """The interpreter's heap statistics."""
        ...

    async def page_gc(self, request: Request) -> Answer:
        """Run a garbage collection (at most one per 10 s)."""
        ...

    async def page_queue_workers(self, request: Request) -> Answer:
        """The live workers of one queue."""
        ...

    async def page_dlq_stats(self, request: Request) -> Answer:
        """How many failed jobs one queue's DLQ holds."""
        ...


PageAnswer = Callable[[Pages, Request], Awaitable[Answer]]


@dataclass(frozen=True)
class Page:
    """A route the HTTP server answers itself: method, path pattern, the name of the `Pages`
    method answering it, and whether it is open (no token; served while loading and on a
    standby)."""

    method: str
    pattern: re.Pattern[str]
    answer: str
    open: bool = False


def _page(method: str, path: str, answer: PageAnswer, *, open: bool = False) -> Page:
    # Named by the protocol's method (so mypy checks it exists), called on the server by name
    # (`answer_page`): the protocol's own function is only its stub.
    return Page(method, _path(path), answer.__name__, open)


async def answer_page(pages: Pages, page: Page, request: Request) -> Answer:
    """The page's answer, from the server's method of that name."""
    answer: Callable[[Request], Awaitable[Answer]] = getattr(pages, page.answer)
    return await answer(request)


PAGES: list[Page] = [
    _page("GET", "/healthz", Pages.page_live, open=True),
    _page("GET", "/live", Pages.page_live, open=True),
    _page("GET", "/health", Pages.page_health, open=True),
    _page("GET", "/ready", Pages.page_ready, open=True),
    _page("GET", "/metrics", Pages.page_metrics, open=True),
    _page("GET", "/prometheus", Pages.page_metrics, open=True),
    _page("GET", "/stats", Pages.page_stats),
    _page("GET", "/queues/summary", Pages.page_queues_summary),
    _page("GET", "/dashboard", Pages.page_dashboard),
    _page("GET", "/heapstats", Pages.page_heap_stats),
    _page("GET", "/dashboard/queues", Pages.page_dashboard_queues),
    _page("GET", "/dashboard/queues/:queue", Pages.page_dashboard_queue),
    _page("POST", "/gc", Pages.page_gc),
    _page("GET", f"{_QUEUE}/workers", Pages.page_queue_workers),
    _page("GET", f"{_QUEUE}/dlq/stats", Pages.page_dlq_stats),
]
"""The pages; an open page's path needs no token whatever the method (OPEN_PATHS)."""

TABLE: list[Route | Page] = [*PAGES, *ROUTES]
"""The one table the HTTP server routes by: the pages first, then the command routes (no path
of one is a path of the other)."""

OPEN_PATHS = frozenset(page.pattern.pattern for page in PAGES if page.open)
"""Paths served without a token (their patterns are plain paths)."""


def match(method: str, path: str) -> tuple[Route | Page, dict[str, str]] | None:
    """The route for a method and path, with its path parameters percent-decoded; None when
    no route has that path and method."""
    for route in TABLE:
        found = route.pattern.fullmatch(path)
        if found and route.method == method:
            return route, {name: unquote(value) for name, value in found.groupdict().items()}
    return None


def build_message(route: Route, request: Request) -> dict[str, Any]:
    """The command message a route runs: `cmd` plus the fields built from the request."""
    return {**route.build(request), "cmd": route.command}
