"""Housekeeping between passes: memory that removed jobs leave behind, and large removals.

Removed jobs used to stay referenced by lazily deleted entries (the ready heap, the timer
wheel, retention queues) until a manual CompactMemory. Now each structure counts the stale
entries it is left with, and one whose stale entries pass half its size (and a floor) is
compacted after the pass: O(size) work paid for by at least size/2 removals, so amortised O(1)
per removal. Objects whose last reference a bulk removal drops (a million jobs) are parked in
a graveyard and let go of in slices, so freeing them does not stall a pass either.

A large removal (Drain, Obliterate, Clean, PurgeDlq of many jobs) is now a bulk (bulk.py):
chosen, recorded and removed in slices. What follows is kept for the tombstones an earlier
trioq stored, which a restart still finishes, and for any caller removing more than
`PURGE_SLICE` stored jobs in one pass. Such a removal is a `Purge`. The jobs leave the live
state in the command's own pass (everyone sees them gone at once), and that pass commits a
tombstone record listing their ids: the commit point. The reply goes out after that commit,
like any other. The store rows are then deleted `PURGE_SLICE` at a time, one slice per later
pass, with other connections' commands running in between; the last slice deletes the
tombstone. All or nothing: a broker killed before the tombstone's commit stored none of it
(and sent no reply); one killed after finds the tombstone at restart, skips the listed rows
and finishes deleting them, so no half-drained queue ever comes back.

Memory freed in bulk (many queues forgotten at once, with the jobs that emptied them) stays
in the process, scattered under the C heap's top; `trim_heap` hands it back to the system.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable
from typing import Any

import attrs
import msgspec

from broker.engine.state.changes import ChangeLog
from broker.engine.state.ids import uuid7
from store import Record

PURGE = "purge"
PURGE_SLICE = 5_000
"""Store rows deleted per pass by a large removal (SQLite: about 5 us a row)."""
DROP_SLICE = 20_000
"""Objects let go of per pass from the graveyard (about 1 us each for a job)."""
TRIM_AFTER = 10_000
"""Queues a sweep must forget at once (some 30 MiB with a job each) to trim the heap after."""
MIN_STALE = 1_024
"""Stale entries a structure may keep before it is compacted (small ones never are)."""

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[str]).decode
_purge_numbers = itertools.count()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


MALLOC_TRIM = _malloc_trim()


def trim_heap() -> None:
    """Hand the C heap's free memory back to the system. Measured: 100k queues of one job each,
    emptied and forgotten, left RSS +123 MiB; after the trim (32 ms) +17 MiB."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


def worth_compacting(stale: int, size: int) -> bool:
    """Whether a lazily deleted structure with `stale` of `size` entries should be compacted:
    over half of it is stale and either that is many entries or it is all of them (a queue
    emptied job by job lets go of everything). The work is O(size), at most 2 * stale."""
    return stale * 2 > size and (stale > MIN_STALE or stale >= size)


@attrs.define(slots=True, eq=False)
class Purge:
    """A large removal whose store rows are still being deleted."""

    key: str
    ids: list[str]
    pending: set[str]  # `ids` as a set: a push under one of them ends the purge at once

    @classmethod
    def new(cls, ids: list[str]) -> Purge:
        """A purge of the rows of `ids`."""
        key = f"{uuid7()}-{next(_purge_numbers)}"
        return cls(key, ids, set(ids))

    @classmethod
    def resumed(cls, record: Record) -> Purge:
        """A purge found in the store at restart: finish deleting its rows."""
        ids = _decode(record.body)
        return cls(record.key, ids, set(ids))

    def tombstone(self) -> Record:
        """The stored record listing every id this purge deletes."""
        return Record(PURGE, self.key, _encode(self.ids))

    def next_slice(self, size: int) -> list[str]:
        """Take up to `size` ids still to delete from the store."""
        ids = self.ids
        chunk = ids[-size:]
        del ids[-size:]
        self.pending.difference_update(chunk)
        return chunk


