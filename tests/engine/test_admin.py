"""Operator commands: pause, drain, clean, the DLQ, limits, settings, statistics."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push, state_of
from tests.support.stores import StoreFactory


async def test_pause_and_resume(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client)
    await client.call("Pause", queue="q")
    assert (await client.call("IsPaused", queue="q"))["paused"] is True
    assert (await client.call("PULL", queue="q"))["job"] is None
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 30_000, "reqId": "parked"})
    await trio.sleep(5)
    await client.call("Resume", queue="q")
    assert (await client.receive_for("parked"))["job"]["id"] == job_id


async def test_drain_obliterate_and_list(client: FrameClient) -> None:
    waiting = await push(client)
    await push(client, delay=60_000)
    active = await push(client, priority=9)
    await client.call("PULL", queue="q")
    assert (await client.call("Drain", queue="q"))["count"] == 2
    assert [await state_of(client, i) for i in (waiting, active)] == ["unknown", "active"]
    await push(client, "other")
    assert (await client.call("ListQueues"))["queues"] == ["other", "q"]
    assert (await client.call("Obliterate", queue="q"))["ok"] is True
    assert await state_of(client, active) == "unknown"
    assert (await client.call("ListQueues"))["queues"] == ["other"]


async def test_clean_by_age_and_state(client: FrameClient, autojump_clock) -> None:
    old = await push(client)
    await trio.sleep(10)
    young = await push(client)
    reply = await client.call("Clean", queue="q", grace=5000)
    assert (reply["count"], reply["ids"]) == (1, [old])
    assert await state_of(client, young) == "waiting"
    await client.call("PULL", queue="q")
    await client.call("ACK", id=young)
    await trio.sleep(10)
    reply = await client.call("Clean", queue="q", grace=5000, state="completed")
    assert reply["ids"] == [young]


async def test_get_jobs_counts_per_priority_and_custom_id(client: FrameClient) -> None:
    first = await push(client, priority=2)
    second = await push(client, priority=2, jobId="mine")
    third = await push(client)
    jobs = (await client.call("GetJobs", queue="q", state="prioritized"))["jobs"]
    assert [job["id"] for job in jobs] == [first, second]
    page = (await client.call("GetJobs", queue="q", limit=1, offset=2))["jobs"]
    assert [job["id"] for job in page] == [third]
    counts = (await client.call("GetCountsPerPriority", queue="q"))["counts"]
    assert counts == {"2": 2, "0": 1}
    assert (await client.call("GetJobByCustomId", customId="mine"))["job"]["id"] == second
    assert (await client.call("GetJobByCustomId", customId="nope"))["error"] == "Job not found"


async def test_dead_letter_queue(client: FrameClient) -> None:
    ids = [await push(client, maxAttempts=1) for _ in range(3)]
    await client.call("PULLB", queue="q", count=3)
    for job_id in ids:
        await client.call("FAIL", id=job_id, error="boom")
    assert [job["id"] for job in (await client.call("Dlq", queue="q"))["jobs"]] == ids
    assert (await client.call("RetryDlq", queue="q", jobId=ids[0]))["count"] == 1
    assert await state_of(client, ids[0]) == "waiting"
    assert (await client.call("PurgeDlq", queue="q"))["count"] == 2
    assert [await state_of(client, i) for i in ids[1:]] == ["unknown", "unknown"]
    await pull_ids(client)
    await client.call("ACK", id=ids[0], result=1)
    assert (await client.call("RetryCompleted", queue="q"))["count"] == 1
    job = (await client.call("GetJob", id=ids[0]))["job"]
    assert (job["state"], job["returnvalue"], job["attempts"]) == ("waiting", None, 0)


async def test_concurrency_limit(client: FrameClient) -> None:
    for _ in range(3):
        await push(client)
    await client.call("SetConcurrency", queue="q", limit=2)
    assert len(await pull_ids(client)) == 2
    assert await pull_ids(client) == []
    await client.call("ClearConcurrency", queue="q")
    assert len(await pull_ids(client)) == 1


async def test_rate_limit(client: FrameClient, autojump_clock) -> None:
    for _ in range(4):
        await push(client)
    await client.call("RateLimit", queue="q", limit=2)
    assert len(await pull_ids(client)) == 2
    start = trio.current_time()
    reply = await client.call("PULL", queue="q", timeout=5000)
    assert reply["job"] is not None
    assert 0.49 < trio.current_time() - start < 0.51  # 2 a second: one every 0.5 s


async def test_stall_config_applies_to_jobs_without_their_own(
    client: FrameClient, autojump_clock
) -> None:
    reply = await client.call(
        "SetStallConfig", queue="q", config={"stallInterval": 1000, "maxStalls": 1}
    )
    assert reply["ok"] is True
    config = (await client.call("GetStallConfig", queue="q"))["config"]
    assert (config["stallInterval"], config["maxStalls"]) == (1000, 1)
    job_id = await push(client)
    await client.call("PULL", queue="q")
    await trio.sleep(1.001)
    assert await state_of(client, job_id) == "failed"
    bad = await client.call("SetStallConfig", queue="q", config={"nope": 1})
    assert bad["error"] == "unknown config key: nope"


async def test_a_disabled_stall_config_checks_no_job(client: FrameClient, autojump_clock) -> None:
    config = {"enabled": False, "stallInterval": 1000, "maxStalls": 1}
    assert (await client.call("SetStallConfig", queue="q", config=config))["ok"] is True
    job_id = await push(client)
    await client.call("PULL", queue="q")
    await trio.sleep(10)
    assert await state_of(client, job_id) == "active"


async def test_a_stall_timeout_of_zero_leaves_the_job_to_its_queue_stall_config(
    client: FrameClient, autojump_clock
) -> None:
    config = {"stallInterval": 1000, "maxStalls": 1}
    await client.call("SetStallConfig", queue="q", config=config)
    job_id = await push(client, stallTimeout=0)  # 0 is none of its own, as for ttl and timeout
    await client.call("PULL", queue="q")
    await trio.sleep(0.999)
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.002)
    assert await state_of(client, job_id) == "failed"


async def test_stats_and_metrics(client: FrameClient) -> None:
    await push(client)
    done = await push(client)
    await client.call("PULLB", queue="q", count=2)
    await client.call("ACK", id=done)
    stats = (await client.call("Stats"))["stats"]
    assert (stats["active"], stats["completed"]) == (1, 1)
    metrics = (await client.call("Metrics"))["metrics"]
    assert (metrics["totalPushed"], metrics["totalPulled"], metrics["totalCompleted"]) == (2, 2, 1)
    assert (await client.call("StorageStatus"))["data"]["diskFull"] is False


async def test_every_pull_from_a_limited_queue_counts_in_the_metrics(client: FrameClient) -> None:
    # A queue with a concurrency limit hands out its jobs one at a time (EngineState.claim).
    await client.call("SetConcurrency", queue="q", limit=5)
    for _ in range(3):
        await push(client)
    for _ in range(3):
        assert (await client.call("PULL", queue="q"))["job"] is not None
    assert (await client.call("Metrics"))["metrics"]["totalPulled"] == 3


async def test_queue_settings_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("Pause", queue="q")
        await client.call("SetConcurrency", queue="q", limit=3)
        await client.call("SetDlqConfig", queue="q", config={"maxEntries": 5})
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("IsPaused", queue="q"))["paused"] is True
        assert (await client.call("GetDlqConfig", queue="q"))["config"]["maxEntries"] == 5


async def test_queue_limits_and_dlq_stats(client: FrameClient) -> None:
    await client.call("SetConcurrency", queue="q", limit=1)
    job_id = await push(client, maxAttempts=1)
    await push(client)
    await client.call("PULL", queue="q")
    limits = (await client.call("GetQueueLimits", queue="q"))["data"]["limits"]
    assert limits == {"rateLimit": None, "rateLimitTtl": 0.0, "concurrencyLimit": 1,
                      "maxed": True}  # fmt: skip
    await client.call("FAIL", id=job_id, error="boom")
    stats = (await client.call("GetDlqStats", queue="q"))["data"]["stats"]
    assert stats["total"] == 1
    assert stats["byReason"]["max_attempts_exceeded"] == 1
    assert stats["oldestEntry"] == stats["newestEntry"]
    assert (await client.call("RemoveDlqJob", queue="q", jobId=job_id))["data"] == {"removed": True}
    assert await state_of(client, job_id) == "unknown"


async def test_a_paused_queues_ready_jobs_are_listed_as_paused(client: FrameClient) -> None:
    waiting = await push(client)
    urgent = await push(client, priority=5)
    grouped = await push(client, groupId="g", priority=2)
    later = await push(client, delay=60_000)
    await client.call("Pause", queue="q")
    listed = (await client.call("GetJobs", queue="q", state="paused"))["jobs"]
    assert sorted((job["id"], job["state"]) for job in listed) == sorted(
        [(waiting, "paused"), (urgent, "paused"), (grouped, "paused")]
    )
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert counts["paused"] == len(listed) == 3
    both = (await client.call("GetJobs", queue="q", state=["paused", "delayed"]))["jobs"]
    assert {(job["id"], job["state"]) for job in both} == {
        (waiting, "paused"), (urgent, "paused"), (grouped, "paused"), (later, "delayed"),
    }  # fmt: skip
    assert (await client.call("GetJobs", queue="q", state="waiting"))["jobs"] == []
    assert await state_of(client, waiting) == "waiting"  # GetState still says waiting
