"""The WebSocket endpoint (`/ws` on the HTTP port): the TCP commands as JSON text or
MessagePack binary messages, plus Subscribe/Unsubscribe to job events.

A reply takes the form of its request (text or binary). Events go out as JSON text:
`{event: "job:completed", ts, data: {queue, jobId, ...}}`. A subscriber that falls behind is
told why (`subscription:dropped`) and disconnected. Jobs pulled over a WebSocket without a
lease go back to waiting when it closes, as over TCP.

Like a TCP connection, at most 50 commands are in flight per socket (a client that does not
read stops being read), and `Auth` checks its token as TCP does. JSON goes through jsonwire,
so no value a client sends or a job holds can make the encoder or decoder raise; anything
else unexpected ends this connection (the HTTP server logs it), never the broker.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import msgspec
import trio
import trio_websocket

from protocol import Rejected
from protocol import commands as cmd

from ..engine.actor import Batch, Disconnect, EngineActor
from ..engine.errors import INVALID_TOKEN
from ..events import EVENT_TYPES, Subscription
from .jsonwire import command_from, parse_json, reply_json
from .slots import StreamSession
from .tcp import hello_reply, ping_reply, tokens_match

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024 * 1024
_to_msgpack = msgspec.msgpack.Encoder().encode
_from_msgpack = msgspec.msgpack.Decoder().decode
VALID_PATTERNS = {"*", "job:*", *(f"job:{kind}" for kind in EVENT_TYPES)}


def _decode(message: str | bytes) -> Any:
    """A binary message is MessagePack, a text one JSON; ValueError when it is neither."""
    if isinstance(message, str):
        return parse_json(message)
    try:
        return _from_msgpack(message)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError("Invalid command format") from exc


def _req_id(command: Any) -> Any:
    """The reqId a command (or a rejected message) carried."""
    return command.req_id if isinstance(command, Rejected) else getattr(command, "reqId", None)


class ReplayStream(trio.abc.Stream):
    """A stream that first hands back bytes already read from it (the request head)."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The replayed bytes first, then the stream's."""
        if self._prefix:
            data, self._prefix = self._prefix, b""
            return data
        return bytes(await self._stream.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send on the underlying stream."""
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """As the underlying stream."""
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close the underlying stream."""
        await self._stream.aclose()


def authorized(request: trio_websocket.WebSocketRequest, tokens: frozenset[str]) -> bool:
    """A WebSocket is authorized by its upgrade request's `Authorization: Bearer` header."""
    if not tokens:
        return True
    for name, value in request.headers:
        if name.lower() == b"authorization" and value.startswith(b"Bearer "):
            return tokens_match(value[7:].decode("latin-1"), tokens)
    return False


async def serve_websocket(stream: trio.abc.Stream, actor: EngineActor, tokens: frozenset[str]):
    """Serve one WebSocket connection until it closes."""
    async with trio.open_nursery() as nursery:
        request = await trio_websocket.wrap_server_stream(
            nursery, stream, max_message_size=MAX_MESSAGE
        )
        if not authorized(request, tokens):
            await request.reject(401, body=b'{"ok":false,"error":"Unauthorized"}')
            return
        socket = await request.accept()
        await WebSocketClient(socket, actor, tokens).serve()
        nursery.cancel_scope.cancel()


class WebSocketClient:
    """One accepted WebSocket: reads commands, writes replies and events."""

    def __init__(
        self,
        socket: trio_websocket.WebSocketConnection,
        actor: EngineActor,
        tokens: frozenset[str] = frozenset(),
    ) -> None:
        self.socket = socket
        self.actor = actor
        self.tokens = tokens
        self.session = StreamSession(actor.outbox)
        # The reqIds (as MessagePack: any value, hashable) of requests sent as binary.
        self.binary_requests: set[bytes] = set()
        self.subscription: Subscription | None = None
        self.events_scope = trio.CancelScope()

    async def serve(self) -> None:
        """Serve until the socket closes; then release what this connection held."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_replies)
                await self._read_commands(nursery)
                nursery.cancel_scope.cancel()
        except* trio_websocket.ConnectionClosed:
            pass
        finally:
            self.session.closed = True
            self._unsubscribe()
            with trio.move_on_after(5) as scope, contextlib.suppress(trio.BrokenResourceError):
                scope.shield = True
                await self.actor.inbox.send(Disconnect(self.session))

    async def _read_commands(self, nursery: trio.Nursery) -> None:
        while True:
            message = await self.socket.get_message()
            binary = isinstance(message, bytes)
            try:
                decoded = _decode(message)
            except ValueError:
                await self._send({"ok": False, "error": "Invalid command format"}, binary)
                continue
            req_id = decoded.get("reqId") if isinstance(decoded, dict) else None
            name = decoded.get("cmd") if isinstance(decoded, dict) else None
            if name in ("Subscribe", "Unsubscribe"):
                await self._send(self._subscription_command(decoded, nursery), binary, req_id)
                continue
            command = command_from(decoded)
            local = self._local_reply(command)
            if local is not None:
                await self._send(local, binary, _req_id(command))
                continue
            await self.session.wait_capacity()
            if binary:
                self.binary_requests.add(_to_msgpack(req_id))
            await self.actor.submit(Batch(self.session, [command]))

    def _local_reply(self, command: Any) -> dict[str, Any] | None:
        """The reply to a command this connection answers itself (as TCP does), else None."""
        if isinstance(command, Rejected):
            return {"ok": False, "error": command.error}
        if isinstance(command, cmd.Hello):
            return hello_reply()
        if isinstance(command, cmd.Ping):
            return ping_reply(self.actor.clock.now_ms())
        if isinstance(command, cmd.Auth):
            # The upgrade's Bearer header already admitted this socket; Auth answers as on TCP.
            if tokens_match(command.token, self.tokens):
                return {"ok": True}
            return {"ok": False, "error": INVALID_TOKEN}
        return None

    def _subscription_command(self, message: dict[str, Any], nursery: trio.Nursery) -> dict:
        if message.get("cmd") == "Unsubscribe":
            self._unsubscribe()
            return {"ok": True}
        patterns = message.get("events") or ["*"]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            return {"ok": False, "error": "events must be a non-empty array"}
        invalid = [p for p in patterns if p not in VALID_PATTERNS]
        if invalid:
            return {"ok": False, "error": f"Invalid: {', '.join(invalid)}"}
        queue = message.get("queue")
        if queue is not None and not isinstance(queue, str):
            return {"ok": False, "error": "queue must be a string"}
        self._unsubscribe()
        self.subscription = self.actor.bus.subscribe(patterns, queue)
        self.events_scope = trio.CancelScope()
        nursery.start_soon(self._write_events, self.subscription, self.events_scope)
        return {"ok": True, "subscribed": patterns}

    def _unsubscribe(self) -> None:
        if self.subscription is not None:
            self.events_scope.cancel()
            self.actor.bus.unsubscribe(self.subscription)
            self.subscription = None

    async def _write_events(self, subscription: Subscription, scope: trio.CancelScope) -> None:
        with scope:
            async for event in subscription.receive:
                await self.socket.send_message(reply_json(event).decode())
            if subscription.dropped is not None:
                notice = {"event": "subscription:dropped", "reason": subscription.dropped}
                await self.socket.send_message(reply_json(notice).decode())
                await self.socket.aclose(code=1008, reason="subscriber too slow")

    async def _write_replies(self) -> None:
        session = self.session
        while True:
            reply = await session.next_reply()
            req_id = reply.get("reqId")
            key = _to_msgpack(req_id)
            binary = key in self.binary_requests
            self.binary_requests.discard(key)
            await self._send(reply, binary)
            session.written()

    async def _send(self, reply: dict[str, Any], binary: bool, req_id: Any = None) -> None:
        if req_id is not None:
            reply["reqId"] = req_id
        if binary:
            await self.socket.send_message(_to_msgpack(reply))
        else:
            await self.socket.send_message(reply_json(reply).decode())
