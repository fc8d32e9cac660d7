"""Pipelined connections to the broker and the pool that keeps them open.

A request is a `Call`. Submitting one is synchronous: the frame is appended to the connection's
output buffer (so a caller that is cancelled can never leave half a frame on the wire) and one
writer task sends whatever has piled up in one write. Replies are matched to calls by `reqId`,
whatever order they arrive in. A call whose caller gave up (cancelled, timed out) stays known
until its reply comes and is then dropped, or handed to its `on_orphan` hook (a Worker returns
the jobs of a pull it no longer wants). So the connection is never out of step.

`Pool` keeps `size` connections open in the client's task group, reconnecting with exponential
backoff and jitter, authenticating each one first. When a connection breaks, calls not yet
written (and idempotent ones) go to another connection; the others fail with ConnectionLost.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from ._errors import AuthError, ClientClosed, ConnectError, ConnectionLost, ServerError, Timeout
from ._wire import FrameDecoder, append_frame, command, decode_envelope, decode_reply

log = logging.getLogger("trioq")

AUTH = command("Auth")
RECEIVE_SIZE = 256 * 1024
MAX_RETRIES = 5  # a call moves to a new connection at most this often


class Call:
    """One request and, once it came, its reply (`payload`) or its error."""

    __slots__ = (
        "abandoned",
        "callback",
        "error",
        "event",
        "idempotent",
        "message",
        "on_orphan",
        "payload",
        "retries",
        "sent",
    )

    def __init__(
        self,
        message: dict[str, Any],
        *,
        idempotent: bool = False,
        callback: Callable[[Call], None] | None = None,
        on_orphan: Callable[[bytes], None] | None = None,
    ) -> None:
        self.message = message
        self.idempotent = idempotent
        self.callback = callback
        self.on_orphan = on_orphan
        self.event: anyio.Event | None = None
        self.payload: bytes | None = None
        self.error: BaseException | None = None
        self.sent = False
        self.abandoned = False
        self.retries = 0

    def finish(self, payload: bytes | None, error: BaseException | None = None) -> None:
        """Record the outcome and wake whoever waits for it (only the first outcome counts:
        a reply after a timeout goes to `on_orphan`, if any)."""
        if self.payload is not None or self.error is not None:
            if payload is not None and self.on_orphan is not None:
                self.on_orphan(payload)
            return
        self.payload = payload
        self.error = error
        if self.abandoned:
            if payload is not None and self.on_orphan is not None:
                self.on_orphan(payload)
            return
        if self.callback is not None:
            self.callback(self)
        elif self.event is not None:
            self.event.set()

    @property
    def done(self) -> bool:
        """Whether the reply (or an error) has come."""
        return self.payload is not None or self.error is not None


class Connection:
    """One socket: a reader and a writer task, and the calls awaiting their replies."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        on_broken: Callable[[Connection, list[Call]], None],
        on_event: Callable[[bytes], None] | None = None,
    ) -> None:
        self._stream = stream
        self._on_broken = on_broken
        self.on_event = on_event
        self._pending: dict[int, Call] = {}
        self._out = bytearray()
        self._out_calls: list[Call] = []
        self._wake_writer = anyio.Event()
        self._next_req_id = 0
        self._scope: anyio.CancelScope | None = None
        self.broken = False
        self.closed = anyio.Event()

    @property
    def in_flight(self) -> int:
        """How many calls await their reply here."""
        return len(self._pending)

    def submit(self, call: Call) -> None:
        """Queue the call's frame for the writer (never blocks, never half-writes)."""
        self._next_req_id = req_id = (self._next_req_id + 1) & 0x7FFFFFFF
        message = call.message
        message["reqId"] = req_id
        out = self._out
        start = len(out)
        try:
            append_frame(out, message)
        except BaseException:
            del out[start:]  # a value that cannot be encoded: nothing of it goes out
            raise
        self._pending[req_id] = call
        self._out_calls.append(call)
        self._wake_writer.set()

    async def serve(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the reader and the writer until the connection breaks or is closed."""
        try:
            async with anyio.create_task_group() as group:
                self._scope = group.cancel_scope
                group.start_soon(self._read_loop)
                group.start_soon(self._write_loop)
                task_status.started()
        finally:
            self._break(ConnectionLost("connection closed"))
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await self._stream.aclose()
            self.closed.set()

    def close(self) -> None:
        """Stop the connection (pending calls fail or move to another connection)."""
        if self._scope is not None:
            self._scope.cancel()
        else:
            self._break(ConnectionLost("connection closed"))

    async def _read_loop(self) -> None:
        decoder = FrameDecoder()
        pending = self._pending
        try:
            while True:
                chunk = await self._stream.receive(RECEIVE_SIZE)
                for payload in decoder.feed(chunk):
                    envelope = decode_envelope(payload)
                    call = pending.pop(envelope.reqId, None) if envelope.reqId is not None else None
                    if call is not None:
                        call.finish(payload)
                    elif envelope.type == "event" and self.on_event is not None:
                        self.on_event(payload)
                    elif envelope.reqId is None and envelope.type != "event":
                        # An error before dispatch (the broker could not read a frame): the
                        # stream cannot be trusted any more.
                        raise ConnectionLost(f"broker error without reqId: {payload[:200]!r}")
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._break(ConnectionLost(f"connection lost: {exc.__class__.__name__}"))
        except OSError as exc:
            self._break(ConnectionLost(f"connection lost: {exc}"))
        except ConnectionLost as exc:
            self._break(exc)

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._out:
                    self._wake_writer = anyio.Event()
                    await self._wake_writer.wait()
                    continue
                data, self._out = self._out, bytearray()
                for call in self._out_calls:
                    call.sent = True
                self._out_calls = []
                await self._stream.send(data)  # type: ignore[arg-type]  # a bytearray is sent as is
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self._break(ConnectionLost(f"connection lost while writing: {exc}"))

    def _break(self, error: BaseException) -> None:
        if self.broken:
            return
        self.broken = True
        calls = list(self._pending.values())
        self._pending.clear()
        self._out_calls = []
        if self._scope is not None:
            self._scope.cancel()
        self._on_broken(self, calls)


class ShieldedGroup:
    """Spawns into a task group, each task shielded from cancellation coming from outside
    the worker (the worker cancels its own tasks through scopes inside the shield)."""

    def __init__(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._group.start_soon(_shielded, fn, *args)

    async def start(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async def run(*args: Any, task_status: anyio.abc.TaskStatus[Any]) -> None:
            with anyio.CancelScope(shield=True):
                await fn(*args, task_status=task_status)

        return await self._group.start(run, *args)


async def _shielded(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    with anyio.CancelScope(shield=True):
        await fn(*args)


Spawner = anyio.abc.TaskGroup | ShieldedGroup
"""Where a pool starts its tasks."""


class Pool:
    """`size` connections to one address, reconnected with backoff, authenticated first."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str | None,
        size: int,
        connect_timeout: float,
        backoff: tuple[float, float],
        on_ready: Callable[[Connection], None] | None = None,
        on_event: Callable[[bytes], None] | None = None,
        name: str = "pool",
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.size = size
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.on_ready = on_ready
        self.on_event = on_event
        self.name = name
        self.connections: list[Connection] = []
        self._waiting: deque[Call] = deque()
        self._ready = anyio.Event()
        self._group: Spawner | None = None
        self.closed = False
        self.last_error: BaseException | None = None
        self._keep_scopes: list[anyio.CancelScope] = []

    async def start(self, group: Spawner, *, wait: bool = True) -> None:
        """Keep the connections open in `group`; with `wait`, until the first one is ready
        (raising ConnectError or AuthError when it cannot be made)."""
        self._group = group
        if wait:
            first = await self._open()  # errors go straight to the caller
            self._add(first)
            group.start_soon(self._keep, first)
            for _ in range(self.size - 1):
                group.start_soon(self._keep, None)
        else:
            for _ in range(self.size):
                group.start_soon(self._keep, None)

    def close(self) -> None:
        """Close every connection; waiting and later calls fail with ClientClosed."""
        self.closed = True
        for scope in self._keep_scopes:
            scope.cancel()
        for connection in list(self.connections):
            connection.close()
        while self._waiting:
            self._waiting.popleft().finish(None, ClientClosed("client closed"))
        self._ready.set()

    def submit(self, call: Call) -> None:
        """Send the call on the least busy connection, or hold it until one is ready."""
        if self.closed:
            call.finish(None, ClientClosed("client closed"))
            return
        connections = self.connections
        if not connections:
            self._waiting.append(call)
            return
        best = connections[0] if len(connections) == 1 else min(connections, key=_in_flight)
        try:
            best.submit(call)
        except (TypeError, ValueError, OverflowError) as exc:  # a value msgspec cannot encode
            call.finish(None, TypeError(f"cannot encode {call.message.get('cmd')}: {exc}"))

    def forget(self, call: Call) -> None:
        """A caller gave up on a call that was never sent: drop it from the waiting line."""
        with contextlib.suppress(ValueError):
            self._waiting.remove(call)

    async def wait_ready(self) -> None:
        """Wait until a connection is open (or the pool closed)."""
        while not self.connections and not self.closed:
            await self._ready.wait()

    async def _open(self) -> Connection:
        """Connect, start the connection's tasks, authenticate."""
        assert self._group is not None
        try:
            with anyio.fail_after(self.connect_timeout):
                stream = await anyio.connect_tcp(self.host, self.port)
        except TimeoutError:
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: timed out") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        _set_nodelay(stream)
        connection = Connection(stream, self._broken, self.on_event)
        await self._group.start(connection.serve)
        if self.token is not None:
            try:
                await self._authenticate(connection)
            except BaseException:
                connection.close()
                raise
        return connection

    async def _authenticate(self, connection: Connection) -> None:
        call = Call({"cmd": AUTH, "token": self.token})
        call.event = anyio.Event()
        connection.submit(call)
        try:
            with anyio.fail_after(self.connect_timeout):
                await call.event.wait()
        except TimeoutError:
            raise ConnectError("the broker did not answer Auth in time") from None
        if call.error is not None:
            raise ConnectError(str(call.error))
        assert call.payload is not None
        try:
            decode_reply(call.payload, AUTH)
        except ServerError as exc:
            raise AuthError(f"authentication failed: {exc.message}") from None

    async def _keep(self, connection: Connection | None) -> None:
        """Keep one connection open for as long as the pool is."""
        scope = anyio.CancelScope()
        self._keep_scopes.append(scope)
        with scope:
            await self._reconnect(connection)

    async def _reconnect(self, connection: Connection | None) -> None:
        low, high = self.backoff
        delay = low
        while not self.closed:
            if connection is None:
                try:
                    connection = await self._open()
                except (ConnectError, OSError) as exc:
                    self.last_error = exc
                    log.debug("%s: %s; retrying in %.2fs", self.name, exc, delay)
                    await anyio.sleep(delay * (0.5 + random.random()))
                    delay = min(high, delay * 2)
                    continue
                self._add(connection)
            delay = low
            await connection.closed.wait()
            connection = None

    def _add(self, connection: Connection) -> None:
        if connection.broken:
            return
        if self.closed:
            connection.close()
            return
        self.connections.append(connection)
        if self.on_ready is not None:
            self.on_ready(connection)
        waiting, self._waiting = self._waiting, deque()
        for call in waiting:
            self.submit(call)
        self._ready.set()

    def _broken(self, connection: Connection, calls: list[Call]) -> None:
        with contextlib.suppress(ValueError):
            self.connections.remove(connection)
        if not self.connections and self._ready.is_set():
            self._ready = anyio.Event()
        for call in calls:
            if call.abandoned:
                continue
            if (not call.sent or call.idempotent) and call.retries < MAX_RETRIES:
                call.retries += 1
                call.sent = False
                self.submit(call)
            else:
                call.finish(None, ConnectionLost("the connection broke before the reply came"))


def _in_flight(connection: Connection) -> int:
    return connection.in_flight


def _set_nodelay(stream: anyio.abc.ByteStream) -> None:
    import socket

    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Deadlines:
    """Times calls out, all of them from one task: a cancel scope per call cost more than the
    rest of a batched add. Calls with the same timeout expire in the order they were made, so
    each timeout has a FIFO line, trimmed of answered calls as new ones join it."""

    def __init__(self) -> None:
        self._lines: dict[float, deque[tuple[float, Call]]] = {}
        self._wake = anyio.Event()
        self._next = math.inf

    def watch(self, call: Call, timeout: float | None) -> None:
        """Fail `call` with Timeout if it has no answer `timeout` seconds from now."""
        if timeout is None or math.isinf(timeout):
            return
        line = self._lines.get(timeout)
        if line is None:
            line = self._lines[timeout] = deque()
        while line and line[0][1].done:
            line.popleft()
        deadline = anyio.current_time() + timeout
        line.append((deadline, call))
        if deadline < self._next:
            self._next = deadline
            self._wake.set()

    async def run(self) -> None:
        """Expire calls as their deadlines pass (run it in a task for the client's life)."""
        while True:
            now = anyio.current_time()
            upcoming = math.inf
            for timeout, line in self._lines.items():
                while line and (line[0][0] <= now or line[0][1].done):
                    _, call = line.popleft()
                    if not call.done:
                        name = call.message.get("cmd")
                        call.finish(None, Timeout(f"{name}: no answer within {timeout}s"))
                if line:
                    upcoming = min(upcoming, line[0][0])
            self._next = upcoming
            self._wake = anyio.Event()
            with anyio.move_on_after(upcoming - now):
                await self._wake.wait()


async def wait_call(
    pool: Pool, call: Call, timeout: float | None, deadlines: Deadlines | None = None
) -> bytes:
    """Submit `call` and wait for its reply; raises its error, or Timeout after `timeout`
    seconds (None: no limit), timed by `deadlines` when given. A caller that gives up leaves
    the connection in step (the late answer is dropped, or given to `on_orphan`)."""
    call.event = anyio.Event()
    pool.submit(call)
    try:
        if deadlines is not None:
            deadlines.watch(call, timeout)
            await call.event.wait()
        else:
            with anyio.fail_after(math.inf if timeout is None else timeout):
                await call.event.wait()
    except TimeoutError:
        _abandon(pool, call)
        name = call.message.get("cmd")
        raise Timeout(f"{name}: no answer within {timeout}s") from None
    except BaseException:
        _abandon(pool, call)
        raise
    if call.error is not None:
        if isinstance(call.error, Timeout):
            call.abandoned = True
            if not call.sent:
                pool.forget(call)
        raise call.error
    assert call.payload is not None
    return call.payload


def _abandon(pool: Pool, call: Call) -> None:
    if call.done:
        if call.payload is not None and call.on_orphan is not None:
            call.on_orphan(call.payload)  # the reply came as the caller gave up
        return
    call.abandoned = True
    if not call.sent:
        pool.forget(call)
