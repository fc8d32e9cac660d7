"""What a component that keeps records in the store offers the actor.

Jobs are rows (`ChangeLog.take_changes`); everything else the broker keeps across a restart
is a record (`store.Record`: a kind, a key, a body): crons, queue settings, webhooks, and the
tombstones of large removals and large commands in progress. Each component that keeps records
implements `StoresRecords`, and `Engine.stored` lists them, so the actor's commit pipeline
(commits.py) and start-up (startup.py) loop over that list and name none of them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from broker.engine.rules.housekeeping import PURGE, Purge
from store import Record

if TYPE_CHECKING:
    from broker.engine.components.bulk import BulkRunner
    from broker.engine.state.engine_state import EngineState

RecordWrites = tuple[list[Record], list[tuple[str, str]]]
"""Records to write, and the (kind, key) of records to delete."""


class StoresRecords(Protocol):
    """A component whose state is stored as records."""

    @property
    def unstored(self) -> Collection[object]:
        """What changed since the last `take_writes`: empty when nothing did.

        One collection for the component's life, changed only in place: the commit pipeline
        reads it once and tests it after every pass. Measured with `python -m
        benchmarks.phase_instructions --sqlite`, a `has_writes()` method per component cost a
        Count 8% more instructions, an attribute read per pass 3%, this 0.4%."""
        ...

    def take_writes(self) -> RecordWrites:
        """What changed since the last call, as records to write and to delete."""
        ...

    def restore(self, records: list[Record], now: float) -> None:
        """Start-up, after the jobs are loaded: rebuild from every stored record (each
        component picks its own kinds)."""
        ...


class WorkInProgress:
    """The records of work cut into slices that a restart resumes: large removals (`Purge`,
    housekeeping.py) and large commands (`BulkRunner`, bulk.py). Both queue their record
    changes in the change log's `records`, so one object stores them."""

    def __init__(self, state: EngineState, bulks: BulkRunner) -> None:
        self.state = state
        self.bulks = bulks
        # Tombstones and bulk records to write or delete (`ChangeLog.take_records` empties it).
        self.unstored = state.changes.records

    def take_writes(self) -> RecordWrites:
        """Tombstones and bulk records to write and to delete since the last commit."""
        return self.state.changes.take_records()

    def restore(self, records: list[Record], now: float) -> None:
        """Removals cut short go on (their rows were skipped at load, see startup.py), and so
        do the large commands that had passed their commit point."""
        self.state.restore_purges([Purge.resumed(r) for r in records if r.kind == PURGE])
        self.bulks.restore(records)