def purged_ids(records: list[Record]) -> set[str]:
    """The ids of every job a stored tombstone lists (skipped when loading the jobs)."""
    ids: set[str] = set()
    for record in records:
        if record.kind == PURGE:
            ids.update(_decode(record.body))
    return ids


class Graveyard:
    """Objects let go of over several passes (their last references, held here)."""

    def __init__(self) -> None:
        # Read by EngineState.housekeeping_due on every pass (a plain list: no Python call).
        self.lots: list[list[Any]] = []

    def bury(self, objects: list[Any]) -> None:
        """Hold `objects` (the caller gives the list up) until dropped in slices."""
        if objects:
            self.lots.append(objects)

    def drop_slice(self, budget: int) -> None:
        """Let go of up to `budget` objects."""
        lots = self.lots
        while lots and budget > 0:
            lot = lots[-1]
            taken = min(budget, len(lot))
            del lot[-taken:]
            budget -= taken
            if not lot:
                lots.pop()


class Upkeep:
    """Housekeeping's own state: what to compact after the pass (`untidy`), objects to let go
    of in slices (`graveyard`), and large removals whose rows are deleted in slices (`purges`,
    through the change log). Slice sizes are passed in by the caller."""

    def __init__(self, changes: ChangeLog) -> None:
        self._changes = changes
        # The containers are emptied in place, never replaced (the actor reads them here).
        self.untidy: set[Any] = set()
        self.graveyard = Graveyard()
        self.purges: list[Purge] = []
        # The recorders, as bound methods: called on hot paths without a second call.
        self.note_untidy = self.untidy.add
        self.tidied = self.untidy.discard
        self.bury = self.graveyard.bury

    def due(self) -> bool:
        """Whether work is left for `run` (the actor then runs passes without sleeping)."""
        return bool(self.purges or self.graveyard.lots or self.untidy)

    def purge_later(self, jobs: list[Any], slice_size: int) -> None:
        """After a bulk removal of `jobs` (already forgotten): let go of them in slices and,
        when there are more than `slice_size` and a store, delete their rows in slices as a
        Purge (its tombstone is committed with this pass)."""
        self.graveyard.bury(jobs)
        changes = self._changes
        if not changes.tracking or len(jobs) <= slice_size:
            return
        ids = [job.id for job in jobs]
        changes.keep_rows(ids)
        purge = Purge.new(ids)
        self.purges.append(purge)
        changes.add_record(purge.tombstone())

    def finish_purges_of(self, job_id: str) -> None:
        """A job is pushed under an id a purge has yet to delete from the store: finish that
        purge in this pass, so its tombstone cannot delete the new job at a restart (the new
        row is written, not deleted: ChangeLog.take_changes)."""
        for purge in [purge for purge in self.purges if job_id in purge.pending]:
            self.advance(purge, len(purge.ids))

    def advance(self, purge: Purge, budget: int) -> int:
        """Delete up to `budget` of a purge's rows; the last slice ends it. Returns rows taken."""
        chunk = purge.next_slice(budget)
        self._changes.delete_rows(chunk)
        if not purge.ids:
            self.purges.remove(purge)
            self._changes.add_record((PURGE, purge.key))
        return len(chunk)

    def run(self, compact_one: Callable[[Any], None], purge_slice: int, drop_slice: int) -> None:
        """One pass's share: compact what removals left mostly stale (with `compact_one`),
        advance the purges by one slice, let go of one slice of the graveyard."""
        untidy = self.untidy
        while untidy:
            compact_one(untidy.pop())
        budget = purge_slice
        while self.purges and budget > 0:
            budget -= self.advance(self.purges[0], budget)
        self.graveyard.drop_slice(drop_slice)

    def freed(self, count: int) -> None:
        """`count` queues were just forgotten at once (a sweep): past TRIM_AFTER, the memory
        freed in bulk is given back."""
        if count >= TRIM_AFTER:
            trim_heap()

    def resume(self, purges: list[Purge]) -> None:
        """Large removals the broker stopped in the middle of go on."""
        self.purges.extend(purges)
