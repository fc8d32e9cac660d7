"""Stored group settings and the other commands of the official client that trioq lacked
(dedup keys, queue limits, DLQ stats, flow edits, dashboard views). In-memory connections."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.stores import StoreFactory

Q = {"queue": "q", "groupId": "g"}


async def pulled_ids(client: FrameClient, count: int = 10) -> list[str]:
    reply = await client.call("PULLB", queue="q", count=count)
    return [job["id"] for job in reply["jobs"]]


async def test_group_concurrency_holds_for_pulls_without_group_options(
    client: FrameClient,
) -> None:
    grouped = [await push(client, groupId="g") for _ in range(3)]
    free = await push(client)
    assert (await client.call("SetGroupConcurrency", **Q, concurrency=1))["ok"] is True
    got = await client.call("GetGroupConcurrency", **Q)
    assert got["data"] == {"concurrency": 1}
    assert await pulled_ids(client) == [grouped[0], free]
    active = await client.call("GetGroupActiveCount", **Q)
    assert active["data"]["count"] == 1
    assert (await client.call("GetGroupJobsCount", **Q))["data"]["count"] == 2
    removed = await client.call("RemoveGroupConcurrency", **Q)
    assert removed["data"] == {"removed": True}
    assert await pulled_ids(client) == grouped[1:]


async def test_paused_group_is_passed_over_until_resumed(client: FrameClient) -> None:
    grouped = await push(client, groupId="g")
    other = await push(client, groupId="h")
    assert (await client.call("PauseGroup", **Q))["data"] == {"changed": True}
    assert (await client.call("PauseGroup", **Q))["data"] == {"changed": False}
    assert (await client.call("IsGroupPaused", **Q))["data"] == {"paused": True}
    assert await pulled_ids(client) == [other]
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": "p"})
    assert (await client.call("ResumeGroup", **Q))["data"] == {"changed": True}
    assert (await client.receive_for("p"))["job"]["id"] == grouped


async def test_group_rate_limit_and_a_temporary_block(
    client: FrameClient, autojump_clock: object
) -> None:
    jobs = [await push(client, groupId="g") for _ in range(3)]
    await client.call("SetGroupRateLimit", **Q, max=1, duration=1000)
    limit = await client.call("GetGroupRateLimit", **Q)
    assert limit["data"] == {"limit": {"max": 1, "duration": 1000}}
    assert await pulled_ids(client) == jobs[:1]
    assert (await client.call("GetGroupRateLimitTtl", **Q))["data"]["ttl"] == 1000
    await trio.sleep(1)
    await client.call("RateLimitGroup", **Q, duration=5000)
    assert await pulled_ids(client) == []
    await trio.sleep(5)
    assert await pulled_ids(client) == jobs[1:2]
    assert (await client.call("RemoveGroupRateLimit", **Q))["data"] == {"removed": True}
    assert await pulled_ids(client) == jobs[2:]


async def test_group_commands_check_their_fields(client: FrameClient) -> None:
    missing = await client.call("SetGroupConcurrency", queue="q", concurrency=1)
    assert missing["error"] == "groupId is required"
    bad = await client.call("SetGroupConcurrency", **Q, concurrency=1.5)
    assert bad["error"] == "concurrency must be a positive safe integer"
    bad = await client.call("SetGroupRateLimit", **Q, max=1, duration=0)
    assert bad["error"] == "duration must be a positive safe integer"
    assert (await client.call("GetGroupConcurrency", **Q))["data"] == {"concurrency": None}


async def test_dedup_key_commands(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k")
    found = await client.call("GetDeduplicationJobId", queue="q", deduplicationId="k")
    assert (found["ok"], found["data"]) == (True, {"jobId": first})
    gone = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert (gone["ok"], gone["data"]) == (True, {"count": 1})
    second = await push(client, uniqueKey="k")
    assert second != first
    removed = await client.call("RemoveJobDeduplicationKey", id=second)
    assert (removed["ok"], removed["data"]) == (True, {"removed": True})
    assert (await client.call("RemoveJobDeduplicationKey", id=second))["data"] == {"removed": False}
    assert await push(client, uniqueKey="k") not in (first, second)


async def test_dedup_key_commands_on_keys_and_jobs_that_hold_nothing(client: FrameClient) -> None:
    plain = await push(client)
    nobody = await client.call("GetDeduplicationJobId", queue="q", deduplicationId="k")
    assert nobody["data"] == {"jobId": None}
    none = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert (none["ok"], none["data"]) == (True, {"count": 0})
    for job_id in (plain, "missing"):
        reply = await client.call("RemoveJobDeduplicationKey", id=job_id)
        assert (reply["ok"], reply["data"]) == (True, {"removed": False})


async def test_a_job_does_not_free_a_key_a_newer_job_holds(client: FrameClient) -> None:
    old = await push(client, uniqueKey="k", maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=old)  # failed for good: the key goes to the next push
    newer = await push(client, uniqueKey="k")
    assert (await client.call("RemoveJobDeduplicationKey", id=old))["data"] == {"removed": False}
    assert await push(client, uniqueKey="k") == newer
    gone = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert gone["data"] == {"count": 1}
    old_job = (await client.call("GetJob", id=old))["job"]
    assert old_job["uniqueKey"] == "k"  # not the key's owner: its own record is left alone


async def test_a_removed_dedup_key_stays_free_after_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        by_key = await push(client, uniqueKey="a")
        by_job = await push(client, uniqueKey="b")
        await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="a")
        await client.call("RemoveJobDeduplicationKey", id=by_job)
        for job_id in (by_key, by_job):
            assert (await client.call("GetJob", id=job_id))["job"]["uniqueKey"] is None
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, uniqueKey="a") != by_key
        assert await push(client, uniqueKey="b") != by_job
        for job_id in (by_key, by_job):
            assert (await client.call("GetJob", id=job_id))["job"]["uniqueKey"] is None


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


async def test_move_to_waiting_children_waits_for_children_attached_while_running(
    client: FrameClient,
) -> None:
    parent = await push(client, "parents")
    await client.call("PULL", queue="parents")
    alone = await client.call("MoveToWaitingChildren", id=parent)
    assert alone["data"] == {"moved": False}  # nothing to wait for: it stays active
    child = await push(client, "children", parentId=parent)
    await client.call("UpdateParent", parentId=parent, childId=child)
    moved = await client.call("MoveToWaitingChildren", id=parent)
    assert moved["data"] == {"moved": True}
    job = (await client.call("GetJob", id=parent))["job"]
    assert (job["state"], job["startedAt"]) == ("waiting-children", None)  # no longer started
    await client.call("PULL", queue="children")
    await client.call("ACK", id=child)
    assert await state_of(client, parent) == "waiting"
    idle = await client.call("MoveToWaitingChildren", id=child)
    assert idle["error"] == "Job is not active"


async def test_remove_child_dependency_releases_the_parent(client: FrameClient) -> None:
    jobs = [
        {"id": "p", "queue": "q", "input": {"name": "p", "data": 0, "dependsOn": ["c"],
                                            "childrenIds": ["c"]}},
        {"id": "c", "queue": "k", "input": {"name": "c", "data": 1, "parentId": "p"}},
    ]  # fmt: skip
    assert (await client.call("PUSHF", jobs=jobs))["ok"] is True
    assert await state_of(client, "p") == "waiting-children"
    reply = await client.call("RemoveChildDependency", id="c")
    assert reply["removed"] is True
    assert await state_of(client, "p") == "waiting"
    assert (await client.call("RemoveChildDependency", id="c"))["error"] == "Job c has no parent"
    assert (await client.call("RemoveChildDependency", id="x"))["error"] == "Job not found: x"


async def test_remove_unprocessed_children_releases_the_parent(client: FrameClient) -> None:
    jobs = [
        {"id": "p", "queue": "q", "input": {"name": "p", "data": 0, "dependsOn": ["c", "d"],
                                            "childrenIds": ["c", "d"]}},
        {"id": "c", "queue": "k", "input": {"name": "c", "data": 1, "parentId": "p"}},
        {"id": "d", "queue": "k", "input": {"name": "d", "data": 2, "parentId": "p"}},
    ]  # fmt: skip
    await client.call("PUSHF", jobs=jobs)
    await client.call("PULL", queue="k")  # c starts: it stays
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    assert [await state_of(client, i) for i in ("c", "d")] == ["active", "unknown"]
    await client.call("ACK", id="c")
    assert await state_of(client, "p") == "waiting"


async def test_dashboard_views(client: FrameClient) -> None:
    await push(client)
    overview = (await client.call("DashboardOverview"))["data"]
    assert overview["stats"]["totalPushed"] == 1
    queues = (await client.call("DashboardQueues"))["data"]["queues"]
    assert queues == [{"name": "q", "waiting": 1, "prioritized": 0, "delayed": 0, "active": 0,
                       "dlq": 0, "paused": False}]  # fmt: skip
    one = (await client.call("DashboardQueue", queue="q"))["data"]
    assert (one["name"], one["counts"]["waiting"], one["dlqPreview"]) == ("q", 1, [])


async def test_group_settings_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("SetGroupConcurrency", **Q, concurrency=2)
        await client.call("PauseGroup", **Q)
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("GetGroupConcurrency", **Q))["data"] == {"concurrency": 2}
        assert (await client.call("IsGroupPaused", **Q))["data"] == {"paused": True}


async def test_a_grouped_job_that_fails_frees_one_slot_and_the_limit_still_holds(
    client: FrameClient,
) -> None:
    grouped = [await push(client, groupId="g", maxAttempts=1) for _ in range(3)]
    await client.call("SetGroupConcurrency", **Q, concurrency=1)
    assert await pulled_ids(client) == grouped[:1]
    assert (await client.call("FAIL", id=grouped[0], error="boom"))["ok"] is True
    assert (await client.call("GetGroupActiveCount", **Q))["data"]["count"] == 0
    assert await pulled_ids(client) == grouped[1:2]  # one at a time, as before the failure
