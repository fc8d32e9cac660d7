"""The reply sink: what the engine needs of a client connection, whatever its transport.

Every transport session (TCP, one HTTP request, a WebSocket) implements `ReplySink`. The engine
stages a command's reply into its sink during a pass and tells the sink to send what it staged
once the pass is committed, so no client hears `ok` for a change that is not yet stored.

A client that does not read its replies makes its sink `full`: the actor then runs no more of
its commands but holds them back, in order, and asks the sink to say when it has room again
(`notify_room`). The engine only reads `closed` and `full`; it never writes a field of a sink.
What a connection holds in the engine (jobs it pulled without a lease, its parked long polls,
commands held back) is kept engine-side, keyed by the sink object itself (sinks hash by
identity).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Reply = dict[str, object]


class ReplySink(Protocol):
    """A client connection as the engine sees it."""

    @property
    def closed(self) -> bool:
        """Whether the client has gone: replies to it are dropped, and a parked long poll of
        it is not answered with a job nobody would receive."""
        ...

    @property
    def full(self) -> bool:
        """Whether the client has so many reply bytes unread that no more of its commands may
        run for now (server/unsent.py weighs them)."""
        ...

    def notify_room(self, callback: Callable[[ReplySink], None]) -> None:
        """The actor holds commands of this `full` sink back: call `callback(self)` once, from
        whichever task sees it happen, when the sink is no longer full."""
        ...

    def stage_reply(self, reply: Reply, req_id: object) -> None:
        """Keep `reply` (with `reqId` set to `req_id` unless that is None) until
        `send_staged`."""
        ...

    def send_staged(self) -> None:
        """The pass that staged the replies is committed: send them, in staging order."""
        ...

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies (their pass's commit is in flight while the next pass
        runs and stages anew); calling the result, once that commit is stored, sends them as
        `send_staged` would have."""
        ...
