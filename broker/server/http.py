"""The HTTP port: health, readiness, Prometheus metrics, stats, a small REST surface, and the
WebSocket endpoint `/ws`.

h11 parses HTTP; trio-websocket speaks WebSocket. Both share the port: the request head is
read first, and an upgrade to `/ws` is handed to trio-websocket with those bytes replayed.
REST commands go through the same validation and engine as TCP, so they answer the same way.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import msgspec
import trio

from protocol import Rejected, decode_command

from .. import __version__
from ..engine.actor import EngineActor
from ..metrics import CONTENT_TYPE, Metrics
from .slots import call
from .tcp import tokens_match
from .websocket import ReplayStream, serve_websocket

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_BODY = 11 * 1024 * 1024
OPEN_PATHS = frozenset({"/health", "/healthz", "/live", "/ready", "/metrics", "/prometheus"})
_to_msgpack = msgspec.msgpack.Encoder().encode
_from_msgpack = msgspec.msgpack.Decoder().decode
_json = msgspec.json.Encoder().encode


def jsonable(reply: dict[str, Any]) -> bytes:
    """A reply as JSON (raw MessagePack payloads inside it decoded first)."""
    return _json(_from_msgpack(_to_msgpack(reply)))


Route = tuple[str, re.Pattern[str], str]
ROUTES: list[Route] = [
    ("POST", re.compile(r"/queues/(?P<queue>[^/]+)/jobs"), "push"),
    ("GET", re.compile(r"/queues/(?P<queue>[^/]+)/jobs"), "pull"),
    ("GET", re.compile(r"/jobs/(?P<id>[^/]+)"), "get"),
    ("POST", re.compile(r"/jobs/(?P<id>[^/]+)/ack"), "ack"),
    ("POST", re.compile(r"/jobs/(?P<id>[^/]+)/fail"), "fail"),
]


class HttpServer:
    """Serves the HTTP port."""

    def __init__(self, actor: EngineActor, metrics: Metrics, tokens: frozenset[str]) -> None:
        self.actor = actor
        self.metrics = metrics
        self.tokens = tokens
        self.ready = False

    async def run(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED):
        """Listen until cancelled; reports the listeners."""
        await trio.serve_tcp(self.serve_stream, port, host=host, task_status=task_status)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """One client connection: HTTP requests (keep-alive), or one WebSocket."""
        try:
            head = await read_head(stream)
            if head is None:
                return
            if is_websocket_upgrade(head):
                await serve_websocket(ReplayStream(stream, head), self.actor, self.tokens)
                return
            await self._serve_http(stream, head)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve_http(self, stream: trio.abc.Stream, head: bytes) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        connection.receive_data(head)
        while True:
            request, body = await receive_request(stream, connection)
            if request is None:
                return
            status, content_type, payload = await self.respond(request, body)
            headers = [("content-type", content_type), ("content-length", str(len(payload)))]
            response = h11.Response(status_code=status, headers=headers)
            out = connection.send(response) or b""
            out += connection.send(h11.Data(data=payload)) or b""
            out += connection.send(h11.EndOfMessage()) or b""
            await stream.send_all(out)
            if connection.our_state is h11.MUST_CLOSE:
                return
            connection.start_next_cycle()

    async def respond(self, request: h11.Request, body: bytes) -> tuple[int, str, bytes]:
        """Route one request: (status, content type, body)."""
        url = urlsplit(request.target.decode("latin-1"))
        path, method = url.path, request.method.decode()
        if path not in OPEN_PATHS and not self._authorized(request):
            return 401, "application/json", _json({"ok": False, "error": "Unauthorized"})
        if method == "GET" and path in ("/healthz", "/live"):
            return 200, "text/plain", b"OK"
        if method == "GET" and path == "/health":
            return 200, "application/json", _json(self._health())
        if method == "GET" and path == "/ready":
            ready = self.ready
            return (200 if ready else 503), "application/json", _json({"ok": ready, "ready": ready})
        if method == "GET" and path in ("/metrics", "/prometheus"):
            return 200, CONTENT_TYPE, self.metrics.render()
        if method == "GET" and path == "/stats":
            return await self._command({"cmd": "Stats"})
        for route_method, pattern, action in ROUTES:
            match = pattern.fullmatch(path)
            if match and method == route_method:
                return await self._rest(action, match.groupdict(), parse_qs(url.query), body)
        return 404, "application/json", _json({"ok": False, "error": "Not found"})

    def _authorized(self, request: h11.Request) -> bool:
        if not self.tokens:
            return True
        for name, value in request.headers:
            if name == b"authorization" and value.startswith(b"Bearer "):
                return tokens_match(value[7:].decode("latin-1"), self.tokens)
        return False

    def _health(self) -> dict[str, Any]:
        state = self.actor.engine.state
        return {
            "ok": True,
            "status": "healthy",
            "version": __version__,
            "uptime": self.actor.clock.now_ms() - self.actor.engine.started_ms,
            "queues": len(state.queues),
        }

    async def _rest(
        self, action: str, params: dict[str, str], query: dict[str, list[str]], body: bytes
    ) -> tuple[int, str, bytes]:
        try:
            fields = json.loads(body) if body else {}
        except ValueError:
            return 400, "application/json", _json({"ok": False, "error": "Invalid JSON body"})
        if not isinstance(fields, dict):
            return 400, "application/json", _json({"ok": False, "error": "Body must be an object"})
        if action == "push":
            message = {**fields, "cmd": "PUSH", "queue": params["queue"]}
        elif action == "pull":
            timeout = query.get("timeout", ["0"])[0]
            # HTTP pulls are not tied to a connection, so they are detached.
            message = {"cmd": "PULL", "queue": params["queue"], "timeout": timeout, "detach": True}
        elif action == "get":
            message = {"cmd": "GetJob", "id": params["id"]}
        else:
            message = {**fields, "cmd": "ACK" if action == "ack" else "FAIL", "id": params["id"]}
        return await self._command(message)

    async def _command(self, message: dict[str, Any]) -> tuple[int, str, bytes]:
        command = decode_command(_to_msgpack(message))
        if isinstance(command, Rejected):
            return 400, "application/json", _json({"ok": False, "error": command.error})
        reply = await call(self.actor, command)
        return (200 if reply.get("ok") else 400), "application/json", jsonable(reply)


async def read_head(stream: trio.abc.Stream) -> bytes | None:
    """Read until the end of the first request head (the body may follow in the same bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            return None
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    return data


def is_websocket_upgrade(head: bytes) -> bool:
    """Whether the head asks to upgrade `/ws` (or `/ws/...`) to a WebSocket."""
    first, _, rest = head.partition(b"\r\n")
    parts = first.split(b" ")
    if len(parts) < 2 or parts[0] != b"GET" or not parts[1].startswith(b"/ws"):
        return False
    return b"upgrade: websocket" in rest.lower()


async def receive_request(
    stream: trio.abc.Stream, connection: h11.Connection
) -> tuple[h11.Request | None, bytes]:
    """The next request and its body; (None, b"") when the client is done."""
    request = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            chunk = await stream.receive_some(65536)
            connection.receive_data(bytes(chunk))
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise h11.RemoteProtocolError("body too large")
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None, b""
