"""The commit pipeline: a pass's changes stored in one transaction, and only then its replies.

Three ways a pass is committed, all here:

- **On the loop** (`commit`, then `Fanout.send_replies`): measured here for SQLite, a worker
  thread cost more in hand-off and GIL contention than it won in overlap.
- **On a worker thread** (a store with `commit_in_thread`, PostgreSQL: a commit is a network
  round trip): `launch` starts the pass's commit with its replies and events detached
  (inflight.py) and the actor runs the next pass meanwhile; `settle` waits for it and releases
  them. At most one commit is in flight, so replies go out strictly in commit order and never
  before their commit returned.
  Measured against committing on the loop (`python -m benchmarks.loadgen --compare --modes
  postgres --baseline <main> --baseline <threaded, next pass waiting>`, 5 interleaved runs,
  a 2-core machine at load 12-17): pipelined / on the loop 1.31x PUSH 16x8, 1.42x PULL+ACK,
  1.13x producers+workers, 1.07x sequential PUSH; push-to-start at 500 jobs/s p50 53 ms
  against 311 ms, p99 186 against 933 ms. A thread that only let the loop read meanwhile
  (the next pass waiting for the commit) came out between the two.
- **Withheld in an outage**: an unreachable database (StoreUnavailable) keeps the writes and
  their replies, and `store_withheld` retries every COMMIT_RETRY_S until the store takes them
  (or ha.py cancels the actor on a step-down). No other pass runs meanwhile: writes stay in
  order.

Any other store failure (StoreError, LeaseLost) is raised: the broker stops (fail-stop) with the
pass's replies unsent, so no client was told `ok` for a change that is not stored, and a
restart resumes from the last commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from broker.engine.runtime.fanout import Fanout
from broker.engine.runtime.inflight import InFlightCommit
from broker.engine.runtime.stored import StoresRecords
from broker.engine.state.engine_state import EngineState
from broker.engine.state.records import job_to_row
from store import Store, StoreUnavailable

# The actor's logger, as before the pipeline had a module of its own: log filters keep matching.
log = logging.getLogger("broker.engine.actor")

COMMIT_RETRY_S = 0.2
"""While the database is unreachable, how often a withheld commit is tried again."""

Writes = tuple[Any, ...]
"""A pass's writes as `Store.commit` arguments: rows, deleted ids, sync, records, deletes."""


class CommitPipeline:
    """Stores each pass's writes (job rows and every `StoresRecords`' records) and releases
    the pass's replies and events (`Fanout`) only once they are stored."""

    def __init__(
        self,
        store: Store | None,
        state: EngineState,
        stored: list[StoresRecords],
        fanout: Fanout,
        wake: Callable[[], None],
    ) -> None:
        self.store = store
        self.state = state
        self.stored = stored
        # Each component's `unstored`, read once: the same collections for the engine's life
        # (stored.py), so a pass tests them without an attribute lookup on four classes.
        self._unstored = tuple(component.unstored for component in stored)
        self.fanout = fanout
        self._wake = wake  # a threaded commit returned: wake the actor if it sleeps
        self.threaded = bool(getattr(store, "commit_in_thread", False))
        """Whether passes are committed on a worker thread (`launch`, `settle`)."""
        self.withheld: Writes | None = None
        """A pass's writes the store could not take (StoreUnavailable): its replies wait until
        they are stored (`store_withheld`), and no other pass runs meanwhile."""
        self.in_flight: InFlightCommit | None = None
        """The threaded commit started by `launch` and not yet settled."""

    def take_writes(self) -> Writes | None:
        """The pass's writes as `Store.commit` arguments, or None when there are none."""
        state = self.state
        if not any(self._unstored):
            # Jobs only (a pass of pushes, pulls or acks): no record component is asked for
            # writes that it does not have.
            changes = state.changes
            if not (changes.changed or changes.deleted):
                return None
            jobs, deleted, sync = changes.take_changes()
            return list(map(job_to_row, jobs)), deleted, sync, (), ()  # no comprehension frame
        changed, deleted, sync = state.changes.take_changes()
        records: list[Any] = []
        record_deletes: list[tuple[str, str]] = []
        for component in self.stored:
            more, fewer = component.take_writes()
            records += more
            record_deletes += fewer
        rows = list(map(job_to_row, changed))  # encoded here, where the jobs live
        return rows, deleted, sync, records, record_deletes

    def commit(self) -> None:
        """Store the pass's changes in one transaction, on the loop. An unreachable database
        withholds them (`withheld`, retried by `store_withheld`); other failures are raised."""
        if self.store is None:
            return
        writes = self.take_writes()
        if writes is None:
            return
        rows, deleted, sync, records, record_deletes = writes  # `write`, inline (every pass)
        try:
            self.store.commit(rows, deleted, sync=sync, records=records,
                              record_deletes=record_deletes)  # fmt: skip
        except StoreUnavailable as exc:
            self.withheld = writes
            _outage(exc)

    def commit_or_raise(self) -> None:
        """`commit` without the outage handling (start-up stores what the restart changed
        before anything is served: a failure there stops the start)."""
        writes = self.take_writes()
        if writes is not None:
            self.write(writes)

    def write(self, writes: Writes) -> None:
        """`Store.commit` of `take_writes`'s tuple (also the body of a threaded commit)."""
        assert self.store is not None
        rows, deleted, sync, records, record_deletes = writes
        self.store.commit(rows, deleted, sync=sync, records=records,
                          record_deletes=record_deletes)  # fmt: skip

    async def store_withheld(self) -> None:
        """Retry the withheld writes every COMMIT_RETRY_S until the store takes them. A lost
        lease (LeaseLost) is raised, the replies unsent."""
        withheld = self.withheld
        if withheld is None or self.store is None:
            return
        started = trio.current_time()  # the failed commit was just now: the outage began
        while True:
            await trio.sleep(COMMIT_RETRY_S)
            try:
                if self.threaded:  # a reconnect may wait: not on the loop
                    await trio.to_thread.run_sync(self.write, withheld)
                else:
                    self.write(withheld)
            except StoreUnavailable:
                continue  # the outage was logged once, at its first failure (`_outage`)
            break
        self.withheld = None
        log.info("commits stored again after %.1f s", trio.current_time() - started)

    def launch(self) -> None:
        """Start the pass's commit on a worker thread, its replies and events detached until
        it returns; with nothing to write, release them at once (call `settle` first: the
        previous commit must have been released)."""
        releases, events = self.fanout.detach()
        writes = self.take_writes()
        if writes is None:
            self.fanout.release(releases, events)
            return
        self.in_flight = InFlightCommit(writes, releases, events, self._wake)
        self.in_flight.start(self.write)

    @property
    def returned(self) -> bool:
        """Whether a commit in flight has returned and waits for `settle` to release it."""
        return self.in_flight is not None and self.in_flight.done

    async def settle(self) -> None:
        """Wait for the commit in flight, if any, and release its replies and events. An
        unreachable database withholds them, retrying (`store_withheld`); LeaseLost or a
        StoreError is raised, the replies never released."""
        in_flight = self.in_flight
        if in_flight is None:
            return
        try:
            await in_flight.wait()
        except StoreUnavailable as exc:
            self.withheld = in_flight.writes
            _outage(exc)
            await self.store_withheld()
        self.in_flight = None
        self.fanout.release(in_flight.releases, in_flight.events)


def _outage(exc: StoreUnavailable) -> None:
    """Log an outage's start with its cause (the retries that follow are not logged)."""
    log.warning("cannot commit; replies withheld, retrying: %s", exc)
