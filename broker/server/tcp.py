"""The TCP front end: one reader and one writer task per connection.

The reader decodes every frame a read delivered, asks the front door (frontdoor.py) what to do
with each: what it answers itself (Hello, Ping, Auth, malformed frames) is sent at once, the rest
goes to the engine as one batch, at most 50 commands in flight, and nothing more is read while
the client has more reply bytes unread than its budget (unsent.py). The writer sends whatever
replies are ready in one write. When the connection ends, the engine is told (shielded, so it
happens even during cancellation) and releases the jobs this connection pulled without a
lease.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocol import MAX_FRAME_SIZE, FrameDecoder, FrameTooLarge, decode_command, encode, frame
from protocol import commands as cmd

from ..engine.runtime.actor import Batch, EngineActor
from ..events import (
    DROPPED_SLOW,
    SUBSCRIBER_BUFFER,
    TCP_DEFAULT_PATTERNS,
    TCP_EVENT_TYPES,
    DirectSubscription,
    tcp_event_frame,
)
from .frontdoor import AUTH_TIMEOUT_S, FrontDoor, contain_failures
from .guards import AuthThrottle, PartialFrameBudget
from .hub import READ_SIZE, ReadHub
from .session import Session
from .slots import disconnect
from .unsent import UnsentBytes

log = logging.getLogger(__name__)

# After the client stops sending, how long its last replies (not long polls) may take.
FLUSH_GRACE_S = 1
# Before Auth (when tokens are configured) a frame may be at most this large.
UNAUTHENTICATED_FRAME_LIMIT = 64 * 1024
# A frame must be complete this long after its first byte (or the previous frame) arrived.
PARTIAL_FRAME_TIMEOUT_S = 30
ACCEPT_BURST = 64  # connections accepted per turn of the accept loop
SERVER_BUSY = "Server busy: too much unfinished frame data buffered"
NOT_READING_EVENTS = "client not reading its events"


class EndConnection(Exception):
    """The connection must end (its reason, if the client should hear it, was already sent)."""


class Connection:
    """Serves one client stream against the engine actor."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        actor: EngineActor,
        tokens: frozenset[str],
        guards: Guards | None = None,
        hub: ReadHub | None = None,
    ):
        self.stream = stream
        self.actor = actor
        self.tokens = tokens
        self.guards = guards or Guards()
        # Where the connection waits for its socket while idle (hub.py); None: it reads itself.
        self.hub = hub if isinstance(stream, trio.SocketStream) else None
        self.peer = peer_address(stream)
        self.door = FrontDoor(tokens, actor.clock.now_ms, throttle=self.guards.auth, peer=self.peer)
        self.session = Session(
            actor.outbox,
            self.door.in_flight,
            direct_send=direct_sender(stream),
            unsent=self.guards.unsent,
        )
        # Until Auth succeeds only small frames are read: an anonymous client cannot make the
        # broker buffer a large one.
        self.decoder = FrameDecoder(MAX_FRAME_SIZE if not tokens else UNAUTHENTICATED_FRAME_LIMIT)
        self._frame_deadline = math.inf
        # Whether the shared partial-frame budget counts bytes of this connection: a read that
        # ends on a frame boundary (the usual one) then need not tell the budget anything.
        self._partial_held = False
        self._nursery: trio.Nursery | None = None
        self.events: DirectSubscription | None = None  # SubscribeEvents

    async def serve(self) -> None:
        """Run until the client goes away or must be cut off."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                with trio.CancelScope() as reading, contextlib.suppress(EndConnection):
                    if not self.door.authenticated:
                        nursery.start_soon(self._require_auth_in_time, reading)
                    await self._read_loop()
                with trio.move_on_after(FLUSH_GRACE_S):
                    await self.session.wait_flushed()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away; nothing to tell it
        finally:
            self._end_events()
            self.guards.partial_frames.hold(self, 0)
            await disconnect(self.actor, self.session)
            await trio.aclose_forcefully(self.stream)

    async def _require_auth_in_time(self, reading: trio.CancelScope) -> None:
        """Stop reading from a client that has not authenticated within AUTH_TIMEOUT_S: an
        anonymous connection may not hold its socket (and its slot) for ever."""
        await trio.sleep(AUTH_TIMEOUT_S)
        if self.door.must_close_unauthenticated():
            log.info("connection %s: no Auth within %s s; closed", self.session.id, AUTH_TIMEOUT_S)
            reading.cancel()

    async def _read_loop(self) -> None:
        receive = direct_receiver(self.stream) or self.stream.receive_some
        decoder = self.decoder
        hub = self.hub
        fd = self.stream.socket.fileno() if hub is not None else -1  # type: ignore[attr-defined]
        session = self.session
        while True:
            if session.full:  # the client has not read enough of its replies: read nothing
                await session.wait_capacity()
            if decoder.buffered:  # a frame is under way: it must be finished in time
                chunk = None
                with trio.move_on_at(self._frame_deadline):
                    chunk = await receive(READ_SIZE)
                if chunk is None:
                    log.info("connection %s: frame unfinished in time; closed", self.session.id)
                    return
            elif hub is not None and self._may_park(hub):
                chunk = await hub.park(self, fd)  # what the hub read and left to this task
                if chunk is None:  # the hub has stopped: read for ourselves from now on
                    hub = None
                    chunk = await receive(READ_SIZE)
            else:
                chunk = await receive(READ_SIZE)
            if not chunk:
                return
            await self._feed(chunk)

    def _may_park(self, hub: ReadHub) -> bool:
        """Whether the hub may read for this connection: it takes only what needs no waiting,
        so the connection must be authenticated, hold no partial frame and have room."""
        return (
            hub.running
            and self.door.authenticated
            and not self._partial_held
            and self.door.in_flight.room() > 0
            and not self.session.full
        )

    def take_now(self, chunk: bytes) -> Batch | None:
        """The engine's batch of a chunk the hub read, when it holds whole frames only, all of
        them engine commands within the in-flight budget (their slots are taken), and the
        client has not too many reply bytes unread; else None, and nothing changed: the
        connection's task then handles the chunk as its own read (and stops reading while
        either budget is spent)."""
        payloads = self.decoder.whole_frames(chunk)
        if not payloads:
            return None
        budget = self.door.in_flight
        if budget.count + len(payloads) > budget.limit or self.session.full:
            return None
        local = self.door.local_commands
        commands = []
        for payload in payloads:
            command = decode_command(payload)
            if isinstance(command, local):
                return None
            commands.append(command)
        budget.count += len(commands)  # `budget.take`, inline
        return Batch(self.session, commands)

    async def _feed(self, chunk: bytes | bytearray) -> None:
        decoder = self.decoder
        was_partial = decoder.buffered
        try:
            payloads = decoder.feed(bytes(chunk))
        except FrameTooLarge as exc:
            await self._handle(exc.complete)
            if exc.size <= decoder.limit:  # the frames before it authenticated the client
                await self._feed(exc.rest)
                return
            self.session.reply_now({"ok": False, "error": str(exc)}, None)
            raise EndConnection from None
        buffered = decoder.buffered
        if buffered and (payloads or not was_partial):
            self._frame_deadline = trio.current_time() + PARTIAL_FRAME_TIMEOUT_S
        if buffered or self._partial_held:
            if not self.guards.partial_frames.hold(self, buffered):
                self.guards.partial_frames.hold(self, 0)
                self._partial_held = False
                self.session.reply_now({"ok": False, "error": SERVER_BUSY}, None)
                raise EndConnection
            self._partial_held = buffered > 0
        await self._handle(payloads)

    async def _handle(self, payloads: list[bytes]) -> None:
        """Answer local frames, hand the rest to the engine in batches. Every command (local or
        not) takes an in-flight slot until its reply is written, so a client that does not read
        its replies stops being read."""
        door, budget = self.door, self.door.in_flight
        local = door.local_commands
        commands: list[object] = []
        for payload in payloads:
            if budget.count + len(commands) >= budget.limit:
                if commands:
                    await self._submit(commands)
                    commands = []
                if budget.room() <= 0:
                    await self.session.wait_capacity()
            command = decode_command(payload)
            # `door.is_local(command)`, inline (it runs for every command)
            if not door.authenticated or isinstance(command, local):
                await self._answer(command)
            else:
                commands.append(command)
        if commands:
            await self._submit(commands)

    async def _submit(self, commands: list[object]) -> None:
        self.door.in_flight.take(len(commands))
        await self.actor.submit(Batch(self.session, commands))

    async def _answer(self, command: object) -> None:
        """Send the front door's answer to a command the connection handles itself."""
        pause = self.door.auth_pause(command, trio.current_time())
        if pause:
            await trio.sleep(pause)
        local = self.door.answer(command, trio.current_time())
        if self.door.authenticated:
            self.decoder.limit = MAX_FRAME_SIZE
        if local.events is not None:
            self._subscribe(local.events)
        self.session.reply_now(local.reply, local.req_id)
        if local.close:
            log.info(
                "connection %s: %d failed Auth attempts; closed",
                self.session.id,
                self.door.auth_failures,
            )
            raise EndConnection

    def _subscribe(self, command: cmd.SubscribeEvents | cmd.UnsubscribeEvents) -> None:
        """SubscribeEvents/UnsubscribeEvents (answered by the front door, like Ping): events
        are sent on this connection until it unsubscribes or closes."""
        self._end_events()
        if isinstance(command, cmd.SubscribeEvents) and self._nursery is not None:
            patterns = command.events or TCP_DEFAULT_PATTERNS
            self.events = self.actor.bus.subscribe_direct(
                patterns,
                command.queue,
                event_frame,
                self._send_events,
                self._events_dropped,
                job_event_frames,
            )

    def _end_events(self) -> None:
        if self.events is not None:
            self.actor.bus.unsubscribe(self.events)
            self.events = None

    def _send_events(self, frames: list[bytes]) -> str | None:
        """Send one publish's event frames for this subscriber (the bus calls this in the
        actor's task, once per committed pass: one write for all of them). A subscriber more
        than SUBSCRIBER_BUFFER events behind (more than one event being sent and that many
        after it, as a forwarding task and its channel held), or whose connection holds more
        bytes unread than its budget, is to be dropped: returns why, or None."""
        reason = None
        if len(frames) > SUBSCRIBER_BUFFER + 1:
            frames, reason = frames[: SUBSCRIBER_BUFFER + 1], DROPPED_SLOW
        if self.session.send_events(frames) < len(frames):
            reason = NOT_READING_EVENTS
        return reason

    def _events_dropped(self) -> None:
        """The bus dropped this subscriber: disconnect it, so that its client reconnects and
        subscribes again rather than silently missing events."""
        if self.events is not None:
            log.info("event subscriber dropped: %s", self.events.dropped)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        session = self.session
        while True:
            data, count = await session.wait_output()
            await self.stream.send_all(data)
            session.written(count)


