"""Queue settings as a client sees them: a lifted limit serves parked pulls at once, the
defaults a queue reads before anything is set, and what a restart keeps of each setting."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push
from tests.support.stores import StoreFactory


async def parked_pull_served_by(client: FrameClient, command: str, **fields: object) -> float:
    """Park a PULL on queue q, send `command`, and return how long the pull waited after it."""
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "parked"})
    await trio.sleep(0.1)
    start = trio.current_time()
    assert (await client.call(command, queue="q", **fields))["ok"] is True
    assert (await client.receive_for("parked"))["job"] is not None
    return trio.current_time() - start


async def test_a_lifted_queue_limit_serves_a_parked_pull_at_once(
    client: FrameClient, autojump_clock: object
) -> None:
    await client.call("Pause", queue="q")
    await push(client)
    assert await parked_pull_served_by(client, "Resume") == 0
    await client.call("SetConcurrency", queue="q", limit=1)
    await push(client)
    assert await parked_pull_served_by(client, "SetConcurrency", limit=2) == 0
    await push(client)
    assert await parked_pull_served_by(client, "ClearConcurrency") == 0
    await client.call("RateLimit", queue="q", limit=1)
    await push(client)
    assert len(await pull_ids(client)) == 1  # spends the one start of this second
    await push(client)
    assert await parked_pull_served_by(client, "RateLimitClear") == 0


async def test_a_queue_reads_its_defaults_before_anything_is_set(client: FrameClient) -> None:
    assert (await client.call("IsPaused", queue="never"))["paused"] is False
    config = (await client.call("GetStallConfig", queue="never"))["config"]
    assert config == {"enabled": True, "stallInterval": 0, "maxStalls": 3, "gracePeriod": 0}
    await client.call("SetStallConfig", queue="q", config={"maxStalls": 5})
    await client.call("SetStallConfig", queue="q", config={"stallInterval": 2000})
    config = (await client.call("GetStallConfig", queue="q"))["config"]
    assert config == {"enabled": True, "stallInterval": 2000, "maxStalls": 5, "gracePeriod": 0}
    await client.call("Pause", queue="q")
    await client.call("Resume", queue="q")
    assert (await client.call("IsPaused", queue="q"))["paused"] is False


async def test_a_rate_limit_starts_with_its_full_burst_and_again_after_a_restart(
    store_factory: StoreFactory, autojump_clock: object
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        for _ in range(6):
            await push(client)
        await client.call("RateLimit", queue="q", limit=3)
        assert len(await pull_ids(client)) == 3  # the whole second's worth at once
        await client.call("SetConcurrency", queue="q", limit=5)
        await client.call("Pause", queue="other")
        await client.call("Resume", queue="other")
    async with broker.running() as connect:
        client = await connect()
        assert len(await pull_ids(client)) == 3  # a full burst after the restart too
        assert (await client.call("IsPaused", queue="other"))["paused"] is False
        await client.call("RateLimitClear", queue="q")
    async with broker.running() as connect:
        client = await connect()
        limits = (await client.call("GetQueueLimits", queue="q"))["data"]["limits"]
        assert (limits["rateLimit"], limits["concurrencyLimit"]) == (None, 5)
        await client.call("ClearConcurrency", queue="q")
    async with broker.running() as connect:
        client = await connect()
        limits = (await client.call("GetQueueLimits", queue="q"))["data"]["limits"]
        assert (limits["rateLimit"], limits["concurrencyLimit"]) == (None, None)


async def test_a_pause_survives_a_restart_next_to_other_records(
    store_factory: StoreFactory, autojump_clock: object
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("Cron", name="c", queue="cq", data=1, repeatEvery=60_000)
        await client.call("SetStallConfig", queue="stalls", config={"maxStalls": 9})
    async with broker.running() as connect:
        assert (await (await connect()).call("Pause", queue="q"))["ok"] is True
    async with broker.running() as connect:
        client = await connect()
        reply = await client.call("IsPaused", queue="q")
        assert reply["ok"] is True and reply["paused"] is True
        reply = await client.call("GetStallConfig", queue="stalls")
        assert reply["ok"] is True and reply["config"]["maxStalls"] == 9
        assert len((await client.call("CronList"))["crons"]) == 1


async def test_a_queue_forgotten_with_its_settings_stays_forgotten_after_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        await (await connect()).call("Pause", queue="gone")
    async with broker.running() as connect:
        client = await connect()
        assert "gone" in (await client.call("ListQueues"))["queues"]
        await client.call("Resume", queue="gone")
        assert (await client.call("CompactMemory"))["ok"] is True  # nothing left: forgotten
    async with broker.running() as connect:
        assert "gone" not in (await (await connect()).call("ListQueues"))["queues"]
