"""Start-up (broker/engine/runtime/startup.py): what a load made is frozen out of the cyclic
garbage collector's passes once it succeeded, and a load that fails leaves the collector as it
was."""

from __future__ import annotations

import gc

import pytest

from broker.engine.core import Engine
from broker.engine.runtime import startup
from store import Record, StoreError
from store.memory import MemoryStore
from tests.support.app import EPOCH_MS
from tests.support.jobs import stored_job


class BrokenStore(MemoryStore):
    """A memory store whose records cannot be read (a corrupt or unreadable database)."""

    def load_records(self) -> list[Record]:
        """Fail as a store does when it cannot read."""
        raise StoreError("cannot read records (a test's)")


async def test_a_load_freezes_what_it_made_and_turns_the_collector_back_on() -> None:
    assert gc.isenabled()
    store = MemoryStore()
    store.rows["stored"] = stored_job("stored")
    engine = Engine()
    before = gc.get_freeze_count()
    try:
        assert await startup.frozen_after(startup.load(engine, store, EPOCH_MS, 100)) is True
        assert gc.get_freeze_count() > before and gc.isenabled()
    finally:
        gc.unfreeze()  # as the actor does once the engine stops
    assert "stored" in engine.state.jobs


async def test_a_load_that_fails_freezes_nothing_and_turns_the_collector_back_on() -> None:
    assert gc.isenabled()
    before = gc.get_freeze_count()
    with pytest.raises(StoreError):
        await startup.frozen_after(startup.load(Engine(), BrokenStore(), EPOCH_MS, 100))
    assert gc.get_freeze_count() == before and gc.isenabled()
