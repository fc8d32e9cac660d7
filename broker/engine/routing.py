"""Typed command routing: the table each component fills and the engine dispatches through.

A component registers one handler per command type with `Routes.add`, which checks (for mypy)
that the handler takes that very command type. The engine merges every component's table into
one dict and looks a command's handler up by `type(command)`: one dict lookup per command, no
layer per job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, cast

from broker.engine.sink import ReplySink

Reply = dict[str, object]


class Command(Protocol):
    """What the router needs of any decoded command: its `reqId`, echoed in the reply."""

    @property
    def reqId(self) -> object:  # named as on the wire
        """The client's request id (None when it sent none)."""
        ...


C = TypeVar("C")
Handler = Callable[[ReplySink, C, float], Reply | None]
"""A command handler: (sink, command, now in epoch ms) -> the reply, or None when it answers
later (a parked long poll). It raises EngineError to refuse the command."""
AnyHandler = Callable[[ReplySink, Command, float], Reply | None]
"""A handler of some command type, as the merged table holds it (`Routes.add` checked that
it takes the type it is routed for)."""


class Routes:
    """Command type -> handler, filled by one component (or merged from several)."""

    def __init__(self) -> None:
        self.table: dict[type, AnyHandler] = {}

    def add(self, kind: type[C], handler: Handler[C]) -> None:
        """Route commands of type `kind` to `handler` (at most one handler per type)."""
        if kind in self.table:
            raise ValueError(f"{kind.__name__} is routed twice")
        self.table[kind] = cast(AnyHandler, handler)

    def merge(self, other: Routes) -> None:
        """Take over every route of `other` (a command type routed twice is a bug)."""
        for kind, handler in other.table.items():
            if kind in self.table:
                raise ValueError(f"{kind.__name__} is routed twice")
            self.table[kind] = handler
