"""A TCP client session: the connection's reply sink (`ReplySink`), independent of the socket.

The engine answers by calling `stage_reply`, which stages an encoded frame. Staged frames are
released to the writer only by `send_staged`, which the actor calls after the batch is
committed, so a client never hears `ok` for a change that is not yet stored. Replies the front
door makes itself (Hello, Ping, errors) are sent at once with `reply_now`.

Flow control is the front door's `InFlight` budget: every command read takes a slot until its
reply is written, whether the engine or the connection answers it; the reader waits while it is
full, so a client that does not read its replies stops being read and the replies held for it
stay bounded.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import trio

from protocol import append_frame

from ..engine.sink import Reply, ReplySink
from .frontdoor import InFlight

_ids = itertools.count(1)


class Session:
    """One connection's reply sink: staged and ready reply bytes, and waiting for room."""

    def __init__(
        self,
        outbox: set[ReplySink],
        budget: InFlight,
        *,
        direct_send: Callable[[bytearray], int] | None = None,
    ) -> None:
        self.id = next(_ids)
        self.budget = budget
        self._outbox = outbox
        # A non-blocking send on the connection's socket, used when no write is in progress: the
        # common reply then goes out straight from the actor, saving a hop through the writer.
        self._direct_send = direct_send
        self._closed = False
        self._staged = bytearray()
        self._staged_count = 0
        self._ready = bytearray()
        self._ready_count = 0
        self._ready_lot = trio.lowlevel.ParkingLot()
        self._capacity_lot = trio.lowlevel.ParkingLot()
        self._flushed_lot = trio.lowlevel.ParkingLot()
        # How many tasks wait in the capacity and flushed lots: `written` runs for every reply
        # write and reads these ints (a ParkingLot's truth test is a Python call).
        self._capacity_waiting = 0
        self._flushed_waiting = 0
        self._writing = False

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (replies to it are dropped)."""
        return self._closed

    def close(self) -> None:
        """The connection ended: drop whatever the engine still stages for it."""
        self._closed = True

    # -- called by the engine (inside a batch) -------------------------------------------------

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Stage a reply; it reaches the client after the actor calls `send_staged`."""
        if req_id is not None:
            reply["reqId"] = req_id
        append_frame(self._staged, reply)
        self._staged_count += 1
        self._outbox.add(self)

    def send_staged(self) -> None:
        """Send staged replies: straight to the socket when it is idle, else via the writer."""
        staged = self._staged
        if not staged:
            return
        count = self._staged_count
        self._staged_count = 0
        if self._closed:  # nobody to tell; the socket may already be gone
            staged.clear()
            return
        self._send(staged, count)
        staged.clear()

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result sends them (see ReplySink.take_staged)."""
        staged, count = self._staged, self._staged_count
        self._staged = bytearray()
        self._staged_count = 0

        def release() -> None:
            if staged and not self._closed:
                self._send(staged, count)

        return release

    def _send(self, data: bytearray, count: int) -> None:
        sent = 0
        if self._direct_send is not None and not self._writing and not self._ready:
            try:
                sent = self._direct_send(data)
            except OSError:
                sent = 0  # the writer will meet the same error and end the connection
        if sent == len(data):  # `written(count)`, inline for the usual reply: nobody waits
            if self._capacity_waiting or self._flushed_waiting:
                self.written(count)
            else:
                self._writing = False
                self.budget.count -= count
            return
        self._ready += memoryview(data)[sent:]
        self._ready_count += count
        if self._ready_lot:
            self._ready_lot.unpark_all()

    # -- called by the connection ---------------------------------------------------------------

    def reply_now(self, reply: Reply, req_id: object) -> None:
        """Send a reply the front door made (no engine, nothing to commit). It takes an in-flight
        slot like any reply, so unread local replies also stop the reader."""
        if req_id is not None:
            reply["reqId"] = req_id
        data = bytearray()
        append_frame(data, reply)
        self.budget.take()
        self._send(data, 1)

    def send_event(self, message: Reply) -> None:
        """Send an event frame the client subscribed to. It answers no request, so it holds no
        in-flight slot; the subscriber bounds its own backlog with `unsent_bytes`."""
        data = bytearray()
        append_frame(data, message)
        self._send(data, 0)

    def unsent_bytes(self) -> int:
        """Reply bytes waiting for the writer (the client is not reading them yet)."""
        return len(self._ready)

    async def wait_capacity(self) -> int:
        """Wait until another command may be read; returns how many may."""
        budget = self.budget
        while budget.room() <= 0:
            self._capacity_waiting += 1
            try:
                await self._capacity_lot.park()
            finally:
                self._capacity_waiting -= 1
        return budget.room()

    async def wait_output(self) -> tuple[bytes, int]:
        """Wait for reply bytes; returns them with the number of replies among them."""
        while not self._ready:
            await self._ready_lot.park()
        self._writing = True
        data = bytes(self._ready)
        count = self._ready_count
        self._ready.clear()
        self._ready_count = 0
        return data, count

    async def wait_flushed(self) -> None:
        """Wait until every command read has been answered and written."""
        while self._ready or self._writing or self.budget.count:
            self._flushed_waiting += 1
            try:
                await self._flushed_lot.park()
            finally:
                self._flushed_waiting -= 1

    def written(self, count: int) -> None:
        """The writer sent `count` replies: give back their in-flight slots."""
        self._writing = False
        # Each lot is checked first: this runs for every reply, and a lot with nobody parked
        # (the usual case) would still cost a call through Trio's KI protection.
        if count:
            self.budget.count -= count
            if self._capacity_waiting:
                self._capacity_lot.unpark_all()
        if self._flushed_waiting and not self._ready:
            self._flushed_lot.unpark_all()


_SESSION_IS_A_SINK: type[ReplySink] = Session  # mypy checks that Session implements ReplySink
