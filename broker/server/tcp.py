"""The TCP front end: one reader and one writer task per connection.

The reader decodes every frame a read delivered, answers what the connection can answer alone
(Hello, Ping, Auth, malformed frames), and hands the rest to the engine as one batch, at most 50
commands in flight. The writer sends whatever replies are ready in one write. When the
connection ends, the engine is told (shielded, so it happens even during cancellation) and
releases the jobs this connection pulled without a lease.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocol import FrameDecoder, FrameTooLarge, Rejected, decode_command
from protocol import commands as cmd

from .. import __version__
from ..engine.actor import Batch, Disconnect, EngineActor
from ..engine.errors import INVALID_TOKEN, NOT_AUTHENTICATED
from ..events import Subscription, tcp_event_frame
from .session import Session

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 3
CAPABILITIES = ["pipelining", "separate-job-name"]
READ_SIZE = 256 * 1024
DISCONNECT_TIMEOUT_S = 5
# After the client stops sending, how long its last replies (not long polls) may take.
FLUSH_GRACE_S = 1
# A SubscribeEvents client this far behind in reading is disconnected (it resubscribes).
MAX_UNSENT_EVENT_BYTES = 4 * 1024 * 1024


def tokens_match(presented: Any, configured: frozenset[str]) -> bool:
    """Compare a presented token with every configured one in constant time."""
    if not isinstance(presented, str) or not presented.strip():
        return False
    candidate = presented.strip().encode()
    found = False
    for token in configured:
        found |= hmac.compare_digest(candidate, token.encode())
    return found


class Connection:
    """Serves one client stream against the engine actor."""

    def __init__(self, stream: trio.abc.Stream, actor: EngineActor, tokens: frozenset[str]):
        self.stream = stream
        self.actor = actor
        self.tokens = tokens
        self.session = Session(
            actor.outbox, authenticated=not tokens, direct_send=direct_sender(stream)
        )
        self.decoder = FrameDecoder()
        self._nursery: trio.Nursery | None = None
        self.events: Subscription | None = None  # SubscribeEvents

    async def serve(self) -> None:
        """Run until the client goes away or sends a frame that is too large."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                await self._read_loop()
                with trio.move_on_after(FLUSH_GRACE_S):
                    await self.session.wait_flushed()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away; nothing to tell it
        finally:
            self.session.closed = True
            self._end_events()
            with trio.move_on_after(DISCONNECT_TIMEOUT_S) as scope:
                scope.shield = True
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.actor.inbox.send(Disconnect(self.session))  # engine may be gone
                await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        receive = direct_receiver(self.stream) or self.stream.receive_some
        while True:
            chunk = await receive(READ_SIZE)
            if not chunk:
                return
            try:
                payloads = self.decoder.feed(bytes(chunk))
            except FrameTooLarge as exc:
                await self._dispatch(self._triage(exc.complete))
                self.session.reply_now({"ok": False, "error": str(exc)}, None)
                return
            await self._dispatch(self._triage(payloads))

    async def _dispatch(self, commands: list[Any]) -> None:
        """Hand commands to the engine, at most 50 in flight for this connection."""
        session = self.session
        while commands:
            room = session.room()  # checked here first: waiting is a coroutine call per read
            if room <= 0:
                room = await session.wait_capacity()
            part, commands = commands[:room], commands[room:]
            session.in_flight += len(part)
            await self.actor.submit(Batch(session, part))

    def _triage(self, payloads: list[bytes]) -> list[Any]:
        """Decode frames; answer local ones; return those for the engine."""
        session = self.session
        commands = []
        for payload in payloads:
            command = decode_command(payload)
            if isinstance(command, Rejected):
                session.reply_now({"ok": False, "error": command.error}, command.req_id)
            elif isinstance(command, cmd.Auth):
                self._auth(command)
            elif not session.authenticated:
                session.reply_now({"ok": False, "error": NOT_AUTHENTICATED}, command.reqId)
            elif isinstance(command, cmd.Hello):
                session.reply_now(hello_reply(), command.reqId)
            elif isinstance(command, cmd.Ping):
                session.reply_now(ping_reply(self.actor.clock.now_ms()), command.reqId)
            elif isinstance(command, cmd.SubscribeEvents | cmd.UnsubscribeEvents):
                self._subscribe(command)
            else:
                commands.append(command)
        return commands

    def _auth(self, command: cmd.Auth) -> None:
        if tokens_match(command.token, self.tokens):
            self.session.authenticated = True
            self.session.reply_now({"ok": True}, command.reqId)
        else:
            self.session.reply_now({"ok": False, "error": INVALID_TOKEN}, command.reqId)

    def _subscribe(self, command: cmd.SubscribeEvents | cmd.UnsubscribeEvents) -> None:
        """SubscribeEvents/UnsubscribeEvents: answered here, like Ping (no engine state)."""
        self._end_events()
        if isinstance(command, cmd.SubscribeEvents) and self._nursery is not None:
            self.events = self.actor.bus.subscribe(["job:*"], command.queue)
            self._nursery.start_soon(self._forward_events, self.events)
        self.session.reply_now({"ok": True}, command.reqId)

    def _end_events(self) -> None:
        if self.events is not None:
            self.actor.bus.unsubscribe(self.events)
            self.events = None

    async def _forward_events(self, subscription: Subscription) -> None:
        """Send the subscription's events as they come. A subscriber whose buffer filled up
        is disconnected, so that its client reconnects and subscribes again rather than
        silently missing events."""
        async for message in subscription.receive:
            if self.session.unsent_bytes() > MAX_UNSENT_EVENT_BYTES:
                subscription.dropped = "client not reading its events"
                self.actor.bus.unsubscribe(subscription)
                break
            self.session.reply_now(tcp_event_frame(message), None)
        if subscription.dropped is not None and self._nursery is not None:
            log.info("event subscriber dropped: %s", subscription.dropped)
            self._nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        session = self.session
        while True:
            data, count = await session.wait_output()
            await self.stream.send_all(data)
            session.written(count)


