"""Reply sinks for the front ends that are not raw TCP: one reply (HTTP), or a stream of
replies (WebSocket); and the disconnect rule every connection follows. Like the TCP session
they only send replies after the commit."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable

import attrs
import trio

from ..engine.runtime.actor import Batch, Disconnect, EngineActor
from ..engine.sink import Reply, ReplySink
from .frontdoor import InFlight
from .session import Session
from .unsent import UnsentBytes

DISCONNECT_TIMEOUT_S = 5


def _nothing() -> None:
    """No reply to release."""


class ReplySlot:
    """A reply sink that expects exactly one reply (an HTTP request)."""

    def __init__(self, outbox: set[ReplySink]) -> None:
        self._closed = False
        self.replies: list[Reply] = []
        self._outbox = outbox
        self._answered = trio.Event()

    @property
    def closed(self) -> bool:
        """Whether the request has gone (its client left or it was answered)."""
        return self._closed

    @property
    def full(self) -> bool:
        """Never: a request has one reply, and its connection reads the next request only
        once the answer is written (which counts in the total while it is: http.py)."""
        return False

    def notify_room(self, callback: Callable[[ReplySink], None]) -> None:
        """Never full: there is room now."""
        callback(self)

    def close(self) -> None:
        """Nobody waits for the reply any more."""
        self._closed = True

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Stage the reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self.replies.append(reply)
        self._outbox.add(self)

    def send_staged(self) -> None:
        """The pass is committed: the waiting request may answer."""
        if self.replies:
            self._answered.set()

    def take_staged(self) -> Callable[[], None]:
        """What `send_staged` would do now, to be done once the pass is committed."""
        return self._answered.set if self.replies else _nothing

    async def wait(self) -> Reply:
        """The reply, once committed."""
        await self._answered.wait()
        return self.replies[0]


async def call(actor: EngineActor, command: object) -> Reply:
    """Run one command on the engine and return its committed reply.

    If the caller is cancelled first (its client went away), the slot is closed so a parked
    long poll is not answered with a job nobody will receive."""
    slot = ReplySlot(actor.outbox)
    try:
        await actor.submit(Batch(slot, [command]))
        return await slot.wait()
    finally:
        slot.close()


@attrs.frozen
class Outgoing:
    """One WebSocket message, encoded, waiting to be written."""

    data: bytes
    binary: bool  # MessagePack (else JSON text)
    reply: bool  # a reply, holding an in-flight slot (else an event)


class StreamSession:
    """A reply sink whose replies queue up, encoded, for a writer task (a WebSocket connection).

    Flow control as on TCP: every command read holds an in-flight slot until its reply is
    written, and the bytes of replies and events queued and not yet written count against the
    byte budgets (unsent.py); the reader waits while either is spent, so a client that does not
    read its replies stops being read (instead of its replies piling up, or the connection
    being dropped). Replies are encoded as the engine stages them (`encode`, in the form of
    their request), so what they hold is known in bytes."""

    def __init__(
        self,
        outbox: set[ReplySink],
        budget: InFlight,
        encode: Callable[[Reply], Outgoing],
        unsent: UnsentBytes | None = None,
    ) -> None:
        self._closed = False
        self.budget = budget
        self.unsent = unsent or UnsentBytes()
        """The byte budgets, shared with the server's other connections."""
        self.events_queued = 0
        """Event messages queued and not yet written."""
        self._outbox = outbox
        self._encode = encode
        self._staged: list[Outgoing] = []
        self._staged_bytes = 0
        self._detached = 0  # bytes staged by a pass whose commit is in flight
        self._ready: deque[Outgoing] = deque()
        self._waiting = 0  # bytes ready or being written (counted in the shared total)
        self._ready_lot = trio.lowlevel.ParkingLot()
        self._capacity_lot = trio.lowlevel.ParkingLot()
        self._on_room: Callable[[ReplySink], None] | None = None

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (replies to it are dropped)."""
        return self._closed

    @property
    def full(self) -> bool:
        """Whether the client has more bytes unwritten than its budget allows (unsent.py)."""
        return self.unsent.holds_back(self.unsent_bytes())

    def unsent_bytes(self) -> int:
        """Bytes of replies and events not written yet (staged, detached, queued, writing)."""
        return self._staged_bytes + self._detached + self._waiting

    def notify_room(self, callback: Callable[[ReplySink], None]) -> None:
        """Call `callback(self)` once this session is no longer full (ReplySink.notify_room)."""
        self._on_room = callback
        self._drained()

    def close(self) -> None:
        """The connection ended: drop whatever the engine still stages for it, and what is
        queued for nobody."""
        if not self._closed:
            self._closed = True
            self.unsent.total -= self.unsent_bytes()
            self._staged, self._staged_bytes = [], 0
            self._waiting = 0
            self._ready.clear()

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Stage a reply (called by the engine; dropped when the connection has ended)."""
        if self._closed:
            return
        if req_id is not None:
            reply["reqId"] = req_id
        message = self._encode(reply)
        self._staged.append(message)
        self._staged_bytes += len(message.data)
        self.unsent.total += len(message.data)
        self._outbox.add(self)

    def send_staged(self) -> None:
        """Hand committed replies to the writer."""
        staged, size = self._staged, self._staged_bytes
        self._staged, self._staged_bytes = [], 0
        self._queue(staged, size)

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result hands them to the writer."""
        staged, size = self._staged, self._staged_bytes
        self._staged, self._staged_bytes = [], 0
        self._detached += size

        def release() -> None:
            self._detached -= size
            self._queue(staged, size)

        return release

    def _queue(self, messages: list[Outgoing], size: int) -> None:
        """Hand staged (counted) messages to the writer; for a closed session there is none to
        hand (closing took their bytes out of the total)."""
        if self._closed or not messages:
            return
        self._ready.extend(messages)
        self._waiting += size
        self._ready_lot.unpark_all()
        self._drained()

    def send_events(self, messages: list[bytes], limit: int) -> int:
        """Queue event messages (JSON text) the client subscribed to, in order, for the writer.
        They answer no request, so they hold no in-flight slot; their bytes count until
        written. As if queued one at a time, each only while fewer than `limit` events wait
        and the session is not `full`: returns how many were queued (fewer than all: the
        client is not reading them, and its subscriber is to be dropped)."""
        if self._closed:
            return len(messages)  # nobody to send them to, and nothing to drop
        unsent = self.unsent
        queued: list[Outgoing] = []
        size = 0
        held = self.unsent_bytes()
        for data in messages:
            # `full`, counting what this call queued before (only past the floor can it be)
            if self.events_queued + len(queued) >= limit or (
                held + size > unsent.floor and unsent.holds_back(held + size)
            ):
                break
            queued.append(Outgoing(data, binary=False, reply=False))
            size += len(data)
            unsent.total += len(data)
        self.events_queued += len(queued)
        self._queue(queued, size)
        return len(queued)

    async def wait_capacity(self) -> None:
        """Wait until another command may be read (a free slot, the session not `full`),
        then count it in flight."""
        while self.budget.room() <= 0 or self.full:
            await self._capacity_lot.park()
        self.budget.take()

    async def next_reply(self) -> Outgoing:
        """The next committed reply or event to write (its bytes count until `written`)."""
        while not self._ready:
            await self._ready_lot.park()
        return self._ready.popleft()

    def written(self, message: Outgoing) -> None:
        """A message from `next_reply` was written: its slot (a reply's) and bytes are free."""
        if message.reply:
            self.budget.give()
        else:
            self.events_queued -= 1
        if not self._closed:
            self._waiting -= len(message.data)
            self.unsent.total -= len(message.data)
        self._drained()

    def answered(self) -> None:
        """A reply made by the connection itself (not queued here) was written: its command
        leaves the in-flight count."""
        self.budget.give()
        self._capacity_lot.unpark_all()

    def _drained(self) -> None:
        """Bytes went out (or will never): wake the reader, and tell the engine actor when it
        holds commands back for a session that is no longer full."""
        self._capacity_lot.unpark_all()
        callback = self._on_room
        if callback is not None and not self.full:
            self._on_room = None
            callback(self)


async def disconnect(actor: EngineActor, session: Session | StreamSession) -> None:
    """The disconnect rule every connection follows when it ends: its session is closed (the
    engine drops what it still stages for it), then the engine is told, so it releases what
    the connection held. Shielded, so it happens even during cancellation, but bounded.
    While the stored jobs load there is nothing to tell: no command of the connection has
    reached the engine (they wait for the load in its own task), and the inbox is not read."""
    session.close()
    if not actor.loaded.is_set():
        return
    with trio.move_on_after(DISCONNECT_TIMEOUT_S) as scope:
        scope.shield = True
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await actor.inbox.send(Disconnect(session))  # the engine may be gone


_REPLY_SLOT_IS_A_SINK: type[ReplySink] = ReplySlot  # mypy checks each implements ReplySink
_STREAM_SESSION_IS_A_SINK: type[ReplySink] = StreamSession
