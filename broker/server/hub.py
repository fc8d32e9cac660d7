"""The read hub: one task reads every idle TCP connection, so a busy turn wakes one task, not one
per connection.

Each connection's own task (tcp.py) still owns it. When the connection is in its usual state
(authenticated, no partial frame held, room in its in-flight budget) its task parks here: its
socket joins the hub's epoll set and the task sleeps. The hub sleeps on that epoll set as one
file descriptor; when any of the sockets is readable, it reads each ready one once and, for a read
of whole frames that are all engine commands within the budget, takes the commands at once
(`Connection.take_now`). Everything taken in one turn goes to the engine as one pass
(`EngineActor.submit_all`). Any other read (a partial frame, a local command such as Ping or
Auth, a full budget, end of stream, a socket error) is handed back to the connection's task,
which handles it exactly as it handles its own reads and later parks again.

Why: measured with a Trio ping-pong over a socket pair on this machine, each task wake cost
about 14 us of CPU against 5.4 us for the same system calls in a plain epoll loop, and under the
producers+workers load trioq woke a reader task about 0.7 times per job and the actor about 0.24
times. Sockets of other streams (memory streams in tests) are never parked: their task reads them.
"""

from __future__ import annotations

import logging
import os
import select
from typing import TYPE_CHECKING, Any, Protocol

import outcome
import trio

if TYPE_CHECKING:
    from ..engine.runtime.actor import Batch, EngineActor
    from .session import Session

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024


class Parked(Protocol):
    """What the hub needs of a connection parked in it (tcp.py's `Connection`; named here so
    the hub does not import the connection that imports it)."""

    session: Session
    """The connection's session (its id names it in a log line)."""

    def take_now(self, chunk: bytes) -> Batch | None:
        """The engine's batch of a chunk the hub read, or None to hand the chunk back."""
        ...


class ReadHub:
    """Reads the parked connections of one TCP server (see the module docstring)."""

    def __init__(self, actor: EngineActor) -> None:
        self.actor = actor
        self._epoll = select.epoll()
        # fd -> (connection, its parked task)
        self._parked: dict[int, tuple[Parked, Any]] = {}
        self._running = False
        self.reads_taken = 0
        """Reads whose commands the hub took without waking their connection."""
        self.reads_handed_back = 0
        """Reads handed back to their connection's task (or socket errors)."""

    @property
    def running(self) -> bool:
        """Whether the hub's task runs (connections may park only then)."""
        return self._running

    def parked(self) -> int:
        """How many connections are parked now."""
        return len(self._parked)

    async def park(self, connection: Parked, fd: int) -> bytes | None:
        """Sleep until the hub hands the connection back: returns the chunk it read and could
        not take (b"" at end of stream), or None when the connection should read for itself
        (the hub stopped); raises BrokenResourceError when the socket failed."""
        self._epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = (connection, trio.lowlevel.current_task())

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._forget(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        result: bytes | None = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def _forget(self, fd: int) -> None:
        if self._parked.pop(fd, None) is not None:
            self._epoll.unregister(fd)

    def _hand_back(self, fd: int, result: outcome.Outcome[Any]) -> None:
        entry = self._parked.get(fd)
        if entry is not None:
            self._forget(fd)
            self.reads_handed_back += 1
            trio.lowlevel.reschedule(entry[1], result)

    async def run(self) -> None:
        """Serve parked connections until cancelled; then hand every one back. It starts once
        the stored jobs are loaded: until then no connection parks, so each reads for itself,
        and one whose command waits for the load holds up no other (a Ping is answered)."""
        epoll_fd = self._epoll.fileno()
        try:
            await self.actor.loaded.wait()
            self._running = True
            while True:
                await trio.lowlevel.wait_readable(epoll_fd)
                batches = self._read_ready()
                if batches:
                    await self.actor.submit_all(batches)
        finally:
            self._running = False
            for fd in list(self._parked):
                self._hand_back(fd, outcome.Value(None))
            self._epoll.close()

    def _read_ready(self) -> list[Batch]:
        """Read each ready parked socket once; returns the batches taken, in read order."""
        batches = []
        parked = self._parked
        # At most one event per parked socket (without a bound, each call would allocate room
        # for a thousand).
        for fd, _events in self._epoll.poll(0, len(parked) or 1):
            entry = parked.get(fd)
            if entry is None:
                continue
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                self._hand_back(fd, outcome.Error(trio.BrokenResourceError(exc)))
                continue
            batch = None
            if chunk:
                try:
                    batch = entry[0].take_now(chunk)
                except Exception:  # a bug: the connection's own task handles the chunk instead
                    log.exception("read hub: connection %s", entry[0].session.id)
            if batch is None:
                self._hand_back(fd, outcome.Value(chunk))
            else:
                batches.append(batch)
        self.reads_taken += len(batches)
        return batches