def direct_sender(stream: trio.abc.Stream) -> Callable[[bytearray], int] | None:
    """A non-blocking `send` on the stream's socket, or None for streams without one."""
    if not isinstance(stream, trio.SocketStream):
        return None
    fd = stream.socket.fileno()

    def send(data: bytearray) -> int:
        try:
            return os.write(fd, data)
        except BlockingIOError:
            return 0

    return send


def direct_receiver(stream: trio.abc.Stream) -> Callable[[int], Awaitable[bytes]] | None:
    """`receive_some` for a socket stream, reading the socket itself: the same system calls
    as Trio's, without its wrapper layers, which showed in the cost of every request. Like
    Trio's, it passes a checkpoint on every call, and a socket error is BrokenResourceError."""
    if not isinstance(stream, trio.SocketStream):
        return None
    sock = stream.socket
    fd = sock.fileno()

    async def receive(max_bytes: int) -> bytes:
        try:
            data = os.read(fd, max_bytes)
        except BlockingIOError:
            pass
        except OSError as exc:
            raise trio.BrokenResourceError(exc) from exc
        else:
            await trio.lowlevel.checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(sock)  # the checkpoint
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(exc) from exc

    return receive


def hello_reply() -> dict[str, Any]:
    """The Hello answer: protocol 3 with pipelining and a separate job name."""
    return {
        "ok": True,
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": CAPABILITIES,
        "server": "trioq",
        "version": __version__,
    }


def ping_reply(now_ms: float) -> dict[str, Any]:
    """The Ping answer. The time is a float: as a 64-bit integer, msgpackr (the official
    client) would decode it as a BigInt, which JSON.stringify refuses."""
    return {"ok": True, "data": {"pong": True, "time": float(int(now_ms))}}


class TcpServer:
    """Accepts connections and serves each one in its own task, with a staged shutdown."""

    def __init__(self, actor: EngineActor, tokens: frozenset[str]) -> None:
        self.actor = actor
        self.tokens = tokens
        self.connections: set[Connection] = set()
        self._accepting = trio.CancelScope()
        self._handlers: trio.Nursery | None = None

    async def run(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED):
        """Listen on host:port (port 0 picks one); reports the listeners once bound."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        try:
            async with trio.open_nursery() as handlers:
                self._handlers = handlers
                with self._accepting:
                    async with trio.open_nursery() as accept:
                        for listener in listeners:
                            accept.start_soon(self._accept_loop, listener)
                        task_status.started(listeners)
                for listener in listeners:
                    listener.socket.close()
        finally:
            for listener in listeners:
                listener.socket.close()

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one already-connected stream (used for sockets and for in-memory tests)."""
        connection = Connection(stream, self.actor, self.tokens)
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)

    def adopt(self, stream: trio.abc.Stream) -> None:
        """Serve an already-connected stream as if it had been accepted (tests use memory
        streams); it is closed with the others at shutdown."""
        assert self._handlers is not None
        self._handlers.start_soon(self.serve_stream, stream)

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. too many open files: wait, then accept again
                log.warning("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
            assert self._handlers is not None
            self._handlers.start_soon(self.serve_stream, stream)

    def stop_accepting(self) -> None:
        """Close the listeners; connections already open go on."""
        self._accepting.cancel()

    async def close_connections(self, grace_s: float) -> None:
        """Let in-flight replies finish (at most `grace_s`), then close every connection."""
        with trio.move_on_after(grace_s):
            for connection in list(self.connections):
                await connection.session.wait_flushed()
        if self._handlers is not None:
            self._handlers.cancel_scope.cancel()
