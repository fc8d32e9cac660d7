"""Reply sinks for the front ends that are not raw TCP: one reply (HTTP), or a stream of
replies (WebSocket); and the disconnect rule every connection follows. Like the TCP session
they only send replies after the commit."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable

import trio

from ..engine.actor import Batch, Disconnect, EngineActor
from ..engine.sink import Reply, ReplySink
from .frontdoor import InFlight
from .session import Session

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


class StreamSession:
    """A reply sink whose replies queue up for a writer task (a WebSocket connection).

    Flow control is the front door's `InFlight` budget, as on TCP: every command read holds a
    slot until its reply is written, and the reader waits for room, so a client that does not
    read its replies stops being read (instead of its replies piling up, or the connection
    being dropped)."""

    def __init__(self, outbox: set[ReplySink], budget: InFlight) -> None:
        self._closed = False
        self.budget = budget
        self._outbox = outbox
        self._staged: list[Reply] = []
        self._ready: deque[Reply] = deque()
        self._ready_lot = trio.lowlevel.ParkingLot()
        self._capacity_lot = trio.lowlevel.ParkingLot()

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (replies to it are dropped)."""
        return self._closed

    def close(self) -> None:
        """The connection ended: drop whatever the engine still stages for it."""
        self._closed = True

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Stage a reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self._staged.append(reply)
        self._outbox.add(self)

    def send_staged(self) -> None:
        """Hand committed replies to the writer."""
        staged, self._staged = self._staged, []
        if self._closed:
            return
        self._ready.extend(staged)
        self._ready_lot.unpark_all()

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result hands them to the writer."""
        staged, self._staged = self._staged, []

        def release() -> None:
            if not self._closed:
                self._ready.extend(staged)
                self._ready_lot.unpark_all()

        return release

    async def wait_capacity(self) -> None:
        """Wait until another command may be read, then count it in flight."""
        while self.budget.room() <= 0:
            await self._capacity_lot.park()
        self.budget.take()

    async def next_reply(self) -> Reply:
        """The next committed reply to write."""
        while not self._ready:
            await self._ready_lot.park()
        return self._ready.popleft()

    def written(self) -> None:
        """A reply was written: its command leaves the in-flight count."""
        self.budget.give()
        self._capacity_lot.unpark_all()


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
