"""The WebSocket endpoint (`/ws` on the HTTP port): the TCP commands as JSON text or
MessagePack binary messages, plus Subscribe/Unsubscribe to job events.

A reply takes the form of its request (text or binary). Events go out as JSON text:
`{event: "job:completed", ts, data: {queue, jobId, ...}}`. Replies and events queue, encoded,
for one writer; a subscriber that falls behind (SUBSCRIBER_BUFFER events, or more bytes unread
than the connection's budget) is told why (`subscription:dropped`) and disconnected. Jobs
pulled over a WebSocket without a lease go back to waiting when it closes, as over TCP.

Every message goes through the front door (frontdoor.py) as a TCP frame does: the same triage,
the same `Auth` check, the same in-flight budget (at most 50 messages read and not yet answered
on the wire, whoever answers them) and byte budget (unsent.py) as TCP: a client that does not
read stops being read. Encodings go through jsonwire, so no value a client sends or a job holds
can make the encoder or decoder raise; anything else unexpected ends this connection (the HTTP
server logs it), never the broker.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
import trio_websocket

from ..engine.runtime.actor import Batch, EngineActor
from ..engine.sink import Reply
from ..events import DROPPED_SLOW, SUBSCRIBER_BUFFER, DirectSubscription, invalid_patterns
from .frontdoor import FrontDoor, bearer_authorized
from .jsonwire import (
    INVALID_FORMAT,
    command_from,
    decode_message,
    encode_reply,
    job_event_json,
    msgpack_key,
    reply_json,
    reply_msgpack,
)
from .slots import Outgoing, StreamSession, disconnect
from .unsent import UnsentBytes

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024 * 1024
EVENTS_REQUIRED = "events must be a non-empty array"


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
    return bearer_authorized(request.headers, tokens)


async def serve_websocket(
    stream: trio.abc.Stream,
    actor: EngineActor,
    tokens: frozenset[str],
    unsent: UnsentBytes | None = None,
) -> None:
    """Serve one WebSocket connection until it closes."""
    async with trio.open_nursery() as nursery:
        request = await trio_websocket.wrap_server_stream(
            nursery, stream, max_message_size=MAX_MESSAGE
        )
        if not authorized(request, tokens):
            await request.reject(401, body=b'{"ok":false,"error":"Unauthorized"}')
            return
        socket = await request.accept()
        await WebSocketClient(socket, actor, tokens, unsent).serve()
        nursery.cancel_scope.cancel()


class WebSocketClient:
    """One accepted WebSocket: reads commands, writes replies and events."""

    def __init__(
        self,
        socket: trio_websocket.WebSocketConnection,
        actor: EngineActor,
        tokens: frozenset[str] = frozenset(),
        unsent: UnsentBytes | None = None,
    ) -> None:
        self.socket = socket
        self.actor = actor
        self.tokens = tokens
        # The upgrade's Bearer header admitted this socket; an Auth command is answered as on
        # TCP. SubscribeEvents goes to the engine, which points to `Subscribe`.
        self.door = FrontDoor(tokens, actor.clock.now_ms, preauthenticated=True, events_local=False)
        self.session = StreamSession(actor.outbox, self.door.in_flight, self._encode, unsent)
        # The reqIds (as MessagePack: any value, hashable) of requests sent as binary.
        self.binary_requests: set[bytes] = set()
        self.subscription: DirectSubscription | None = None
        self.events_scope = trio.CancelScope()
        self.events_dropped = trio.Event()  # set when the subscriber is dropped

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
            self._unsubscribe()
            await disconnect(self.actor, self.session)

    async def _read_commands(self, nursery: trio.Nursery) -> None:
        while True:
            # Every message read takes an in-flight slot until its reply is written, whoever
            # answers it (the slot of one answered here is given back once it is sent); none
            # is read while the client has too many bytes unread.
            await self.session.wait_capacity()
            message = await self.socket.get_message()
            binary = isinstance(message, bytes)
            try:
                decoded = decode_message(message)
            except ValueError:
                await self._send_local({"ok": False, "error": INVALID_FORMAT}, binary)
                continue
            req_id = decoded.get("reqId") if isinstance(decoded, dict) else None
            name = decoded.get("cmd") if isinstance(decoded, dict) else None
            if name in ("Subscribe", "Unsubscribe"):
                reply = self._subscription_command(decoded, nursery)
                await self._send_local(reply, binary, req_id)
                continue
            command = command_from(decoded)
            if self.door.is_local(command):
                local = self.door.answer(command, trio.current_time())
                await self._send_local(local.reply, binary, local.req_id)
                continue
            if binary:
                self.binary_requests.add(msgpack_key(req_id))
            await self.actor.submit(Batch(self.session, [command]))

    def _subscription_command(self, message: dict[str, Any], nursery: trio.Nursery) -> dict:
        """Subscribe adds its patterns to the socket's (the reference's rule), Unsubscribe takes
        the named ones away (all of them without `events`); both answer what is subscribed."""
        current = self.subscription.patterns if self.subscription is not None else []
        patterns = message.get("events")
        if message.get("cmd") == "Unsubscribe":
            if not isinstance(patterns, list) or not patterns:
                self._unsubscribe()
                return {"ok": True, "subscribed": []}
            dropped = {p for p in patterns if isinstance(p, str)}
            return self._subscribe([p for p in current if p not in dropped], None, nursery)
        if not isinstance(patterns, list) or not patterns:
            return {"ok": False, "error": EVENTS_REQUIRED}
        if not all(isinstance(p, str) for p in patterns):
            return {"ok": False, "error": EVENTS_REQUIRED}
        invalid = invalid_patterns(patterns)
        if invalid:
            return {"ok": False, "error": f"Invalid: {', '.join(invalid)}"}
        queue = message.get("queue")
        if queue is not None and not isinstance(queue, str):
            return {"ok": False, "error": "queue must be a string"}
        return self._subscribe([*current, *patterns], queue, nursery)

    def _subscribe(self, patterns: list[str], queue: str | None, nursery: trio.Nursery) -> dict:
        """Subscribe to `patterns` (none: end the subscription); `queue`, when given, becomes
        the queue whose events (and those of no queue) this socket gets."""
        if not patterns:
            self._unsubscribe()
            return {"ok": True, "subscribed": []}
        if self.subscription is None:
            self.subscription = self.actor.bus.subscribe_direct(
                patterns,
                queue,
                reply_json,
                self._send_events,
                self._events_dropped,
                job_event_json,
            )
            self.events_scope = trio.CancelScope()
            self.events_dropped = trio.Event()
            nursery.start_soon(self._close_when_dropped, self.subscription, self.events_scope)
        else:
            if queue is not None:
                self.subscription.queue = queue
            self.actor.bus.change(self.subscription, patterns)
        return {"ok": True, "subscribed": list(self.subscription.patterns)}

    def _unsubscribe(self) -> None:
        if self.subscription is not None:
            self.events_scope.cancel()
            self.actor.bus.unsubscribe(self.subscription)
            self.subscription = None

    def _send_events(self, messages: list[bytes]) -> str | None:
        """Queue one publish's events for the writer (the bus calls this in the actor's task,
        once per committed pass). A subscriber that falls behind (SUBSCRIBER_BUFFER events
        queued, or its connection `full`) is to be dropped: returns why, or None."""
        if self.session.send_events(messages, SUBSCRIBER_BUFFER) == len(messages):
            return None
        return DROPPED_SLOW

    def _events_dropped(self) -> None:
        """The bus dropped this subscriber: nothing queued goes out after the notice that
        tells the client why, and the socket closes, so it reconnects rather than silently
        missing events."""
        self.session.close()
        self.events_dropped.set()

    async def _close_when_dropped(
        self, subscription: DirectSubscription, scope: trio.CancelScope
    ) -> None:
        """Once the subscriber is dropped, tell the client why and close the socket."""
        with scope:
            await self.events_dropped.wait()
            notice = {"event": "subscription:dropped", "reason": subscription.dropped}
            await self.socket.send_message(reply_json(notice).decode())
            await self.socket.aclose(code=1008, reason="subscriber too slow")

    def _encode(self, reply: Reply) -> Outgoing:
        """A reply as its message, in the form of its request (called as it is staged)."""
        key = msgpack_key(reply.get("reqId"))
        binary = key in self.binary_requests
        self.binary_requests.discard(key)
        data = reply_msgpack(reply) if binary else reply_json(reply)
        return Outgoing(data, binary=binary, reply=True)

    async def _write_replies(self) -> None:
        session = self.session
        while True:
            message = await session.next_reply()
            data = message.data
            await self.socket.send_message(data if message.binary else data.decode())
            session.written(message)

    async def _send_local(self, reply: dict[str, Any], binary: bool, req_id: Any = None) -> None:
        """Send a reply made here (not by the engine) and give back its in-flight slot."""
        if req_id is not None:
            reply["reqId"] = req_id
        await self._send(reply, binary)
        self.session.answered()

    async def _send(self, reply: dict[str, Any], binary: bool) -> None:
        await self.socket.send_message(encode_reply(reply, binary))
