"""`/mcp` on the HTTP port: the SDK's Streamable HTTP session manager, reached from the h11
server (server/http.py) through a small ASGI bridge.

The HTTP port reads and bounds the request (head, body, auth) as for any route, then hands it
here: the bridge gives the SDK the body it already holds, streams what the SDK answers (JSON,
or an SSE stream) back through h11, and reports the client's leaving as `http.disconnect`
(a task watches the socket while the answer streams). Sessions are capped (MAX_SESSIONS; more
are answered 503) and closed after SESSION_IDLE_S without a request; a request body is at most
MAX_BODY_BYTES (413). A failure inside one session ends that session, never the broker.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import h11
import trio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ..engine.runtime.actor import EngineActor
from .backend import EngineBackend
from .handlers import HandlerRegistry
from .server import build_server
from .tools import Context

log = logging.getLogger(__name__)

PATH = "/mcp"
MAX_SESSIONS = 100
SESSION_IDLE_S = 600.0
MAX_BODY_BYTES = 4 * 1024 * 1024  # the reference's limit for its MCP HTTP transport
READ_SIZE = 65536
# Bytes a client may send while its answer streams (a pipelined next request) before the
# bridge stops reading them.
MAX_EARLY_BYTES = 2 * READ_SIZE
PEER_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class McpEndpoint:
    """The MCP server of this broker, served over Streamable HTTP."""

    def __init__(self, actor: Callable[[], EngineActor]) -> None:
        backend = EngineBackend(actor)
        self.handlers = HandlerRegistry(backend.run, allow_private=False)
        server = build_server(Context(backend, self.handlers))
        self.manager = StreamableHTTPSessionManager(
            app=server,
            session_idle_timeout=SESSION_IDLE_S,
            max_sessions=MAX_SESSIONS,
            max_request_body_size=MAX_BODY_BYTES,
        )
        self.running = False

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run the session manager and the HTTP handler workers until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.handlers.serve)
            async with self.manager.run():
                self.running = True
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    self.running = False

    async def serve(
        self,
        stream: trio.abc.Stream,
        connection: h11.Connection,
        request: h11.Request,
        body: bytes | bytearray,
    ) -> None:
        """Answer one request to `/mcp` (already read and authorized) on `connection`."""
        exchange = Exchange(stream, connection, request, body)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(exchange.watch_client)
            try:
                await self.manager.handle_request(exchange.scope(), exchange.receive, exchange.send)
            finally:
                nursery.cancel_scope.cancel()
        await exchange.finish()


class Exchange:
    """One request and its response, as ASGI sees them."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        connection: h11.Connection,
        request: h11.Request,
        body: bytes | bytearray,
    ) -> None:
        self.stream = stream
        self.connection = connection
        self.request = request
        self.body: bytes | None = bytes(body)
        self.gone = trio.Event()
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.started = False
        self.ended = False

    def scope(self) -> dict[str, Any]:
        """The ASGI scope of the request."""
        target = self.request.target.decode("latin-1")
        url = urlsplit(target)
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.request.http_version.decode("latin-1"),
            "method": self.request.method.decode("latin-1"),
            "scheme": "http",
            "path": url.path,
            "raw_path": url.path.encode("latin-1"),
            "query_string": url.query.encode("latin-1"),
            "root_path": "",
            "headers": [(name.lower(), value) for name, value in self.request.headers],
            "client": None,
            "server": None,
        }

    async def receive(self) -> dict[str, Any]:
        """The body (all of it at once), then `http.disconnect` once the client has gone."""
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        """Write what the SDK answers; dropped once the client has gone."""
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            return
        if message["type"] != "http.response.body" or self.ended or self.gone.is_set():
            return
        out = b""
        if not self.started:
            self.started = True
            reason = HTTPStatus(self.status).phrase.encode()
            event = h11.Response(status_code=self.status, headers=self.headers, reason=reason)
            out += self.connection.send(event) or b""
        chunk = message.get("body", b"")
        if chunk:
            out += self.connection.send(h11.Data(data=chunk)) or b""
        if not message.get("more_body", False):
            self.ended = True
            out += self.connection.send(h11.EndOfMessage()) or b""
        try:
            await self.stream.send_all(out)
        except PEER_GONE:
            self.gone.set()

    async def watch_client(self) -> None:
        """Notice the client closing while the answer streams. Bytes it sends meanwhile (its
        next request) are kept for h11, up to MAX_EARLY_BYTES."""
        early = 0
        with contextlib.suppress(*PEER_GONE):
            while early <= MAX_EARLY_BYTES:
                chunk = await self.stream.receive_some(READ_SIZE)
                if not chunk:
                    break
                early += len(chunk)
                self.connection.receive_data(bytes(chunk))
            else:
                return  # too much sent early: stop reading, the connection closes after
        self.gone.set()

    async def finish(self) -> None:
        """End a response the SDK left unfinished (it never answers without a body)."""
        if self.ended or self.gone.is_set():
            return
        if not self.started:
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        with contextlib.suppress(*PEER_GONE, h11.LocalProtocolError):
            await self.stream.send_all(self.connection.send(h11.EndOfMessage()) or b"")
        self.ended = True
