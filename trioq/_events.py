"""Job events of one queue as an async iterator, over a connection of their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._connection import Call, Connection, Pool
from ._errors import ClientClosed, ServerError, Timeout
from ._wire import command, decode_reply, decode_value

SUBSCRIBE_EVENTS = command("SubscribeEvents")
BUFFER = 10_000  # events held for a slow reader; past it the oldest new ones are dropped


class Event(msgspec.Struct, frozen=True):
    """One job event: `type` is pushed, pulled, progress, completed, failed, retried, delayed,
    stalled or removed; `data` holds what else the broker said (error, progress, delay...)."""

    type: str
    queue: str
    job_id: str
    timestamp: float
    data: dict[str, Any]


class _Frame(msgspec.Struct):
    event: dict[str, Any] = {}


def event_of(payload: bytes) -> Event | None:
    """The Event in a `{type: "event", event: {...}}` frame (None if it has none)."""
    frame = decode_value(payload, _Frame)
    body = dict(frame.event)
    kind = body.pop("eventType", None)
    if not isinstance(kind, str):
        return None
    queue = str(body.pop("queue", ""))
    job_id = str(body.pop("jobId", ""))
    timestamp = float(body.pop("timestamp", 0) or 0) / 1000.0
    return Event(kind, queue, job_id, timestamp, body)


class EventSource(Protocol):
    """What an event stream needs of its client (_client.py's `Client`; named here so this
    module does not import the client that imports it)."""

    timeout: float
    """Seconds a call may take (the subscription waits as long for its confirmation)."""

    async def _start_pool(
        self,
        *,
        size: int,
        name: str,
        on_ready: Callable[[Connection], None] | None = None,
        on_event: Callable[[bytes], None] | None = None,
    ) -> Pool:
        """A new pool to the client's broker, once its first connection is open."""
        ...


class EventStream:
    """`async for event in client.events("emails")`: the queue's job events from now on.

    It subscribes on a connection of its own and subscribes again after a reconnect (events
    in between are missed). Use it as `async with client.events(q) as events:` to close its
    connection as soon as the block ends; otherwise it closes with the client.
    """

    def __init__(self, client: EventSource, queue: str) -> None:
        self._client = client
        self.queue = queue
        self.dropped = 0
        send, receive = anyio.create_memory_object_stream[Event](BUFFER)
        self._send: MemoryObjectSendStream[Event] = send
        self._receive: MemoryObjectReceiveStream[Event] = receive
        self._pool: Pool | None = None
        self.subscribed = anyio.Event()
        self._refused: BaseException | None = None

    async def start(self) -> None:
        """Open the connection and subscribe (waits until the broker confirmed)."""
        if self._pool is not None:
            return
        self._pool = await self._client._start_pool(
            size=1, on_ready=self._subscribe, on_event=self._on_event, name="events"
        )
        with anyio.move_on_after(self._client.timeout):
            await self.subscribed.wait()
        if self._refused is not None or not self.subscribed.is_set():
            await self.aclose()
            raise self._refused or Timeout(f"SubscribeEvents {self.queue}: no answer")

    def _subscribe(self, connection: Connection) -> None:
        def confirmed(call: Call) -> None:
            if call.error is None and call.payload is not None:
                try:
                    decode_reply(call.payload, SUBSCRIBE_EVENTS)
                except ServerError as exc:  # a broker without TCP events
                    self._refused = exc
            self.subscribed.set()

        connection.submit(Call({"cmd": SUBSCRIBE_EVENTS, "queue": self.queue}, callback=confirmed))

    def _on_event(self, payload: bytes) -> None:
        event = event_of(payload)
        if event is None:
            return
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self.dropped += 1

    async def aclose(self) -> None:
        """Stop receiving events."""
        if self._pool is not None:
            self._pool.close()
        self._send.close()
        self._receive.close()

    async def __aenter__(self) -> EventStream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        await self.start()
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def next(self, timeout: float | None = None) -> Event:
        """The next event; trioq.Timeout-free: raises TimeoutError after `timeout` seconds."""
        with anyio.fail_after(math.inf if timeout is None else timeout):
            try:
                return await self.__anext__()
            except StopAsyncIteration:
                raise ClientClosed("event stream closed") from None