def event_frame(message: dict[str, Any]) -> bytes:
    """A bus message as a TCP subscriber's event frame, encoded (the bus encodes each message
    once for every TCP subscriber that takes it)."""
    return frame(encode(tcp_event_frame(message)))


# The constant pieces of a job event's frame, in the order `tcp_event_frame` gives its fields:
# `{type: "event", event: {queue, jobId, eventType, timestamp}}` (two fixmaps).
_EVENT_HEAD = b"\x82" + encode("type") + encode("event") + encode("event") + b"\x84"
_QUEUE_KEY = encode("queue")
_JOB_ID_KEY = encode("jobId")
_TYPE_KEY = encode("eventType")
_TIMESTAMP_KEY = encode("timestamp")


def _str_header(size: int) -> bytes:
    """The MessagePack header of a string of `size` UTF-8 bytes (the smallest form, as
    msgspec writes it)."""
    if size < 32:
        return bytes((0xA0 | size,))
    if size < 0x100:
        return bytes((0xD9, size))
    if size < 0x10000:
        return b"\xda" + size.to_bytes(2, "big")
    return b"\xdb" + size.to_bytes(4, "big")


def job_event_frames(name: str, queue: str, jobs: list[Any], now_ms: float) -> list[bytes]:
    """`event_frame` of each job's event `name` with no extra data, in one call: the bytes
    around the job id are encoded once for the run (see `Subscriber.encode_jobs`)."""
    head = _EVENT_HEAD + _QUEUE_KEY + encode(queue) + _JOB_ID_KEY
    tail = _TYPE_KEY + encode(TCP_EVENT_TYPES.get(name, name)) + _TIMESTAMP_KEY
    tail += encode(float(now_ms))
    fixed = len(head) + len(tail)
    frames: list[bytes] = []
    append = frames.append
    start = b""  # the length prefix, `head` and the id's string header, for ids of `size` bytes
    size = -1
    for job in jobs:
        job_id = job.id.encode()  # a str's UTF-8, as MessagePack holds it after its header
        if len(job_id) != size:  # ids are mostly of one size: rebuilt only when it changes
            size = len(job_id)
            id_head = _str_header(size)
            start = (fixed + len(id_head) + size).to_bytes(4, "big") + head + id_head
        append(start + job_id + tail)
    return frames


