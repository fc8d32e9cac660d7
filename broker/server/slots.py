"""Sessions for the front ends that are not raw TCP: one reply (HTTP), or a stream of
replies (WebSocket). Like the TCP session they only release replies after the commit."""

from __future__ import annotations

from collections import deque
from typing import Any

import trio

from ..engine.actor import Batch, EngineActor
from .session import MAX_IN_FLIGHT


class ReplySlot:
    """A session that expects exactly one reply (an HTTP request)."""

    def __init__(self, outbox: set[Any]) -> None:
        self.closed = False
        self.replies: list[dict[str, Any]] = []
        self._outbox = outbox
        self._answered = trio.Event()

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        """Stage the reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self.replies.append(reply)
        self._outbox.add(self)

    def send_staged(self) -> None:
        """The pass is committed: the waiting request may answer."""
        if self.replies:
            self._answered.set()

    async def wait(self) -> dict[str, Any]:
        """The reply, once committed."""
        await self._answered.wait()
        return self.replies[0]


async def call(actor: EngineActor, command: Any) -> dict[str, Any]:
    """Run one command on the engine and return its committed reply.

    If the caller is cancelled first (its client went away), the slot is marked closed so a
    parked long poll is not answered with a job nobody will receive."""
    slot = ReplySlot(actor.outbox)
    try:
        await actor.submit(Batch(slot, [command]))
        return await slot.wait()
    finally:
        slot.closed = True


class StreamSession:
    """A session whose replies queue up for a writer task (a WebSocket connection).

    Flow control is TCP's: at most MAX_IN_FLIGHT commands are with the engine or waiting to be
    written, and the reader waits for room, so a client that does not read its replies stops
    being read (instead of its replies piling up, or the connection being dropped)."""

    def __init__(self, outbox: set[Any]) -> None:
        self.closed = False
        self.in_flight = 0
        self._outbox = outbox
        self._staged: list[dict[str, Any]] = []
        self._ready: deque[dict[str, Any]] = deque()
        self._ready_lot = trio.lowlevel.ParkingLot()
        self._capacity_lot = trio.lowlevel.ParkingLot()

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        """Stage a reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self._staged.append(reply)
        self._outbox.add(self)

    def send_staged(self) -> None:
        """Hand committed replies to the writer."""
        staged, self._staged = self._staged, []
        if self.closed:
            return
        self._ready.extend(staged)
        self._ready_lot.unpark_all()

    async def wait_capacity(self) -> None:
        """Wait until another command may go to the engine, then count it in flight."""
        while self.in_flight >= MAX_IN_FLIGHT:
            await self._capacity_lot.park()
        self.in_flight += 1

    async def next_reply(self) -> dict[str, Any]:
        """The next committed reply to write."""
        while not self._ready:
            await self._ready_lot.park()
        return self._ready.popleft()

    def written(self) -> None:
        """A reply from the engine was written: its command leaves the in-flight count."""
        self.in_flight -= 1
        self._capacity_lot.unpark_all()
