"""A TCP client session: the connection's reply sink (`ReplySink`), independent of the socket.

The engine answers by calling `stage_reply`, which stages an encoded frame. Staged frames are
released to the writer only by `send_staged`, which the actor calls after the batch is
committed, so a client never hears `ok` for a change that is not yet stored. Replies the front
door makes itself (Hello, Ping, errors) are sent at once with `reply_now`.

Flow control is twofold. The front door's `InFlight` budget: every command read takes a slot
until its reply is written, whether the engine or the connection answers it. And the bytes of
replies and events not yet taken by the socket (unsent.py): over the budget the session is
`full`, and the engine actor holds its further commands back. The reader waits while either is
exhausted, so a client that does not read its replies stops being read and the replies held for
it stay bounded in number and in bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import trio

from protocol import append_frame

from ..engine.sink import Reply, ReplySink
from .frontdoor import InFlight
from .unsent import UnsentBytes

_ids = itertools.count(1)


class Session:
    """One connection's reply sink: staged and ready reply bytes, and waiting for room."""

    def __init__(
        self,
        outbox: set[ReplySink],
        budget: InFlight,
        *,
        direct_send: Callable[[bytearray], int] | None = None,
        unsent: UnsentBytes | None = None,
    ) -> None:
        self.id = next(_ids)
        self.budget = budget
        self.unsent = unsent or UnsentBytes()
        """The byte budgets, shared with the server's other connections."""
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
        # Unsent bytes besides `_staged`: ready or being written (`_in_writer` of them taken by
        # the writer), and detached for a commit in flight. All count in the shared total.
        self._waiting = 0
        self._in_writer = 0
        self._detached = 0
        self._floor = self.unsent.floor
        self._on_room: Callable[[ReplySink], None] | None = None
        self.full = False
        """Whether the client has more reply bytes unsent than its budgets allow (unsent.py):
        the reader and the engine actor then wait for it to read. An attribute, weighed again
        whenever bytes come or go (`_weigh`), as the actor reads it before every command."""

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (replies to it are dropped)."""
        return self._closed

    def unsent_bytes(self) -> int:
        """Reply and event bytes the client has not been sent yet: staged, detached for a
        commit, waiting for the writer or being written."""
        return len(self._staged) + self._detached + self._waiting

    def notify_room(self, callback: Callable[[ReplySink], None]) -> None:
        """Call `callback(self)` once this session is no longer full (ReplySink.notify_room)."""
        self._on_room = callback
        self._drained()  # it may already be

    def _weigh(self) -> None:
        """Set `full` from the unsent bytes and the shared total now."""
        self.full = self.unsent.holds_back(self.unsent_bytes())

    def close(self) -> None:
        """The connection ended: drop whatever the engine still stages for it, and every byte
        nobody will take (none of this session's counts in the shared total any more)."""
        if not self._closed:
            self._closed = True
            self.unsent.total -= self.unsent_bytes()
            self._staged.clear()
            self._staged_count = 0
            self._waiting = self._in_writer = 0
            self._ready.clear()
            self.full = False

    # -- called by the engine (inside a batch) -------------------------------------------------

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Stage a reply; it reaches the client after the actor calls `send_staged` (dropped
        when the connection has ended)."""
        if self._closed:
            return
        if req_id is not None:
            reply["reqId"] = req_id
        staged = self._staged
        size = len(staged)
        append_frame(staged, reply)
        unsent = len(staged)
        self.unsent.total += unsent - size
        self._staged_count += 1
        self._outbox.add(self)
        if unsent + self._waiting + self._detached > self._floor:  # else it cannot be full
            self._weigh()

    def send_staged(self) -> None:
        """Send staged replies: straight to the socket when it is idle, else via the writer."""
        staged = self._staged
        if not staged:
            return
        count = self._staged_count
        self._staged_count = 0
        self.unsent.total -= len(staged)  # `_send` counts again what the socket does not take
        self._send(staged, count)
        staged.clear()
        if self.full:
            self._weigh()
        if self._capacity_waiting or self._on_room is not None:
            self._drained()

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result sends them (see ReplySink.take_staged)."""
        staged, count = self._staged, self._staged_count
        self._staged = bytearray()
        self._staged_count = 0
        self._detached += len(staged)

        def release() -> None:
            self._detached -= len(staged)
            if staged and not self._closed:  # (closing took its bytes out of the total)
                self.unsent.total -= len(staged)
                self._send(staged, count)
                self._weigh()
                self._drained()

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
        rest = len(data) - sent
        self._waiting += rest
        self.unsent.total += rest
        self._weigh()
        if self._ready_lot:
            self._ready_lot.unpark_all()

    def _drained(self) -> None:
        """Unsent bytes went out (or left the budget): wake a reader waiting for room, and tell
        the engine actor when it holds commands back for a session that is no longer full."""
        if self._capacity_waiting:
            self._capacity_lot.unpark_all()
        callback = self._on_room
        if callback is not None and not self.full:
            self._on_room = None
            callback(self)

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

    def send_events(self, frames: list[bytes]) -> int:
        """Send encoded event frames the client subscribed to, in order, in one write when the
        socket is idle. They answer no request, so they hold no in-flight slot; their bytes
        count as unsent until written. As if sent one at a time, each only while the session
        is not `full`: returns how many were sent (fewer than all: the client is not reading
        them, and its subscriber is to be dropped)."""
        if self._closed:
            return len(frames)  # nobody to send them to, and nothing to drop
        if self.full:
            return 0
        data = bytearray().join(frames)
        sent = 0
        if self._direct_send is not None and not self._writing and not self._ready:
            try:
                sent = self._direct_send(data)
            except OSError:
                sent = 0  # the writer will meet the same error and end the connection
        if sent == len(data):
            return len(frames)
        # The rest waits for the writer, frame by frame while the session has room (a frame
        # the socket took part of is always finished).
        taken = len(frames)
        at = 0
        for index, frame in enumerate(frames):
            end = at + len(frame)
            if end > sent:
                if self.full:
                    taken = index
                    break
                rest = memoryview(frame)[max(sent - at, 0) :]
                self._ready += rest
                self._waiting += len(rest)
                self.unsent.total += len(rest)
                self._weigh()
            at = end
        if self._ready_lot:
            self._ready_lot.unpark_all()
        return taken

    async def wait_capacity(self) -> int:
        """Wait until another command may be read (a slot free and the session not `full`);
        returns how many may."""
        budget = self.budget
        while budget.room() <= 0 or self.full:
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
        self._in_writer = len(data)
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
        """The writer sent `count` replies (and what it took with them): give back their
        in-flight slots and their bytes."""
        self._writing = False
        self.budget.count -= count
        written = self._in_writer
        if written:
            self._in_writer = 0
            self._waiting -= written
            self.unsent.total -= written
            self._weigh()
        # Each lot is checked first: this runs for every reply, and a lot with nobody parked
        # (the usual case) would still cost a call through Trio's KI protection.
        if self._capacity_waiting or self._on_room is not None:
            self._drained()
        if self._flushed_waiting and not self._ready:
            self._flushed_lot.unpark_all()


_SESSION_IS_A_SINK: type[ReplySink] = Session  # mypy checks that Session implements ReplySink
