"""HTTP handlers (`bunqueue_register_handler`): a worker per queue that processes its jobs by
calling an HTTP endpoint, as the reference's MCP server spawns them.

Each handler is a Trio task: it pulls one job at a time with a lease (owner `mcp-handler:<queue>`),
sends the request (the job's data as the JSON body of a POST or PUT, unless a body was given),
and ACKs with `{status, body}` or FAILs with the HTTP error, so retries and the DLQ work as for
any worker. Targets pass the webhook guard (webhook_targets.py): unless private targets are
allowed, loopback, private and metadata addresses are refused, at registration and at each call.
At most MAX_HANDLERS run at once; a response body is read up to MAX_RESPONSE_BYTES.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpcore
import trio

from ..engine.rules.webhook_policy import refused_target
from ..services.webhook_targets import GuardedBackend

log = logging.getLogger(__name__)

MAX_HANDLERS = 100
MAX_RESPONSE_BYTES = 1024 * 1024
POLL_MS = 5000  # each pull waits this long for a job
RETRY_S = 1.0  # pause after the broker could not be reached
Run = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@attrs.define
class Handler:
    """One registered handler and the scope its worker task runs in."""

    url: str
    method: str
    headers: dict[str, str]
    body: Any
    timeout_ms: float
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    running: bool = False

    def describe(self) -> dict[str, Any]:
        """The handler as `bunqueue_list_handlers` shows it."""
        handler: dict[str, Any] = {"url": self.url, "method": self.method}
        if self.headers:
            handler["headers"] = self.headers
        if self.body is not None:
            handler["body"] = self.body
        handler["timeoutMs"] = self.timeout_ms
        return handler


class HandlerRegistry:
    """The running HTTP handlers, one per queue; their tasks run in `nursery` (set by `run`)."""

    def __init__(self, run: Run, allow_private: bool) -> None:
        self.run_command = run
        self.allow_private = allow_private
        self._handlers: dict[str, Handler] = {}
        self._nursery: trio.Nursery | None = None
        self._pool: httpcore.AsyncConnectionPool | None = None

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Host the handler tasks until cancelled (then every handler stops)."""
        guard = GuardedBackend(self.allow_private)
        async with httpcore.AsyncConnectionPool(network_backend=guard) as pool:
            await self._serve(pool, task_status)

    async def _serve(self, pool: httpcore.AsyncConnectionPool, task_status: Any) -> None:
        self._pool = pool
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                self._handlers.clear()

    def register(
        self,
        queue: str,
        url: str,
        method: str,
        headers: dict[str, str],
        body: Any,
        timeout_ms: float,
    ) -> None:
        """Start a handler on `queue` (replacing the one it had); ValueError if refused."""
        refusal = refused_target(url, self.allow_private)
        if refusal is not None:
            raise ValueError(refusal.replace("Webhook", "Handler"))
        if self._nursery is None:
            raise ValueError("HTTP handlers are not available here")
        self.unregister(queue)
        if len(self._handlers) >= MAX_HANDLERS:
            raise ValueError(f"At most {MAX_HANDLERS} HTTP handlers can run at once")
        handler = Handler(url, method, dict(headers), body, timeout_ms)
        self._handlers[queue] = handler
        self._nursery.start_soon(self._work, queue, handler)

    def unregister(self, queue: str) -> bool:
        """Stop the handler of `queue`; whether there was one."""
        handler = self._handlers.pop(queue, None)
        if handler is None:
            return False
        handler.scope.cancel()
        return True

    def list(self) -> list[dict[str, Any]]:
        """Every handler with its queue and whether its worker runs."""
        return [
            {"queue": queue, "handler": handler.describe(), "active": handler.running}
            for queue, handler in self._handlers.items()
        ]

    async def _work(self, queue: str, handler: Handler) -> None:
        owner = f"mcp-handler:{queue}"
        lock_ttl = handler.timeout_ms + 30_000
        with handler.scope:
            handler.running = True
            try:
                while True:
                    message = {"cmd": "PULL", "queue": queue, "timeout": POLL_MS,
                               "owner": owner, "lockTtl": lock_ttl}  # fmt: skip
                    reply = await self.run_command(message)
                    if not reply.get("ok"):
                        log.warning("HTTP handler on %s: %s", queue, reply.get("error"))
                        await trio.sleep(RETRY_S)
                    elif reply.get("job"):
                        await self._process(handler, reply["job"], reply.get("token"))
            except Exception:
                log.exception("HTTP handler on %s stopped", queue)
            finally:
                handler.running = False

    async def _process(self, handler: Handler, job: dict[str, Any], token: Any) -> None:
        settle: dict[str, Any] = {"id": job["id"]}
        if token:
            settle["token"] = token
        try:
            result = await self._call(handler, job.get("data"))
        except HandlerFailed as exc:
            await self.run_command({"cmd": "FAIL", **settle, "error": str(exc)})
            return
        await self.run_command({"cmd": "ACK", **settle, "result": result})

    async def _call(self, handler: Handler, data: Any) -> dict[str, Any]:
        headers = {"content-type": "application/json", **handler.headers}
        content = b""
        if handler.method not in ("GET", "DELETE"):
            content = json.dumps(data if handler.body is None else handler.body).encode()
        try:
            assert self._pool is not None
            with trio.fail_after(handler.timeout_ms / 1000):
                async with self._pool.stream(
                    handler.method, handler.url, headers=list(headers.items()), content=content
                ) as response:
                    raw = await read_limited(response)
        except (httpcore.TimeoutException, trio.TooSlowError):
            raise HandlerFailed("HTTP request timed out") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise HandlerFailed(f"HTTP request failed: {exc}") from None
        body = decode_body(raw, dict(response.headers).get(b"content-type", b""))
        if not 200 <= response.status < 300:
            shown = body if isinstance(body, str) else json.dumps(body)
            raise HandlerFailed(f"HTTP {response.status}: {shown}")
        return {"status": response.status, "body": body}


class HandlerFailed(Exception):
    """The endpoint failed the job (an error status, a timeout, a network error)."""


async def read_limited(response: httpcore.Response) -> bytes:
    """The response body, up to MAX_RESPONSE_BYTES (the rest is dropped)."""
    body = bytearray()
    async for chunk in response.aiter_stream():
        body += chunk[: MAX_RESPONSE_BYTES - len(body)]
        if len(body) >= MAX_RESPONSE_BYTES:
            break
    return bytes(body)


def decode_body(raw: bytes, content_type: bytes) -> Any:
    """JSON when the response says so (and is), else text."""
    text = raw.decode("utf-8", "replace")
    if b"json" in content_type.lower():
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
