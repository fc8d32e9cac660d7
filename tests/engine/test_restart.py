"""Restarts on the durable stores (SQLite and PostgreSQL): every state comes back as the restart
rules say."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio

from broker.clock import Clock
from broker.engine.components.crons import Cron
from broker.engine.core import Engine
from broker.engine.runtime.actor import LOAD_SLICE, Batch, EngineActor
from broker.engine.state.engine_state import EngineState
from broker.node.app import App
from broker.node.config import Config
from protocol.bulk import SLICED_ITEMS
from store import MemoryStore, Record, open_sqlite
from tests.support.actor import RecordingSession, command
from tests.support.app import EPOCH_MS, Broker, memory_connector
from tests.support.engine import push, state_of
from tests.support.stores import StoreFactory


async def test_queued_jobs_come_back_in_order(store_factory: StoreFactory, autojump_clock) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        first = await push(client, data={"n": 1})
        high = await push(client, priority=5)
        later = await push(client, delay=60_000)
        second = await push(client, data={"n": 2})
    async with broker.running() as connect:
        client = await connect()
        assert [await state_of(client, i) for i in (first, high, later, second)] == [
            "waiting", "prioritized", "delayed", "waiting",
        ]  # fmt: skip
        reply = await client.call("PULLB", queue="q", count=10)
        assert [job["id"] for job in reply["jobs"]] == [high, first, second]
        assert reply["jobs"][1]["data"] == {"n": 1}
        await trio.sleep(60)
        assert (await client.call("PULL", queue="q"))["job"]["id"] == later


async def test_delayed_job_due_during_downtime_is_ready(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        job_id = await push(await connect(), delay=5_000)
    await trio.sleep(10)
    async with broker.running() as connect:
        assert await state_of(await connect(), job_id) == "waiting"


async def test_finished_jobs_keep_result_error_and_stack(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        done = await push(client)
        dead = await push(client, maxAttempts=1)
        await client.call("PULLB", queue="q", count=2)
        await client.call("ACK", id=done, result={"r": 1})
        await client.call("FAIL", id=dead, error="boom", stack=["at x"])
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("GetResult", id=done))["result"] == {"r": 1}
        job = (await client.call("GetJob", id=dead))["job"]
        assert (job["state"], job["failedReason"], job["stacktrace"]) == (
            "failed",
            "boom",
            ["at x"],
        )


async def test_dependencies_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        parent = await push(client)
        child = await push(client, dependsOn=[parent])
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, child) == "waiting-children"
        await client.call("PULL", queue="q")
        await client.call("ACK", id=parent)
        assert await state_of(client, child) == "waiting"


async def test_indexes_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        custom = await push(client, jobId="order-7")
        unique = await push(client, uniqueKey="k")
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, jobId="order-7") == custom
        assert await push(client, uniqueKey="k") == unique
        assert (await client.call("Count", queue="q"))["count"] == 2


async def test_unleased_active_job_returns_to_waiting_without_an_attempt(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        await client.call("PULL", queue="q", detach=False)
        detached = await push(client)
        await client.call("PULL", queue="q", detach=True)
    async with broker.running() as connect:
        client = await connect()
        job = (await client.call("GetJob", id=job_id))["job"]
        assert (job["state"], job["attempts"], job["startedAt"]) == ("waiting", 0, None)
        assert await state_of(client, detached) == "active"


async def test_a_repeating_job_started_before_a_crash_adds_its_successor_once(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    store = store_factory()
    async with trio.open_nursery() as nursery:  # a broker that stops without its shutdown
        app = App(broker.config, store=store, clock=broker.clock)
        await nursery.start(app.run)
        client = await memory_connector(app, nursery)()
        job_id = await push(client, repeat={"every": 60_000})
        await client.call("PULL", queue="q")  # held by the connection: its start is not stored
        nursery.cancel_scope.cancel()
    store.close()
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id  # started again
        counts = (await client.call("GetJobCounts", queue="q"))["counts"]
        assert (counts["active"], counts["delayed"]) == (1, 1)  # its successor, made once


async def test_a_job_held_once_then_pulled_detached_stays_active_across_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client, maxAttempts=2, backoff=0)
        await client.call("PULL", queue="q", detach=False)  # held by this connection
        await client.call("FAIL", id=job_id, error="once")  # retried at once: waiting again
        reply = await client.call("PULL", queue="q", detach=True)
        assert reply["job"]["id"] == job_id
    async with broker.running() as connect:
        client = await connect()
        job = (await client.call("GetJob", id=job_id))["job"]
        assert (job["state"], job["attempts"]) == ("active", 1)


async def test_leased_job_keeps_its_lease_across_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        token = (await client.call("PULL", queue="q", owner="w", lockTtl=10_000))["token"]
        other = await push(client)
        other_token = (await client.call("PULL", queue="q", owner="w", lockTtl=10_000))["token"]
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, job_id) == "active"
        assert (await client.call("ACK", id=job_id, token=token))["ok"] is True
        await trio.sleep(11)  # the other lease runs out: requeued as a stall
        job = (await client.call("GetJob", id=other))["job"]
        assert (job["state"], job["stallCount"]) == ("waiting", 1)
        late = await client.call("ACK", id=other, token=other_token)
        assert late["ok"] is False


async def test_retention_caps_are_applied_and_persisted(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory, keep_completed=2)
    async with broker.running() as connect:
        client = await connect()
        ids = [await push(client) for _ in range(4)]
        for job_id in ids:
            await client.call("PULL", queue="q")
            await client.call("ACK", id=job_id)
        assert [await state_of(client, i) for i in ids] == ["unknown"] * 2 + ["completed"] * 2
    store = broker.open_store()
    assert sorted(row.id for row in store.load()) == sorted(ids[2:])
    store.close()


async def test_jobs_completed_and_pushed_out_in_one_batch_are_not_stored(
    store_factory: StoreFactory,
) -> None:
    # Completed by the ACKB and forgotten in the same pass: their rows are deleted, not
    # written as completed (they would come back at the next start).
    broker = Broker(store_factory, keep_completed=2)
    async with broker.running() as connect:
        client = await connect()
        ids = [await push(client) for _ in range(4)]
        assert len((await client.call("PULLB", queue="q", count=4))["jobs"]) == 4
        assert (await client.call("ACKB", ids=ids))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        assert [await state_of(client, i) for i in ids] == ["unknown"] * 2 + ["completed"] * 2
    store = broker.open_store()
    assert sorted(row.id for row in store.load()) == sorted(ids[2:])
    store.close()


async def test_completed_jobs_expire_by_age(store_factory: StoreFactory, autojump_clock) -> None:
    broker = Broker(store_factory, keep_completed_s=60)
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        await client.call("PULL", queue="q")
        await client.call("ACK", id=job_id)
        await trio.sleep(59)
        assert await state_of(client, job_id) == "completed"
        await trio.sleep(2)
        assert await state_of(client, job_id) == "unknown"
    async with broker.running() as connect:
        assert await state_of(await connect(), job_id) == "unknown"


async def test_durable_jobs_are_committed_synchronously(nursery: trio.Nursery) -> None:
    store = MemoryStore()
    app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
    await nursery.start(app.run)
    client = await memory_connector(app, nursery)()
    await push(client)
    assert (store.commits, store.synced_commits) == (1, 0)
    durable = await push(client, durable=True)
    assert (store.commits, store.synced_commits) == (2, 1)
    assert store.rows[durable].state == "waiting"
    app.shutdown()


async def test_logs_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        await client.call("AddLog", id=job_id, message="started", level="info")
        await client.call("AddLog", id=job_id, message="careful", level="warn")
    async with broker.running() as connect:
        data = (await (await connect()).call("GetLogs", id=job_id))["data"]
        assert [(e["message"], e["level"]) for e in data["logs"]] == [
            ("started", "info"),
            ("careful", "warn"),
        ]


async def test_retention_keeps_evicting_in_completion_order_after_a_restart(
    tmp_path: Path, autojump_clock
) -> None:
    path = str(tmp_path / "trioq.db")
    broker = Broker(lambda: open_sqlite(path), keep_completed=2)
    async with broker.running() as connect:
        client = await connect()
        first, second, third = [await push(client) for _ in range(3)]
        await client.call("PULLB", queue="q", count=3)
        for job_id in (third, second, first):  # completed newest first
            await client.call("ACK", id=job_id)
            await trio.sleep(1)
        assert await state_of(client, third) == "unknown"  # the earliest completion went
    async with broker.running() as connect:
        client = await connect()
        fourth = await push(client)
        await client.call("PULL", queue="q")
        await client.call("ACK", id=fourth)
        states = [await state_of(client, job_id) for job_id in (first, second, fourth)]
        assert states == ["completed", "unknown", "completed"]


@pytest.mark.parametrize("pull", [{"owner": "w", "lockTtl": 600_000}, {"detach": True}])
async def test_an_active_job_keeps_its_timeout_and_is_alive_at_the_restart(
    tmp_path: Path, autojump_clock, pull: dict[str, object]
) -> None:
    path = str(tmp_path / "trioq.db")
    broker = Broker(lambda: open_sqlite(path))
    async with broker.running() as connect:
        client = await connect()
        job_id = await push(client, timeout=120_000, maxAttempts=1)
        await client.call("PULL", queue="q", **pull)
    await trio.sleep(60)
    async with broker.running() as connect:
        client = await connect()
        job = (await client.call("GetJob", id=job_id))["job"]
        # Nobody could beat while the broker was down: alive as of the restart.
        assert job["lastHeartbeat"] - job["startedAt"] == 60_000
        await trio.sleep(59.9)  # the timeout runs from its start, not from the restart
        assert await state_of(client, job_id) == "active"
        await trio.sleep(0.2)
        assert await state_of(client, job_id) == "failed"


async def test_a_retried_job_holds_no_untimed_debounce_after_a_restart(
    tmp_path: Path, autojump_clock
) -> None:
    path = str(tmp_path / "trioq.db")
    broker = Broker(lambda: open_sqlite(path))
    async with broker.running() as connect:
        client = await connect()
        first = await push(client, debounceId="d", maxAttempts=3, backoff=60_000)
        await client.call("PULL", queue="q")
        await client.call("FAIL", id=first)  # it started: its untimed debounce ended then
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, first) == "delayed"
        assert await push(client, debounceId="d") != first


async def test_a_job_whose_ttl_ran_out_while_down_is_deleted_from_the_store(
    tmp_path: Path, autojump_clock
) -> None:
    path = str(tmp_path / "trioq.db")
    broker = Broker(lambda: open_sqlite(path))
    async with broker.running() as connect:
        client = await connect()
        expired = await push(client, ttl=1000, removeOnFail=True)
        kept = await push(client)
    await trio.sleep(2)
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, expired) == "unknown"
    store = broker.open_store()
    assert [row.id for row in store.load()] == [kept]
    store.close()


async def test_what_a_restart_changes_is_stored_before_the_first_command() -> None:
    # PostgreSQL keeps each job's state as a column an operator can query: what the restart
    # itself changed must be stored at once, not after some later command.
    store = MemoryStore()
    first = EngineActor(Engine(), Clock(EPOCH_MS), store)
    session = RecordingSession(first.outbox)
    first.inbox.send_nowait(Batch(session, [
        *(command(cmd="PUSH", queue="done", data=1, jobId=job_id) for job_id in ("a", "b")),
        command(cmd="PULLB", queue="done", count=2),
        *(command(cmd="ACK", id=job_id) for job_id in ("a", "b")),
        command(cmd="PUSH", queue="q", data=1, durable=True),
        command(cmd="PULL", queue="q", detach=False),  # held by its connection, no lease
    ]))  # fmt: skip
    first.inbox.close()
    await first.run()
    # An invalid stored DLQ setting, as an earlier trioq stored it, and a cron whose last run
    # (in 2020) was missed while the broker was down.
    body = msgspec.msgpack.encode({"dlqConfig": {"maxEntries": 0}})
    over = Cron(
        "over", "cq", b"1", "0 0 1 1 * 0 2020", None, 0, None, None, None, False, True,
        EPOCH_MS - 1000,
    )  # fmt: skip
    store.commit([], [], sync=False, records=[Record("queue", "d", body), over.to_record()])
    synced = store.synced_commits
    assert sorted(row.state for row in store.rows.values()) == ["active", "completed", "completed"]

    await EngineActor(Engine(EngineState(keep_completed=1)), Clock(EPOCH_MS), store).restore()
    # The held job is waiting again (a durable job: committed synchronously), the completed
    # job past the lower cap is gone, the invalid setting is dropped (all defaults: no
    # record is kept) and the cron deleted.
    assert sorted(row.state for row in store.rows.values()) == ["completed", "waiting"]
    assert store.synced_commits == synced + 1
    assert ("queue", "d") not in store.records
    assert ("cron", "over") not in store.records


async def test_an_actor_started_without_a_restore_restores_itself_first() -> None:
    store, clock = MemoryStore(), Clock(EPOCH_MS)
    first = EngineActor(Engine(), clock, store)
    session = RecordingSession(first.outbox)
    first.inbox.send_nowait(Batch(session, [command(cmd="PUSH", queue="q", data=1, jobId="a")]))
    first.inbox.close()
    await first.run()
    second = EngineActor(Engine(), clock, store)
    second.inbox.send_nowait(Batch(session, [command(cmd="PULL", queue="q")]))
    second.inbox.close()
    await second.run()  # no `restore` called: an engine that did not restore would be empty
    assert session.replies[-1]["job"]["id"] == "a"


class CountingStore(MemoryStore):
    """A memory store that counts the job rows a start-up has read so far."""

    read = 0

    def scan_bodies(self) -> Iterator[bytes]:
        """The stored rows' bodies, counted as they are read."""
        for body in super().scan_bodies():
            self.read += 1
            yield body


