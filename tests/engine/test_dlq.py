"""Per-queue dead-letter settings (SetDlqConfig): caps on failed jobs and auto retries."""

from __future__ import annotations

import msgspec
import trio

from store import Record
from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import fail_for_good, push, state_of
from tests.support.stores import StoreFactory


async def dlq_ids(client: FrameClient, queue: str = "q") -> list[str]:
    return [job["id"] for job in (await client.call("Dlq", queue=queue))["jobs"]]


async def test_defaults_are_reported_and_nothing_is_retried(client: FrameClient, autojump_clock):
    config = (await client.call("GetDlqConfig", queue="q"))["config"]
    assert config == {
        "autoRetry": False, "autoRetryInterval": 3_600_000, "maxAutoRetries": 3,
        "maxAge": 604_800_000, "maxEntries": 10_000,
    }  # fmt: skip
    job_id = await fail_for_good(client)
    await trio.sleep(86_400)
    assert await state_of(client, job_id) == "failed"


async def test_auto_retry_waits_longer_each_time_and_stops_at_the_limit(
    client: FrameClient, autojump_clock
) -> None:
    config = {"autoRetry": True, "autoRetryInterval": 1000, "maxAutoRetries": 2}
    await client.call("SetDlqConfig", queue="q", config=config)
    job_id = await fail_for_good(client)
    await trio.sleep(0.999)
    assert await state_of(client, job_id) == "failed"
    await trio.sleep(0.002)
    assert await state_of(client, job_id) == "waiting"
    assert (await client.call("GetJob", id=job_id))["job"]["attempts"] == 0

    await fail_for_good(client, job_id=job_id)
    await trio.sleep(1.5)  # the second retry waits twice the interval
    assert await state_of(client, job_id) == "failed"
    await trio.sleep(0.6)
    assert await state_of(client, job_id) == "waiting"

    await fail_for_good(client, job_id=job_id)
    await trio.sleep(3600)
    assert await state_of(client, job_id) == "failed"
    assert await dlq_ids(client) == [job_id]


async def test_new_settings_apply_to_jobs_already_failed(client: FrameClient, autojump_clock):
    first = await fail_for_good(client)
    await trio.sleep(10)
    retry_after_a_second = {"autoRetry": True, "autoRetryInterval": 1000}
    await client.call("SetDlqConfig", queue="q", config=retry_after_a_second)
    await trio.sleep(0.001)  # it failed ten seconds ago: due at once
    assert await state_of(client, first) == "waiting"
    assert (await client.call("PULL", queue="q"))["job"]["id"] == first
    await client.call("ACK", id=first)

    second = await fail_for_good(client)
    await client.call("SetDlqConfig", queue="q", config={"autoRetryInterval": 60_000})
    await trio.sleep(2)
    assert await state_of(client, second) == "failed"  # moved later by the new interval
    await client.call("SetDlqConfig", queue="q", config={"autoRetry": False})
    await trio.sleep(3600)
    assert await state_of(client, second) == "failed"


async def test_a_retry_by_hand_is_not_retried_again_by_its_old_timer(
    client: FrameClient, autojump_clock
) -> None:
    retry_after_five_seconds = {"autoRetry": True, "autoRetryInterval": 5000}
    await client.call("SetDlqConfig", queue="q", config=retry_after_five_seconds)
    job_id = await fail_for_good(client)
    assert (await client.call("RetryDlq", queue="q", jobId=job_id))["count"] == 1
    pulled = (await client.call("PULL", queue="q"))["job"]
    assert pulled["id"] == job_id
    await trio.sleep(6)  # the first failure's retry time passes while the job is active
    assert await state_of(client, job_id) == "active"


async def test_max_entries_drops_the_oldest_failures_of_that_queue_only(
    client: FrameClient, autojump_clock
) -> None:
    old, middle, new = [await fail_for_good(client) for _ in range(3)]
    other = await fail_for_good(client, "other")
    await client.call("SetDlqConfig", queue="q", config={"maxEntries": 2})
    assert await dlq_ids(client) == [middle, new]
    assert await state_of(client, old) == "unknown"
    newest = await fail_for_good(client)
    assert await dlq_ids(client) == [new, newest]
    assert await dlq_ids(client, "other") == [other]


async def test_max_age_purges_old_failures_and_null_lifts_it(client: FrameClient, autojump_clock):
    await client.call("SetDlqConfig", queue="q", config={"maxAge": 5000})
    job_id = await fail_for_good(client)
    await trio.sleep(4.9)
    assert await state_of(client, job_id) == "failed"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "unknown"

    await client.call("SetDlqConfig", queue="q", config={"maxAge": None})
    kept = await fail_for_good(client)
    await trio.sleep(3600)
    assert await state_of(client, kept) == "failed"
    assert (await client.call("GetDlqConfig", queue="q"))["config"]["maxAge"] is None


