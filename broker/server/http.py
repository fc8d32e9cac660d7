"""The HTTP port: health, readiness, Prometheus metrics, stats, the REST routes, and the
WebSocket endpoint `/ws`. Requests are routed by one table (routes.py): the pages answered
here, and the routes that run one command each.

h11 parses HTTP; trio-websocket speaks WebSocket. Both share the port: the request head is
read first, and an upgrade to `/ws` is handed to trio-websocket with those bytes replayed.
REST commands go through the same validation and engine as TCP, so they answer the same way.

Robustness is a property of the connection task, not of each handler: `serve_stream` contains
every unexpected error of its connection with the front door's `contain_failures` (logged once
with its traceback, then the connection is closed; a store failure stops the broker, as on
TCP), and an error while answering one request is answered 500. Every wait on the client has a
deadline (an idle keep-alive connection closes, a request's head and body must arrive in
time), and request bodies buffered across all connections share one byte budget.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio
import trio_websocket

from protocol import Rejected
from store import MemoryStore, StoreError
from store.postgres import PostgresStore

from .. import __version__
from ..engine.runtime.actor import LOADING, EngineActor
from ..events import EVENT_NAMES
from ..mcp.asgi import PATH as MCP_PATH
from ..mcp.asgi import McpEndpoint
from ..services.metrics import CONTENT_TYPE, Metrics
from . import sse
from .dashboard import Collector, StaticFiles, flag, heap_stats, page_bounds
from .frontdoor import FrontDoor, bearer_authorized, contain_failures
from .jsonwire import command_from, parse_json, reply_json
from .routes import OPEN_PATHS, Answer, Page, Request, Route, answer_page, build_message, match
from .slots import call
from .unsent import UnsentBytes
from .websocket import ReplayStream, serve_websocket

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_BODY = 11 * 1024 * 1024
# Request bodies buffered at once, over every connection: past it a request is answered 503.
MAX_BUFFERED_BODIES = 32 * 1024 * 1024
# A kept-alive connection with no request starting closes after this long.
IDLE_TIMEOUT_S = 30.0
# A request's head and body must arrive within this long of its first byte (else 408).
REQUEST_TIMEOUT_S = 30.0
READ_SIZE = 65536
# Open WebSockets at most (as the reference); more are answered 503.
MAX_WEBSOCKETS = 1000
# Open connections on the HTTP port (plain HTTP, WebSocket and SSE together). Each may hold
# up to MAX_HEAD + READ_SIZE bytes of an unauthenticated request head, so their number is
# what bounds that memory; past it a new connection is answered 503 and closed.
MAX_CONNECTIONS = 2000
JSON = "application/json"
CORS_HEADERS = [
    ("access-control-allow-origin", "*"),
    ("access-control-allow-methods", "GET, POST, PUT, DELETE, OPTIONS"),
    ("access-control-allow-headers", "Content-Type, Authorization"),
]

EVENTS = re.compile(r"/events(?:/queues/(?P<queue>[^/]+))?")
# Jobs listed per state by `/dashboard/queues/:q?includeJobs=true`.
DASHBOARD_JOBS = 20
# Errors that mean the client left or broke the protocol: the connection ends, nothing is logged.
PEER_GONE = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    h11.RemoteProtocolError,
    trio_websocket.ConnectionClosed,
    trio_websocket.HandshakeError,
)


def error(status: int, message: str) -> Answer:
    """A JSON error answer."""
    return status, JSON, reply_json({"ok": False, "error": message})


class RequestFailed(Exception):
    """The request cannot be served; answer `status` with `message` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BodyBudget:
    """Bytes of request body buffered now, over every connection, against one limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        """Count `size` more bytes; raises RequestFailed(503) past the limit."""
        if self.used + size > self.limit:
            raise RequestFailed(503, "Server busy: too many request bodies in progress")
        self.used += size

    def give(self, size: int) -> None:
        """Release bytes taken before."""
        self.used -= size


def store_kind(store: object) -> str:
    """What the dashboard calls a store: memory, sqlite or postgres."""
    if store is None or isinstance(store, MemoryStore):
        return "memory"
    return "postgres" if isinstance(store, PostgresStore) else "sqlite"


class HttpServer:
    """Serves the HTTP port."""

    def __init__(
        self,
        actor: EngineActor,
        metrics: Metrics,
        tokens: frozenset[str],
        unsent: UnsentBytes | None = None,
    ) -> None:
        self.actor = actor
        self.metrics = metrics
        self.tokens = tokens
        # Reply bytes not yet written, shared with the TCP port: a WebSocket's against its
        # budget, an answer being written (one per connection) in the total.
        self.unsent = unsent or UnsentBytes()
        self.ready = False
        # With several brokers on PostgreSQL (ha.py): the role, epoch and active broker for
        # /health; commands are then answered only while ready (active).
        self.role_status: Callable[[], dict[str, Any]] | None = None
        self.budget = BodyBudget(MAX_BUFFERED_BODIES)
        self.websockets = 0
        self.connections = 0
        self.static = StaticFiles()
        self.collector = Collector()
        # SSE clients read the numbered events of one ring (sse.py); it is fed only while
        # someone listens, so the engine collects no events for nobody.
        self.events = sse.EventRing()
        self.sse_clients = 0
        self._listen_to(actor, metrics)
        # The MCP server (Streamable HTTP at /mcp), on the engine serving now.
        self.mcp = McpEndpoint(lambda: self.actor)
        # REST commands pass the same front door as TCP frames (triage: a rejected command or
        # a Ping is answered here). A request authenticates by its Bearer header, and an HTTP
        # connection answers one request before it reads the next, so the door holds no
        # per-connection state and one serves them all.
        self.door = FrontDoor(tokens, actor.clock.now_ms, preauthenticated=True, events_local=False)

    async def run(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED):
        """Listen until cancelled; reports the listeners."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.mcp.run)
            await trio.serve_tcp(self.serve_stream, port, host=host, task_status=task_status)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """One client connection: HTTP requests (keep-alive), or one WebSocket. Whatever goes
        wrong in it ends this connection only."""
        self.connections += 1
        try:
            # PEER_GONE: the client went away or spoke broken HTTP: nothing to tell it.
            with contain_failures("HTTP connection", PEER_GONE):
                if self.connections > MAX_CONNECTIONS:
                    await send_bare_error(stream, RequestFailed(503, "Too many connections"))
                    return
                await self._serve(stream)
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        try:
            head = await read_head(stream)
        except RequestFailed as failure:
            await send_bare_error(stream, failure)
            return
        if head is None:
            return
        if is_websocket_upgrade(head):
            await self._serve_websocket(stream, head)
            return
        await self._serve_http(stream, head)

    async def _serve_websocket(self, stream: trio.abc.Stream, head: bytes) -> None:
        """One WebSocket, unless MAX_WEBSOCKETS are open (each may buffer a 1 MiB message)."""
        if self.websockets >= MAX_WEBSOCKETS:
            await send_bare_error(stream, RequestFailed(503, "Too many WebSocket connections"))
            return
        self.websockets += 1
        try:
            await serve_websocket(ReplayStream(stream, head), self.actor, self.tokens, self.unsent)
        finally:
            self.websockets -= 1

    async def _serve_http(self, stream: trio.abc.Stream, head: bytes) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        connection.receive_data(head)
        while True:
            try:
                request, body = await receive_request(stream, connection, self.budget)
            except RequestFailed as failure:
                await send(stream, connection, None, error(failure.status, str(failure)), True)
                return
            if request is None:
                return
            events = self._events_request(request)
            if events is not None:
                self.budget.give(len(body))
                await self._serve_events(stream, connection, request, events)
                return
            if self._mcp_request(request):
                try:
                    await self.mcp.serve(stream, connection, request, body)
                finally:
                    self.budget.give(len(body))
                if connection.states != {h11.CLIENT: h11.DONE, h11.SERVER: h11.DONE}:
                    return
                connection.start_next_cycle()
                continue
            try:
                answer = await self._answer(request, body)
            finally:
                self.budget.give(len(body))
            # The connection reads its next request only once this answer is written: it
            # holds one at most, however large, and that counts in the total meanwhile.
            with self.unsent.holding(len(answer[2])):
                await send(stream, connection, request, answer, False)
            if connection.our_state is h11.MUST_CLOSE:
                return
            connection.start_next_cycle()

    async def _answer(self, request: h11.Request, body: bytearray) -> Answer:
        """Route one request; an unexpected error in it is logged and answered 500."""
        try:
            return await self.respond(request, body)
        except StoreError:
            # Not this request's fault: the broker stops (fail-stop, engine/runtime/commits.py).
            raise
        except Exception:
            log.exception("HTTP request %s %r failed", request.method, request.target)
            return error(500, "Internal server error")

    async def respond(self, request: h11.Request, body: bytes | bytearray) -> Answer:
        """Route one request: (status, content type, body)."""
        url = urlsplit(request.target.decode("latin-1"))
        path, method = url.path, request.method.decode("latin-1")
        if method == "HEAD":
            method = "GET"  # same answer; `send` leaves the body out
        if method == "OPTIONS":
            return 204, JSON, b""
        static = self.static.get(path) if method == "GET" else None
        if static is not None:  # the dashboard's page itself is open; its data calls are not
            return 200, *static
        if path not in OPEN_PATHS and not self._authorized(request):
            return error(401, "Unauthorized")
        route, params = match(method, path) or (None, {})
        if not (isinstance(route, Page) and route.open):  # open pages answer in any state
            if not self.actor.loaded.is_set():  # at once: an HTTP client knows what 503 means
                return error(503, LOADING)
            if not self._serving():
                active = self.role_status() if self.role_status else {}
                return error(503, f"standby: the active broker is at {active.get('active')}")
        if route is None:
            return error(404, "Not found")
        if isinstance(route, Page):
            return await answer_page(self, route, Request(params, parse_qs(url.query), {}))
        return await self._rest(route, params, url.query, body)

    async def _rest(
        self, route: Route, params: dict[str, str], query: str, body: bytes | bytearray
    ) -> Answer:
        """A command route of the table (routes.py): its command, run as TCP would."""
        try:
            fields = parse_json(body) if body.strip() else {}
        except ValueError as exc:
            return error(400, str(exc))
        if not isinstance(fields, dict):
            return error(400, "Body must be a JSON object")
        message = build_message(route, Request(params, parse_qs(query), fields))
        return await self._command(message, route.failure_status)

    # -- dashboard JSON ---------------------------------------------------------------------------

    async def page_dashboard(self, request: Request) -> Answer:
        """DashboardOverview plus what only the HTTP port knows: the broker's health."""
        reply = await self._run({"cmd": "DashboardOverview"})
        data = reply["data"]
        uptime = self._uptime_s()
        data["stats"]["uptime"] = uptime  # whole seconds, as everywhere on the HTTP port
        data["broker"] = {
            "version": __version__,
            "uptime": uptime,
            "store": store_kind(self.actor.store),
            "connections": {
                "tcp": self.metrics.connections(),
                "websocket": self.websockets,
                "sse": self.sse_clients,
            },
            # One name per role in every mode: a broker of its own (SQLite, memory) is the
            # active one, as a PostgreSQL broker holding the lease is.
            "role": self.role_status()["role"] if self.role_status else "active",
        }
        return 200, JSON, reply_json({"ok": True, "data": data})

    async def page_dashboard_queues(self, request: Request) -> Answer:
        """One page of DashboardQueues, each queue with its limits (`limit` 1..500, `offset`)."""
        bounds = page_bounds(request.query)
        if isinstance(bounds, str):
            return error(400, bounds)
        limit, offset = bounds
        data = (await self._run({"cmd": "DashboardQueues"}))["data"]
        every = data["queues"]
        page = every[offset : offset + limit]
        for queue in page:
            queue["limits"] = await self._queue_limits(queue["name"])
        data.update(queues=page, total=len(every), limit=limit, offset=offset)
        return 200, JSON, reply_json({"ok": True, "data": data})

    async def page_dashboard_queue(self, request: Request) -> Answer:
        """DashboardQueue, with its limits and, on `includeJobs=true`, the first jobs of each
        state."""
        queue, include_jobs = request.path["queue"], flag(request.query, "includeJobs")
        command = command_from({"cmd": "DashboardQueue", "queue": queue})
        if isinstance(command, Rejected):
            return error(400, command.error)
        reply: dict[str, Any] = await call(self.actor, command)
        if not reply.get("ok"):
            return 400, JSON, reply_json(reply)
        data = reply["data"]
        data["limits"] = await self._queue_limits(queue)
        if include_jobs:
            data["jobs"] = {
                state: (
                    await self._run(
                        {"cmd": "GetJobs", "queue": queue, "state": state, "limit": DASHBOARD_JOBS}
                    )
                )["jobs"]
                for state in ("waiting", "prioritized", "delayed", "active", "completed", "failed")
            }
        return 200, JSON, reply_json({"ok": True, "data": data})

    async def _queue_limits(self, queue: str) -> dict[str, Any]:
        return (await self._run({"cmd": "GetQueueLimits", "queue": queue}))["data"]["limits"]

    async def page_heap_stats(self, request: Request) -> Answer:
        """The interpreter's heap statistics (dashboard.py's `heap_stats`)."""
        return 200, JSON, reply_json({"ok": True, "data": heap_stats()})

    def serve_engine(self, actor: EngineActor, metrics: Metrics) -> None:
        """Answer from another engine from now on (a PostgreSQL standby that took the lease,
        ha.py): its commands, its metrics, and its events for the SSE clients, which stay
        connected across the change."""
        self.actor, self.metrics = actor, metrics
        self._listen_to(actor, metrics)

    def _listen_to(self, actor: EngineActor, metrics: Metrics) -> None:
        """Feed the SSE ring from `actor`'s events, and tell `metrics` the HTTP transports."""
        metrics.http_transports = lambda: (self.websockets, self.sse_clients)
        actor.bus.add_listener(self.events.append, lambda: self.sse_clients > 0, EVENT_NAMES)

    async def page_gc(self, request: Request) -> Answer:
        """A full garbage collection, at most one per 10 s (dashboard.py's `Collector`)."""
        result = self.collector.collect(trio.current_time())
        if result is None:
            return error(429, "A collection ran less than 10 s ago")
        return 200, JSON, reply_json({"ok": True, "data": result})

    # -- server-sent events -----------------------------------------------------------------------

    def _events_request(self, request: h11.Request) -> str | bool | None:
        """For an authorized `GET /events[/queues/:q]`: the queue, or True for every queue;
        None when the request is anything else (answered as usual, e.g. 401)."""
        if request.method != b"GET":
            return None
        found = EVENTS.fullmatch(urlsplit(request.target.decode("latin-1")).path)
        if found is None or not self._authorized(request):
            return None
        return True if found["queue"] is None else unquote(found["queue"])

    def _mcp_request(self, request: h11.Request) -> bool:
        """Whether the request is for the MCP server, authorized, while commands are served
        (anything else about `/mcp` is answered as usual: 401, or 503 on a standby)."""
        path = urlsplit(request.target.decode("latin-1")).path
        return (
            path == MCP_PATH and self.mcp.running and self._authorized(request) and self._serving()
        )

    async def _serve_events(
        self,
        stream: trio.abc.Stream,
        connection: h11.Connection,
        request: h11.Request,
        queue: str | bool,
    ) -> None:
        """Stream job events to one SSE client until it leaves or falls behind."""
        if self.sse_clients >= sse.MAX_CLIENTS:
            too_many = error(503, "Too many SSE clients")
            await send(stream, connection, request, too_many, True)
            return
        last_event_id = dict(request.headers).get(b"last-event-id")
        cursor = self.events.start_cursor(
            None if last_event_id is None else last_event_id.decode("latin-1")
        )
        self._count_sse_client(1)
        try:
            headers = [
                ("content-type", sse.CONTENT_TYPE),
                ("cache-control", "no-cache"),
                *CORS_HEADERS,
            ]
            head = connection.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))

            async def write(data: bytes) -> None:
                # One event at a time: the client's cursor in the shared ring is its backlog.
                with self.unsent.holding(len(data)):
                    await stream.send_all(connection.send(h11.Data(data=data)) or b"")

            await stream.send_all(head or b"")
            await write(sse.greeting(f"sse-{self.events.last_id}-{id(stream):x}"))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_close, stream, nursery.cancel_scope)
                with contextlib.suppress(sse.ClientTooSlow):
                    await sse.stream_events(
                        self.events, cursor, None if queue is True else str(queue), write
                    )
                nursery.cancel_scope.cancel()
        finally:
            self._count_sse_client(-1)

    def _count_sse_client(self, change: int) -> None:
        self.sse_clients += change
        self.actor.bus.listeners_changed()  # the engine collects events only while one listens

    async def page_live(self, request: Request) -> Answer:
        """The process answers: plain `OK`."""
        return 200, "text/plain", b"OK"

    async def page_health(self, request: Request) -> Answer:
        """The broker's health (`_health`)."""
        return 200, JSON, reply_json(self._health())

    async def page_ready(self, request: Request) -> Answer:
        """200 once commands are served here, else 503."""
        ready = self.ready
        return (200 if ready else 503), JSON, reply_json({"ok": ready, "ready": ready})

    async def page_metrics(self, request: Request) -> Answer:
        """The Prometheus text of the serving engine's metrics."""
        return 200, CONTENT_TYPE, self.metrics.render()

    def _authorized(self, request: h11.Request) -> bool:
        return bearer_authorized(request.headers, self.tokens)

    def _serving(self) -> bool:
        """Whether commands are answered here: always, except on a standby broker."""
        return self.ready or self.role_status is None

    def _uptime_s(self) -> int:
        """Whole seconds since the broker started."""
        return math.floor((self.actor.clock.now_ms() - self.actor.engine.started_ms) / 1000)

    def _health(self) -> dict[str, Any]:
        state = self.actor.engine.state
        return {
            "ok": True,
            "status": "healthy" if self.actor.loaded.is_set() else "loading",
            "version": __version__,
            "uptime": self._uptime_s(),
            "queues": len(state.queues),
        } | (self.role_status() if self.role_status is not None else {})

    async def page_stats(self, request: Request) -> Answer:
        """Stored job counts, then since-start totals (named `total...`), and uptime in s."""
        counts = (await self._run({"cmd": "Stats"}))["stats"]
        totals = (await self._run({"cmd": "Metrics"}))["metrics"]
        stored = {key: counts[key] for key in ("waiting", "active", "delayed", "completed", "dlq")}
        since_start = {
            key: totals[key]
            for key in ("totalPushed", "totalPulled", "totalCompleted", "totalFailed")
        }
        stats = {**stored, **since_start, "uptime": self._uptime_s()}
        return 200, JSON, reply_json({"ok": True, "stats": stats})

    async def page_queues_summary(self, request: Request) -> Answer:
        """Every queue with its pause state and job counts (a bare array, as the reference)."""
        summary = []
        for name in (await self._run({"cmd": "ListQueues"}))["queues"]:
            counts = (await self._run({"cmd": "GetJobCounts", "queue": name}))["counts"]
            paused = (await self._run({"cmd": "IsPaused", "queue": name}))["paused"]
            summary.append({"name": name, "paused": paused, "counts": counts})
        return 200, JSON, reply_json(summary)

    async def page_queue_workers(self, request: Request) -> Answer:
        """The live workers registered for one queue."""
        queue = request.path["queue"]
        workers = (await self._run({"cmd": "ListWorkers"}))["data"]["workers"]
        serving = [
            worker
            for worker in workers
            if queue in (worker.get("queues") or []) and worker.get("status") == "active"
        ]
        return 200, JSON, reply_json({"ok": True, "workers": serving})

    async def page_dlq_stats(self, request: Request) -> Answer:
        """How many failed jobs the queue's DLQ holds (the reference's `total` and `byQueue`)."""
        queue = request.path["queue"]
        command = command_from({"cmd": "GetJobCounts", "queue": queue})
        if isinstance(command, Rejected):
            return error(400, command.error)
        reply: dict[str, Any] = await call(self.actor, command)
        total = reply["counts"].get("failed", 0)
        return (
            200,
            JSON,
            reply_json({"ok": True, "stats": {"total": total, "byQueue": {queue: total}}}),
        )

    async def _run(self, message: dict[str, Any]) -> dict[str, Any]:
        command = command_from(message)
        assert not isinstance(command, Rejected), command
        return await call(self.actor, command)

    async def _command(self, message: dict[str, Any], failure_status: int = 400) -> Answer:
        command = command_from(message)
        if self.door.is_local(command):  # a rejected command, or a Ping: as on TCP
            reply = self.door.answer(command, trio.current_time()).reply  # HTTP has no reqId
            return (200 if reply.get("ok") else 400), JSON, reply_json(reply)
        reply = await call(self.actor, command)
        return (200 if reply.get("ok") else failure_status), JSON, reply_json(reply)