async def test_a_long_start_up_lets_other_tasks_run_while_it_reads_the_rows() -> None:
    # The HTTP port is open meanwhile and must answer `/ready` with 503, not hang.
    store = CountingStore()
    first = EngineActor(Engine(), Clock(EPOCH_MS), store)
    jobs = [{"data": n} for n in range(LOAD_SLICE + 1)]
    session = RecordingSession(first.outbox)
    # Batches of SLICED_ITEMS, each one pass (a larger one is a bulk: a closed inbox would
    # stop the actor in its middle, leaving the rest to the restart).
    pushes = [
        command(cmd="PUSHB", queue="q", jobs=jobs[n : n + SLICED_ITEMS])
        for n in range(0, len(jobs), SLICED_ITEMS)
    ]
    first.inbox.send_nowait(Batch(session, pushes))
    first.inbox.close()
    await first.run()
    restoring = trio.lowlevel.current_task()
    yields_at: list[int] = []  # how many rows were read each time the start-up let others run

    class Yields(trio.abc.Instrument):
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if task is restoring:
                yields_at.append(store.read)

    store.read = 0
    instrument = Yields()
    trio.lowlevel.add_instrument(instrument)
    try:
        await EngineActor(Engine(), Clock(EPOCH_MS), store).restore()
    finally:
        trio.lowlevel.remove_instrument(instrument)
    assert LOAD_SLICE in yields_at, yields_at  # mid-scan, not only once every row was read