async def test_bad_settings_are_refused_and_change_nothing(client: FrameClient) -> None:
    await client.call("SetDlqConfig", queue="q", config={"maxEntries": 7})
    for config, error in (
        ({"maxEntries": 0}, "config.maxEntries must be at least 1"),
        ({"maxAge": -1}, "config.maxAge"),
        ({"autoRetry": "yes"}, "config.autoRetry must be a boolean"),
        ({"retries": 1}, "unknown config key: retries"),
        ([], "config must be an object"),
    ):
        reply = await client.call("SetDlqConfig", queue="q", config=config)
        assert reply["ok"] is False and error in reply["error"], (config, reply)
    config = (await client.call("GetDlqConfig", queue="q"))["config"]
    assert (config["maxEntries"], config["maxAge"]) == (7, 604_800_000)


async def test_auto_retries_and_caps_survive_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    settings = {"autoRetry": True, "autoRetryInterval": 60_000, "maxAutoRetries": 1}
    async with broker.running() as connect:
        client = await connect()
        await client.call("SetDlqConfig", queue="q", config={**settings, "maxEntries": 1})
        job_id = await fail_for_good(client)
    async with broker.running() as connect:
        client = await connect()
        await trio.sleep(60)
        assert await state_of(client, job_id) == "waiting"
        await fail_for_good(client, job_id=job_id)
    async with broker.running() as connect:
        client = await connect()
        await trio.sleep(3600)  # its one auto retry is spent, and that was stored
        assert await state_of(client, job_id) == "failed"
        newer = await fail_for_good(client)
        assert await dlq_ids(client) == [newer]  # maxEntries 1 still holds


async def test_a_job_past_its_ttl_is_not_auto_retried(client: FrameClient, autojump_clock):
    config = {"autoRetry": True, "autoRetryInterval": 0, "maxAutoRetries": 100_000}
    await client.call("SetDlqConfig", queue="q", config=config)
    job_id = await push(client, maxAttempts=1, ttl=5000)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    await trio.sleep(6)  # its ttl runs out while it runs
    await client.call("FAIL", id=job_id, error="boom")
    await trio.sleep(60)
    assert await state_of(client, job_id) == "failed"  # a retry would only expire again
    assert (await client.call("Metrics"))["metrics"]["totalFailed"] == 1


async def test_after_a_restart_the_caps_still_drop_the_oldest(
    store_factory: StoreFactory, autojump_clock
):
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("SetDlqConfig", queue="q", config={"maxEntries": 1})
        old = await fail_for_good(client)
        newer = await push(client, ttl=1000, delay=60_000)  # its ttl runs out while down
    await trio.sleep(5)
    async with broker.running() as connect:
        client = await connect()
        assert [await state_of(client, i) for i in (old, newer)] == ["unknown", "failed"]


async def test_settings_applied_again_and_again_leave_no_timers_behind(
    client: FrameClient, app, autojump_clock
) -> None:
    settings = {"maxAge": 3_600_000, "autoRetry": False}
    await client.call("SetDlqConfig", queue="q", config=settings)
    await fail_for_good(client)
    wheel = app.actor.engine.state.wheel
    before = len(wheel)
    for _ in range(500):  # a dashboard re-applying the same settings
        await client.call("SetDlqConfig", queue="q", config=settings)
    await client.call("CompactMemory")
    assert len(wheel) <= before + 1