async def send(
    stream: trio.abc.Stream,
    connection: h11.Connection,
    request: h11.Request | None,
    answer: Answer,
    close: bool,
) -> None:
    """Send one response; a HEAD request gets the headers without the body."""
    status, content_type, payload = answer
    headers = [("content-type", content_type), ("content-length", str(len(payload)))]
    headers += CORS_HEADERS
    if close:
        headers.append(("connection", "close"))
    if connection.our_state is not h11.SEND_RESPONSE:
        # The request head never completed: h11 cannot frame a response, so write it plainly.
        await stream.send_all(plain_response(status, headers, payload))
        return
    reason = HTTPStatus(status).phrase.encode()
    out = connection.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""
    if request is None or request.method != b"HEAD":
        out += connection.send(h11.Data(data=payload)) or b""
    out += connection.send(h11.EndOfMessage()) or b""
    await stream.send_all(out)


def plain_response(status: int, headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """An HTTP/1.1 response written without h11 (for requests h11 never accepted)."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


async def send_bare_error(stream: trio.abc.Stream, failure: RequestFailed) -> None:
    """Answer an error before any request head was parsed, then the caller closes."""
    status, content_type, payload = error(failure.status, str(failure))
    headers = [("content-type", content_type), ("content-length", str(len(payload)))]
    headers.append(("connection", "close"))
    await stream.send_all(plain_response(status, headers, payload))


async def read_head(stream: trio.abc.Stream) -> bytes | None:
    """Read until the end of the first request head (the body may follow in the same bytes).

    None when the client closes or sends nothing within the idle timeout; RequestFailed when
    the head is too large or does not arrive within the request timeout."""
    with trio.move_on_after(IDLE_TIMEOUT_S):
        data = bytearray(await stream.receive_some(READ_SIZE))
    if not data:
        return None
    with trio.move_on_after(REQUEST_TIMEOUT_S):
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                raise RequestFailed(431, "Request head too large")
            # Never more than one byte past the limit: a head is all an anonymous client
            # may make the broker hold, and a bytearray grows without copying it all.
            chunk = await stream.receive_some(MAX_HEAD + 1 - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)
    raise RequestFailed(408, "Request timeout")


async def _cancel_on_close(stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
    """Cancel `scope` when the client closes its side (an SSE client reads, never sends)."""
    with contextlib.suppress(*PEER_GONE):
        while await stream.receive_some(READ_SIZE):
            pass
    scope.cancel()


def is_websocket_upgrade(head: bytes) -> bool:
    """Whether the head asks to upgrade `/ws` (or `/ws/...`) to a WebSocket."""
    first, _, rest = head.partition(b"\r\n")
    parts = first.split(b" ")
    if len(parts) < 2 or parts[0] != b"GET" or not parts[1].startswith(b"/ws"):
        return False
    return b"upgrade: websocket" in rest.lower()


async def receive_request(
    stream: trio.abc.Stream, connection: h11.Connection, budget: BodyBudget
) -> tuple[h11.Request | None, bytearray]:
    """The next request and its body; (None, empty) when the client is done or stays idle.

    The body's bytes are taken from `budget`; the caller gives them back. Raises RequestFailed
    for a body too large, a full budget, or a request that does not arrive in time."""
    event: Any = connection.next_event()
    if event is h11.NEED_DATA:
        with trio.move_on_after(IDLE_TIMEOUT_S) as idle:
            chunk = await stream.receive_some(READ_SIZE)
        if idle.cancelled_caught:
            return None, bytearray()  # a kept-alive connection left idle closes quietly
        connection.receive_data(bytes(chunk))  # empty: the client closed (h11 reports it)
        event = None
    body = bytearray()
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            return await _read_message(stream, connection, budget, body, event), body
        raise RequestFailed(408, "Request timeout")
    except h11.RemoteProtocolError as exc:
        budget.give(len(body))
        raise RequestFailed(exc.error_status_hint, f"Bad request: {exc}") from exc
    except BaseException:
        budget.give(len(body))
        raise


async def _read_message(
    stream: trio.abc.Stream,
    connection: h11.Connection,
    budget: BodyBudget,
    body: bytearray,
    first: Any,
) -> h11.Request | None:
    """Read one request into `body`, starting from `first` (an event already taken, or None)."""
    request = None
    event: Any = first
    while True:
        if event is None:
            event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(bytes(await stream.receive_some(READ_SIZE)))
        elif isinstance(event, h11.Request):
            request = event
            check_declared_length(event)
        elif isinstance(event, h11.Data):
            if len(body) + len(event.data) > MAX_BODY:
                raise RequestFailed(413, "Request body too large")
            budget.take(len(event.data))
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        event = None


def check_declared_length(request: h11.Request) -> None:
    """Refuse a body declared larger than MAX_BODY before reading any of it."""
    for name, value in request.headers:
        if name == b"content-length" and int(value) > MAX_BODY:
            raise RequestFailed(413, "Request body too large")
