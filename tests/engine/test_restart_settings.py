"""Limits and settings survive a restart (README: "limits survive restarts"): rate limit,
concurrency, stall settings, debounce windows and group limits act the same after it."""

from __future__ import annotations

import logging

import msgspec
import pytest
import trio

from store import Record
from tests.support.app import Broker
from tests.support.engine import pull_ids, push, state_of
from tests.support.stores import StoreFactory

DEFAULT_MAX_ENTRIES = 10_000


async def test_rate_limit_survives_a_restart(store_factory: StoreFactory, autojump_clock) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        assert (await (await connect()).call("RateLimit", queue="q", limit=2))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        for _ in range(4):
            await push(client)
        assert len(await pull_ids(client)) == 2  # 2 a second, as before the restart
        assert await pull_ids(client) == []


async def test_concurrency_limit_survives_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("SetConcurrency", queue="q", limit=2))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        for _ in range(3):
            await push(client)
        assert len(await pull_ids(client)) == 2
        assert await pull_ids(client) == []


async def test_stall_settings_survive_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        config = {"stallInterval": 1000, "maxStalls": 1}
        assert (await client.call("SetStallConfig", queue="q", config=config))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        config = (await client.call("GetStallConfig", queue="q"))["config"]
        assert (config["stallInterval"], config["maxStalls"]) == (1000, 1)
        job_id = await push(client)
        await client.call("PULL", queue="q")
        await trio.sleep(1.001)
        assert await state_of(client, job_id) == "failed"


async def test_a_debounce_window_survives_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        first = await push(client, debounceId="d", debounceTtl=10_000)
        endless = await push(client, debounceId="e")  # no ttl: until the job starts
    await trio.sleep(5)
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, debounceId="d", debounceTtl=10_000) == first
        assert await push(client, debounceId="e") == endless
        await trio.sleep(5.001)
        assert await push(client, debounceId="d", debounceTtl=10_000) != first


async def test_a_groups_running_job_still_counts_after_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    one_each = {"concurrency": 1}
    async with broker.running() as connect:
        client = await connect()
        first = await push(client, groupId="a")
        second = await push(client, groupId="a")
        other = await push(client, groupId="b")
        pulled = await client.call("PULL", queue="q", owner="w", lockTtl=60_000, group=one_each)
        assert pulled["job"]["id"] == first
    async with broker.running() as connect:
        client = await connect()
        reply = await client.call("PULLB", queue="q", count=10, group=one_each)
        assert [job["id"] for job in reply["jobs"]] == [other]  # group a is still busy
        assert (await client.call("ACK", id=first, token=pulled["token"]))["ok"] is True
        assert (await client.call("PULL", queue="q", group=one_each))["job"]["id"] == second


async def test_an_invalid_stored_dlq_setting_is_dropped_with_a_warning(
    store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("SetDlqConfig", queue="q", config={"maxEntries": 5}))["ok"]
    store = broker.open_store()  # as an earlier trioq stored it: unchecked
    body = msgspec.msgpack.encode({"paused": True, "dlqConfig": {"maxEntries": 0}})
    store.commit([], [], sync=False, records=[Record("queue", "q", body)])
    store.close()
    with caplog.at_level(logging.WARNING):
        async with broker.running() as connect:
            client = await connect()
            config = (await client.call("GetDlqConfig", queue="q"))["config"]
            assert config["maxEntries"] == DEFAULT_MAX_ENTRIES  # not 0: the DLQ is not emptied
            assert (await client.call("IsPaused", queue="q"))["paused"] is True  # the rest holds
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("queue q: stored DLQ settings" in text for text in warnings), warnings
    store = broker.open_store()
    (stored,) = store.load_records()
    store.close()
    assert msgspec.msgpack.decode(stored.body)["dlqConfig"] == {}  # the store was corrected


async def test_a_finished_jobs_debounce_window_survives_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        first = await push(client, debounceId="d", debounceTtl=10_000)
        await client.call("PULL", queue="q")
        assert (await client.call("ACK", id=first))["ok"] is True
    await trio.sleep(5)
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, debounceId="d", debounceTtl=10_000) == first  # whatever
        await trio.sleep(5.001)  # became of the job, the window lasts 10 s from the push
        assert await push(client, debounceId="d", debounceTtl=10_000) != first


async def test_a_started_jobs_untimed_debounce_stays_released_after_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        started = await push(client, debounceId="e")
        await client.call("PULL", queue="q", owner="w", lockTtl=60_000)
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, debounceId="e") != started  # it ended when the job started