async def test_a_batch_acked_job_is_still_completed_after_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        ids = [await push(client), await push(client)]
        assert len((await client.call("PULLB", queue="q", count=2))["jobs"]) == 2
        assert (await client.call("ACKB", ids=ids, results=[{"r": 1}, {"r": 2}]))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        assert [await state_of(client, job_id) for job_id in ids] == ["completed"] * 2
        assert (await client.call("GetResult", id=ids[1]))["result"] == {"r": 2}


async def test_what_a_start_up_loaded_is_collectable_again_once_the_engine_stops() -> None:
    # The load freezes what it made (gc.freeze: the collector's passes over a million jobs
    # freed nothing); an engine that stops (a shutdown, a PostgreSQL step-down) must be
    # collectable again, or every active term would leak its whole engine.
    store = MemoryStore()
    filling = EngineActor(Engine(), Clock(EPOCH_MS), store)
    pushes = [command(cmd="PUSHB", queue="q", jobs=[{"data": 1}] * 3)]
    filling.inbox.send_nowait(Batch(RecordingSession(filling.outbox), pushes))
    filling.inbox.close()
    await filling.run()
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    frozen_before = gc.get_freeze_count()
    await actor.restore()
    assert gc.get_freeze_count() > frozen_before  # the loaded objects among them
    state = weakref.ref(actor.engine.state)
    actor.inbox.close()
    await actor.run()
    assert gc.get_freeze_count() == 0
    del actor
    gc.collect()
    assert state() is None  # the engine's state (in cycles with its components) was freed


async def test_what_a_restart_changes_is_stored(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        job_id = await push(await connect(), ttl=1000, delay=60_000)
    await trio.sleep(5)
    async with broker.running() as connect:
        assert await state_of(await connect(), job_id) == "failed"
    store = broker.open_store()  # the store agrees, not just memory
    assert [row.state for row in store.load() if row.id == job_id] == ["failed"]
    store.close()
