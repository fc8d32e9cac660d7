"""A small pipelined connection to a running broker over TCP, for `trioq mcp --url`.

Kept to this one module so it can give way to the `trioq` client package: the MCP server only
needs `run(message) -> reply` (backend.Backend). Requests carry a fresh `reqId`; a reader task
hands each reply to the request waiting for it, so concurrent tool calls share the connection.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import msgspec
import trio

from protocol import FrameDecoder, decode_any, frame

from .backend import Reply, as_json

CONNECT_TIMEOUT_S = 10.0
_encode = msgspec.msgpack.Encoder().encode


class BrokerUnavailable(Exception):
    """The broker cannot be reached, or the connection to it ended."""


def parse_url(url: str) -> tuple[str, int]:
    """`tcp://HOST:PORT` as (host, port); ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme != "tcp" or not parts.hostname or parts.port is None:
        raise ValueError(f"expected tcp://HOST:PORT, got {url!r}")
    return parts.hostname, parts.port


class BrokerConnection:
    """One TCP connection; `run` sends a command and waits for its reply."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._ids = itertools.count(1)
        self._waiting: dict[str, trio.MemorySendChannel[Reply]] = {}
        self._send_lock = trio.Lock()
        self._closed: BaseException | None = None

    async def run(self, message: dict[str, Any]) -> Reply:
        """Send one command and return its reply (BrokerUnavailable if the connection ends)."""
        if self._closed is not None:
            raise BrokerUnavailable(f"connection to the broker closed: {self._closed}")
        req_id = f"mcp-{next(self._ids)}"
        send, receive = trio.open_memory_channel[Reply](1)
        self._waiting[req_id] = send
        try:
            async with self._send_lock:
                await self.stream.send_all(frame(_encode({**message, "reqId": req_id})))
            async with receive:
                try:
                    reply = await receive.receive()
                except trio.EndOfChannel:
                    raise BrokerUnavailable("connection to the broker closed") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise BrokerUnavailable(f"connection to the broker failed: {exc}") from None
        finally:
            self._waiting.pop(req_id, None)
        reply.pop("reqId", None)
        return reply

    async def read_replies(self) -> None:
        """Hand every reply to its request until the connection ends; then fail the rest."""
        decoder = FrameDecoder()
        try:
            while True:
                chunk = await self.stream.receive_some(65536)
                if not chunk:
                    raise BrokerUnavailable("the broker closed the connection")
                for payload in decoder.feed(bytes(chunk)):
                    self._deliver(as_json(decode_any(payload)))
        except (BrokerUnavailable, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = exc
        finally:
            for waiter in self._waiting.values():
                waiter.close()

    def _deliver(self, reply: Any) -> None:
        if not isinstance(reply, dict):
            return
        waiter = self._waiting.get(str(reply.get("reqId")))
        if waiter is not None:  # events and replies nobody waits for any more are dropped
            waiter.send_nowait(reply)


@asynccontextmanager
async def connect(url: str, token: str | None = None) -> AsyncIterator[BrokerConnection]:
    """Open a connection to the broker at `url` (authenticating with `token`), reading its
    replies in a background task; closed on exit. Raises BrokerUnavailable or ValueError."""
    host, port = parse_url(url)
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, port)
    except (OSError, trio.TooSlowError) as exc:
        raise BrokerUnavailable(f"cannot connect to {url}: {exc}") from None
    async with stream, trio.open_nursery() as nursery:
        connection = BrokerConnection(stream)
        nursery.start_soon(connection.read_replies)
        if token is not None:
            reply = await connection.run({"cmd": "Auth", "token": token})
            if not reply.get("ok"):
                raise BrokerUnavailable(f"authentication failed: {reply.get('error')}")
        try:
            yield connection
        finally:
            nursery.cancel_scope.cancel()


__all__ = ["BrokerConnection", "BrokerUnavailable", "connect", "parse_url"]