async def test_invalid_settings_stored_by_an_older_broker_are_ignored(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        job_id = await fail_for_good(await connect())
    # Earlier brokers stored DLQ settings unchecked and did not enforce them.
    settings = {"paused": False, "dlqConfig": {"maxEntries": 0, "autoRetry": True}}
    store = broker.open_store()
    store.commit(
        [], [], sync=False, records=[Record("queue", "q", msgspec.msgpack.encode(settings))]
    )
    store.close()
    async with broker.running() as connect:
        client = await connect()
        assert await dlq_ids(client) == [job_id]  # not emptied by maxEntries 0
        config = (await client.call("GetDlqConfig", queue="q"))["config"]
        assert (config["maxEntries"], config["autoRetry"]) == (10_000, False)
    store = broker.open_store()  # and the store was corrected: all defaults, no record
    stored = [r for r in store.load_records() if r.kind == "queue"]
    store.close()
    assert stored == []


async def fail_with(client: FrameClient, error: str, **fields: object) -> str:
    """Push a job to `q`, pull it and FAIL it with `error` (for good with maxAttempts=1)."""
    job_id = await push(client, "q", **fields)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    assert (await client.call("FAIL", id=job_id, error=error))["ok"] is True
    return job_id


async def test_dlq_stats_sort_failures_by_reason(client: FrameClient, autojump_clock) -> None:
    start = (await client.call("Ping"))["data"]["time"]
    await fail_with(client, "boom", maxAttempts=1)
    await fail_with(client, "Worker lost: LOCK EXPIRED", maxAttempts=1)
    await fail_with(client, "STALL detected", maxAttempts=1)
    discarded = await push(client)  # fails with attempts to spare
    await client.call("Discard", id=discarded)
    await push(client, ttl=1000)
    await trio.sleep(2)
    await push(client, timeout=1000, maxAttempts=1)
    await client.call("PULL", queue="q")
    await trio.sleep(2)
    reply = await client.call("GetDlqStats", queue="q")
    assert reply["ok"] is True
    assert reply["data"]["stats"] == {
        "total": 6,
        "byReason": {"explicit_fail": 1, "max_attempts_exceeded": 1, "timeout": 1,
                     "stalled": 2, "ttl_expired": 1, "worker_lost": 0, "unknown": 0},
        "byQueue": {"q": 6},
        "pendingRetry": 0,
        "expired": 0,
        "oldestEntry": start,
        "newestEntry": start + 3000,
    }  # fmt: skip


async def test_dlq_stats_count_retries_that_are_due(client: FrameClient, autojump_clock) -> None:
    config = {"autoRetry": True, "autoRetryInterval": 1000}
    await client.call("SetDlqConfig", queue="q", config=config)
    for _ in range(2):  # past their ttl, they stay in the DLQ when their retry is due
        await push(client, ttl=500)
    await trio.sleep(1)
    await push(client, ttl=500)
    await trio.sleep(0.5)  # the first two failed 1 s ago, the last one just now
    stats = (await client.call("GetDlqStats", queue="q"))["data"]["stats"]
    assert (stats["total"], stats["pendingRetry"]) == (3, 2)


async def test_dlq_stats_of_an_empty_queue_create_no_queue(client: FrameClient) -> None:
    stats = (await client.call("GetDlqStats", queue="nothing"))["data"]["stats"]
    assert (stats["total"], stats["oldestEntry"], stats["newestEntry"]) == (0, None, None)
    assert (await client.call("ListQueues"))["queues"] == []


async def test_remove_dlq_job_removes_only_a_failed_job_of_that_queue(
    client: FrameClient,
) -> None:
    failed = await fail_with(client, "boom", maxAttempts=1)
    waiting = await push(client)
    for queue, job_id in (("q", "ghost"), ("other", failed), ("q", waiting)):
        reply = await client.call("RemoveDlqJob", queue=queue, jobId=job_id)
        assert (reply["ok"], reply["data"]) == (True, {"removed": False})
    assert [await state_of(client, i) for i in (failed, waiting)] == ["failed", "waiting"]
    assert (await client.call("RemoveDlqJob", queue="q", jobId=failed))["data"]["removed"]


async def test_auto_retry_runs_before_the_ttl_and_not_from_the_ttl_on(
    client: FrameClient, autojump_clock
) -> None:
    reply = await client.call(
        "SetDlqConfig", queue="q", config={"autoRetry": True, "autoRetryInterval": 10_000}
    )
    assert reply["ok"] is True
    assert (await client.call("GetDlqConfig", queue="q"))["ok"] is True
    in_time = await fail_with(client, "boom", maxAttempts=1, ttl=60_000)
    at_ttl = await fail_with(client, "boom", maxAttempts=1, ttl=10_000)  # due as it expires
    await trio.sleep(10)
    assert await state_of(client, in_time) == "waiting"
    job = (await client.call("GetJob", id=at_ttl))["job"]
    assert (job["state"], job["failedReason"]) == ("failed", "boom")  # left as it failed


async def test_both_caps_set_at_once_apply_to_the_failures_already_there(
    client: FrameClient, autojump_clock
) -> None:
    ids = [await fail_with(client, "boom", maxAttempts=1) for _ in range(3)]
    config = {"maxEntries": 2, "maxAge": 60_000}
    assert (await client.call("SetDlqConfig", queue="q", config=config))["ok"] is True
    assert await dlq_ids(client) == ids[1:]  # the oldest went; the others are not too old
    await trio.sleep(61)
    assert await dlq_ids(client) == []


async def test_dlq_lists_only_the_failed_jobs_oldest_failure_first(
    client: FrameClient, autojump_clock
) -> None:
    first, second = [await push(client, maxAttempts=1) for _ in range(2)]
    await client.call("PULLB", queue="q", count=2)
    await client.call("FAIL", id=second, error="boom")
    await trio.sleep(1)
    await client.call("FAIL", id=first, error="boom")
    await push(client)
    reply = await client.call("Dlq", queue="q")
    assert (reply["ok"], [job["id"] for job in reply["jobs"]]) == (True, [second, first])


async def test_a_job_retried_from_the_dlq_starts_afresh(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, maxAttempts=2)
    await client.call("PULL", queue="q", owner="w", lockTtl=1000)
    await trio.sleep(1.001)  # the lease ran out: a stall, requeued
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="boom", stack=["at f"])
    failed = (await client.call("GetJob", id=job_id))["job"]
    assert (failed["state"], failed["attempts"], failed["stallCount"]) == ("failed", 2, 1)
    assert (await client.call("RetryDlq", queue="q", jobId=job_id))["count"] == 1
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["state"], job["attempts"], job["stallCount"]) == ("waiting", 0, 0)
    assert (job["completedAt"], job["stacktrace"], job["failedReason"]) == (None, None, None)
