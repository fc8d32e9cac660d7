"""Start-up: the engine rebuilt from what the store holds, before it serves.

`load` reads the stored job rows and records into the engine (the jobs, then every
`StoresRecords` of `Engine.stored`, in that list's order), `frozen_after` keeps the cyclic
garbage collector off meanwhile. The actor runs them as its first step (`EngineActor.restore`)
while the ports are open, then commits what the restart itself changed: the load checkpoints
every few thousand rows, so Ping, `/health` and `/ready` (503) answer meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable

import trio

from broker.engine.core import Engine
from broker.engine.rules.housekeeping import purged_ids
from broker.engine.state.model import Job
from broker.engine.state.records import RowLoader
from store import Store


async def load(engine: Engine, store: Store, now: float, slice_rows: int) -> None:
    """Rebuild `engine` from `store`: the job rows, then every `StoresRecords` of
    `Engine.stored` from the records (after the jobs: settings may apply to failed jobs).

    Rows are decoded as they are read (never all held at once, which doubled the start-up's
    peak memory), into the memory layout of jobs pushed live (RowLoader), with a checkpoint
    every `slice_rows` rows. Rows a stored tombstone lists (a large removal cut short) are
    skipped and that removal resumes.
    """
    records = store.load_records()
    skipped = purged_ids(records)
    jobs: list[Job] = []
    held: set[str] = set()
    load_row = RowLoader().load
    for n, body in enumerate(store.scan_bodies(), 1):
        if n % slice_rows == 0:
            await trio.lowlevel.checkpoint()
        job, was_held = load_row(body)
        if skipped and job.id in skipped:
            continue
        jobs.append(job)
        if was_held:
            held.add(job.id)
    for _ in engine.state.restore(jobs, held, now):
        await trio.lowlevel.checkpoint()
    del jobs
    for component in engine.stored:
        component.restore(records, now)


async def frozen_after(loading: Awaitable[None]) -> bool:
    """Await `loading` with the cyclic garbage collector off, then freeze what it made
    (`gc.freeze`); returns whether it froze (the caller unfreezes once the engine stops).

    Every object a load makes lives on, and the collector's passes over them (20 for a million
    jobs, 0.6 to 1 s here, or one as long once it is on again) freed nothing. Restored jobs are
    freed as any job is, when the last reference goes (jobs form no reference cycles).
    """
    collecting = gc.isenabled()
    gc.disable()
    frozen = False
    try:
        await loading
        frozen = collecting
    finally:
        if frozen:
            gc.freeze()
        if collecting:
            gc.enable()
    return frozen
