"""A pass's commit in flight on a worker thread, with the replies and events that wait for it.

With a store that opts in (`commit_in_thread`), the actor hands a pass's writes to a worker
thread and runs the next pass meanwhile (EngineActor._serve_pipelined). What the committing
pass staged for its clients is detached into an InFlightCommit, so the next pass stages anew,
and is released only once the commit has returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import outcome
import trio


class InFlightCommit:
    """One pass's writes being committed on a worker thread, and what waits for the commit."""

    def __init__(
        self,
        writes: tuple[Any, ...],
        releases: list[Callable[[], None]],
        events: list[Any],
        wake: Callable[[], None],
    ) -> None:
        self.writes = writes
        self.releases = releases  # each sends one session's replies of the pass
        self.events = events  # the pass's job events, published once it is stored
        self.result: outcome.Outcome[None] | None = None
        self._stored = trio.Event()
        self._wake = wake

    def start(self, write: Callable[[tuple[Any, ...]], None]) -> None:
        """Run `write(self.writes)` on a worker thread; `wake` is called on the loop when it
        returns. `start_thread_soon` rather than `trio.to_thread`: the actor does not wait in
        a task of its own for the thread, it runs the next pass meanwhile."""
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[None]) -> None:  # on the worker thread
            with contextlib.suppress(trio.RunFinishedError):  # the broker has stopped
                token.run_sync_soon(self._finished, result)

        trio.lowlevel.start_thread_soon(partial(write, self.writes), deliver)

    def _finished(self, result: outcome.Outcome[None]) -> None:
        self.result = result
        self._stored.set()
        self._wake()

    @property
    def done(self) -> bool:
        """Whether the commit has returned (stored or failed)."""
        return self.result is not None

    async def wait(self) -> None:
        """Wait until the commit returns; raise what the store raised."""
        await self._stored.wait()
        assert self.result is not None
        self.result.unwrap()