class Guards:
    """What all connections of one server share to stay bounded together."""

    def __init__(self, unsent: UnsentBytes | None = None) -> None:
        self.partial_frames = PartialFrameBudget()
        self.auth = AuthThrottle()
        self.unsent = unsent or UnsentBytes()


def peer_address(stream: trio.abc.Stream) -> Any:
    """The peer's IP address (failed Auth attempts are counted per address), or None."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        return stream.socket.getpeername()[0]
    except (OSError, IndexError, TypeError):
        return None


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


class TcpServer:
    """Accepts connections and serves each one in its own task, with a staged shutdown."""

    def __init__(
        self, actor: EngineActor, tokens: frozenset[str], unsent: UnsentBytes | None = None
    ) -> None:
        self.actor = actor
        self.tokens = tokens
        self.connections: set[Connection] = set()
        self.guards = Guards(unsent)
        self.hub = ReadHub(actor)
        self._accepting = trio.CancelScope()
        self._handlers: trio.Nursery | None = None

    async def run(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED):
        """Listen on host:port (port 0 picks one); reports the listeners once bound."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        try:
            async with trio.open_nursery() as handlers:
                self._handlers = handlers
                handlers.start_soon(self.hub.run)
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

    async def serve_handed_over(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve only the streams handed over by `adopt`, for a listener owned elsewhere (the
        role loop of ha.py keeps its port through standby and active terms)."""
        async with trio.open_nursery() as handlers:
            self._handlers = handlers
            handlers.start_soon(self.hub.run)
            task_status.started()
            await trio.sleep_forever()

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one already-connected stream (used for sockets and for in-memory tests)."""
        connection = Connection(stream, self.actor, self.tokens, self.guards, self.hub)
        self.connections.add(connection)
        try:
            # A bug met while serving this client costs this connection only (serve() has
            # already closed it); the broker and the other connections go on.
            with contain_failures(f"connection {connection.session.id}", ()):
                await connection.serve()
        finally:
            self.connections.discard(connection)

    def adopt(self, stream: trio.abc.Stream) -> None:
        """Serve an already-connected stream as if it had been accepted (tests use memory
        streams); it is closed with the others at shutdown."""
        assert self._handlers is not None
        self._handlers.start_soon(self.serve_stream, stream)

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        """Accept connections in bursts: every connection ready in the kernel's queue (up to
        ACCEPT_BURST) per turn, rather than one per turn of the scheduler, so new clients are
        not starved while many busy connections are served."""
        listening = listener.socket
        # A second handle on the listening socket, for accept() without a checkpoint each.
        burst = socket.socket(fileno=os.dup(listening.fileno()))
        burst.setblocking(False)
        try:
            while True:
                await trio.lowlevel.wait_readable(listening)
                try:
                    for _ in range(ACCEPT_BURST):
                        sock, _address = burst.accept()
                        self._serve_accepted(sock)
                except BlockingIOError:
                    pass
                except OSError as exc:  # e.g. too many open files: wait, then accept again
                    log.warning("accept failed: %s", exc)
                    await trio.sleep(0.1)
        finally:
            burst.close()

    def _serve_accepted(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
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
