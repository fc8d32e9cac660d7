"""Sessions for the front ends that are not raw TCP: one reply (HTTP), or a stream of
replies (WebSocket). Like the TCP session they only release replies after the commit."""

from __future__ import annotations

from typing import Any

import trio

from ..engine.actor import Batch, EngineActor

REPLY_BUFFER = 1000


class ReplySlot:
    """A session that expects exactly one reply (an HTTP request)."""

    def __init__(self, outbox: set[Any]) -> None:
        self.closed = False
        self.held: set[str] = set()
        self.replies: list[dict[str, Any]] = []
        self._outbox = outbox
        self._answered = trio.Event()

    def reply(self, reply: dict[str, Any], req_id: Any) -> None:
        """Stage the reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self.replies.append(reply)
        self._outbox.add(self)

    def release(self) -> None:
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
    """A session whose replies queue up for a writer task (a WebSocket connection)."""

    def __init__(self, outbox: set[Any]) -> None:
        self.closed = False
        self.held: set[str] = set()
        self._outbox = outbox
        self._staged: list[dict[str, Any]] = []
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](REPLY_BUFFER)

    def reply(self, reply: dict[str, Any], req_id: Any) -> None:
        """Stage a reply (called by the engine)."""
        if req_id is not None:
            reply["reqId"] = req_id
        self._staged.append(reply)
        self._outbox.add(self)

    def release(self) -> None:
        """Hand committed replies to the writer; a client that reads nothing is cut off."""
        staged, self._staged = self._staged, []
        if self.closed:
            return
        for reply in staged:
            try:
                self.send.send_nowait(reply)
            except (trio.WouldBlock, trio.ClosedResourceError):
                self.closed = True
                self.send.close()
                return
