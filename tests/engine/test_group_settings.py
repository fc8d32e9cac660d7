"""Group settings as a client sees them: what the getters answer, what a removal reports, the
group counts, when a blocked group may start again, parked pulls served once a limit lifts, the
limits pulls without group options still meet, and the settings a restart keeps."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push
from tests.support.stores import StoreFactory

Q = {"queue": "q", "groupId": "g"}


async def data(client: FrameClient, cmd: str, **fields: object) -> object:
    reply = await client.call(cmd, **fields)
    assert reply["ok"] is True, reply
    return reply["data"]


async def test_nothing_set_reads_as_unset_and_removing_it_reports_no_change(
    client: FrameClient,
) -> None:
    for queue in ("never-used", "q"):
        where = {"queue": queue, "groupId": "g"}
        assert await data(client, "GetGroupConcurrency", **where) == {"concurrency": None}
        assert await data(client, "GetGroupRateLimit", **where) == {"limit": None}
        assert await data(client, "IsGroupPaused", **where) == {"paused": False}
        assert await data(client, "GetGroupRateLimitTtl", **where) == {"ttl": 0}
        assert await data(client, "GetGroupJobsCount", **where) == {"count": 0}
        assert await data(client, "GetGroupActiveCount", **where) == {"count": 0}
        assert await data(client, "GetGroupsJobsCount", queue=queue) == {"count": 0}
        await push(client)  # "q" now exists, without group settings
    assert await data(client, "RemoveGroupConcurrency", **Q) == {"removed": False}
    assert await data(client, "RemoveGroupRateLimit", **Q) == {"removed": False}
    assert await data(client, "ResumeGroup", **Q) == {"changed": False}


async def test_each_group_setting_is_removed_on_its_own(client: FrameClient) -> None:
    for command, fields in (("SetGroupConcurrency", {"concurrency": 2}),
                            ("SetGroupRateLimit", {"max": 3, "duration": 1000}),
                            ("RateLimitGroup", {"duration": 1})):  # fmt: skip
        reply = await client.call(command, **Q, **fields)
        assert reply["ok"] is True and "error" not in reply
    assert await data(client, "PauseGroup", **Q) == {"changed": True}
    assert await data(client, "RemoveGroupConcurrency", **Q) == {"removed": True}
    assert await data(client, "GetGroupConcurrency", **Q) == {"concurrency": None}
    assert await data(client, "GetGroupRateLimit", **Q) == {"limit": {"max": 3, "duration": 1000}}
    assert await data(client, "ResumeGroup", **Q) == {"changed": True}
    assert await data(client, "IsGroupPaused", **Q) == {"paused": False}
    assert await data(client, "GetGroupRateLimit", **Q) == {"limit": {"max": 3, "duration": 1000}}
    assert await data(client, "RemoveGroupRateLimit", **Q) == {"removed": True}
    assert await data(client, "RemoveGroupRateLimit", **Q) == {"removed": False}
    # Settings of another group, or of the same group in another queue, are apart.
    await client.call("SetGroupConcurrency", queue="q", groupId="h", concurrency=1)
    assert await data(client, "GetGroupConcurrency", **Q) == {"concurrency": None}
    assert await data(client, "GetGroupConcurrency", queue="other", groupId="h") == {
        "concurrency": None
    }


async def test_group_counts_follow_the_jobs_of_each_group(client: FrameClient) -> None:
    g = [await push(client, groupId="g") for _ in range(2)]
    await push(client, groupId="h")
    await push(client)
    assert await data(client, "GetGroupJobsCount", **Q) == {"count": 2}
    assert await data(client, "GetGroupsJobsCount", queue="q") == {"count": 3}
    pulled = await client.call("PULL", queue="q")
    assert pulled["job"]["id"] == g[0]
    assert await data(client, "GetGroupJobsCount", **Q) == {"count": 1}
    assert await data(client, "GetGroupActiveCount", **Q) == {"count": 1}
    assert await data(client, "GetGroupActiveCount", queue="q", groupId="h") == {"count": 0}
    assert await data(client, "GetGroupsJobsCount", queue="q") == {"count": 2}


async def test_a_blocked_group_tells_when_it_may_start_again(
    client: FrameClient, autojump_clock: object
) -> None:
    await push(client, groupId="g")
    await client.call("RateLimitGroup", **Q, duration=5000)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 5000}
    await trio.sleep(2)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 3000}
    # A rate window that frees later than the block: the later of the two.
    await client.call("SetGroupRateLimit", **Q, max=1, duration=1000)
    await trio.sleep(3)
    assert (await client.call("PULL", queue="q"))["job"] is not None
    await trio.sleep(0.25)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 750}
    await client.call("RateLimitGroup", **Q, duration=500)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 750}
    await client.call("RateLimitGroup", **Q, duration=2000)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 2000}
    await trio.sleep(2)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 0}


async def test_a_parked_pull_starts_a_job_as_soon_as_its_group_may(
    client: FrameClient, autojump_clock: object
) -> None:
    first, second, third = [await push(client, groupId="g") for _ in range(3)]
    await client.call("SetGroupConcurrency", **Q, concurrency=1)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == first
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "lifted"})
    await trio.sleep(1)
    start = trio.current_time()
    await client.call("RemoveGroupConcurrency", **Q)
    assert (await client.receive_for("lifted"))["job"]["id"] == second
    assert trio.current_time() == start
    await client.call("RateLimitGroup", **Q, duration=4000)
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "blocked"})
    start = trio.current_time()
    assert (await client.receive_for("blocked"))["job"]["id"] == third
    assert trio.current_time() - start == 4


async def test_queue_limits_tell_when_the_rate_limit_lets_the_next_job_start(
    client: FrameClient, autojump_clock: object
) -> None:
    assert await data(client, "GetQueueLimits", queue="unknown") == {
        "limits": {"rateLimit": None, "rateLimitTtl": 0.0, "concurrencyLimit": None,
                   "maxed": False},
    }  # fmt: skip
    await client.call("RateLimit", queue="q", limit=2)
    await client.call("SetConcurrency", queue="q", limit=5)
    limits = (await data(client, "GetQueueLimits", queue="q"))["limits"]  # type: ignore[index]
    assert limits["rateLimitTtl"] == 0.0  # two starts in hand
    for _ in range(3):
        await push(client)
    await client.call("PULL", queue="q")
    await trio.sleep(0.25)
    limits = (await data(client, "GetQueueLimits", queue="q"))["limits"]  # type: ignore[index]
    assert limits["rateLimitTtl"] == 0.0  # one and a half in hand
    await client.call("PULLB", queue="q", count=1)
    await trio.sleep(0.25)  # back to one in hand
    await client.call("PULLB", queue="q", count=1)
    limits = (await data(client, "GetQueueLimits", queue="q"))["limits"]  # type: ignore[index]
    assert limits == {"rateLimit": 2, "rateLimitTtl": 500.0, "concurrencyLimit": 5,
                      "maxed": False}  # fmt: skip
    await trio.sleep(0.2)
    limits = (await data(client, "GetQueueLimits", queue="q"))["limits"]  # type: ignore[index]
    assert limits["rateLimitTtl"] == 300.0
    await trio.sleep(0.3)
    limits = (await data(client, "GetQueueLimits", queue="q"))["limits"]  # type: ignore[index]
    assert limits["rateLimitTtl"] == 0.0


async def test_a_pulls_group_options_and_the_stored_settings_both_hold(
    client: FrameClient, autojump_clock: object
) -> None:
    jobs = [await push(client, groupId="g") for _ in range(3)]
    await client.call("SetGroupConcurrency", **Q, concurrency=5)  # stored, does not bind here
    limited = {"limit": {"max": 1, "duration": 1000}}
    reply = await client.call("PULLB", queue="q", count=3, group=limited)
    assert [job["id"] for job in reply["jobs"]] == jobs[:1]  # the pull's own limit still holds
    await client.call("SetGroupConcurrency", **Q, concurrency=1)
    await trio.sleep(1)
    reply = await client.call("PULLB", queue="q", count=3, group={"concurrency": 3})
    assert reply["jobs"] == []  # the stored concurrency wins over the pull's key


async def test_a_changed_priority_leaves_no_trace_of_the_old_one(client: FrameClient) -> None:
    first = await push(client)
    demoted = await push(client, priority=10)
    await client.call("ChangePriority", id=demoted, priority=-5)
    reply = await client.call("PULLB", queue="q", count=3)
    assert [job["id"] for job in reply["jobs"]] == [first, demoted]


async def test_a_rate_limited_group_with_room_left_may_start_now(
    client: FrameClient, autojump_clock: object
) -> None:
    for _ in range(2):
        await push(client, groupId="g")
    await client.call("SetGroupRateLimit", **Q, max=3, duration=1000)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 0}  # no start yet
    assert (await client.call("PULL", queue="q"))["job"] is not None
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 0}  # 1 of 3 started
    await client.call("RemoveGroupRateLimit", **Q)
    assert await data(client, "GetGroupRateLimitTtl", **Q) == {"ttl": 0}  # no limit at all


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
