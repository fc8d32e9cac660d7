"""Reply bytes the broker holds because a client has not read them yet, weighed against a budget
per connection and a total over all connections.

A connection's unsent bytes are its replies and subscribed events, encoded and not yet taken by
its socket: staged in an engine pass, waiting for its writer, or being written. While they are
over the budget (`holds_back`) the connection is not read, and the engine actor runs no more of
its commands: it holds them back (`ReplySink.full`) until the client has read enough. Nothing is
dropped: a reply larger than the whole budget is still sent whole; the budget only stops what
would come after it.

The total counts the unsent bytes of every connection, and the HTTP answers being written. While
it is over its limit, every connection holding more than FLOOR bytes is held back as if over its
own budget. One holding less is not: clients that do not read cannot shut the others out, and
each connection can add at most its next reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

MIB = 1024 * 1024
PER_CONNECTION = 1 * MIB
TOTAL = 64 * MIB
FLOOR = 64 * 1024
"""Unsent bytes a connection may always hold, whatever the total."""


class UnsentBytes:
    """The budgets, and the bytes waiting for a writer on all connections together."""

    __slots__ = ("floor", "limit", "per_connection", "total")

    def __init__(self, per_connection: int = PER_CONNECTION, total: int = TOTAL) -> None:
        self.per_connection = per_connection
        self.limit = total
        self.floor = min(FLOOR, per_connection)
        """No connection holding at most this many bytes is held back."""
        self.total = 0

    def holds_back(self, unsent: int) -> bool:
        """Whether a connection with `unsent` bytes unsent is to wait before any more of its
        commands are read or run."""
        return unsent > self.per_connection or (unsent > self.floor and self.total > self.limit)

    @contextmanager
    def holding(self, size: int) -> Iterator[None]:
        """Count `size` bytes in the total while the block writes them (one HTTP answer)."""
        self.total += size
        try:
            yield
        finally:
            self.total -= size
