"""Groups: priority within a group, groupMaxSize admission, PULL group limits."""

from __future__ import annotations

import trio

from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push


async def test_group_priority_runs_zero_first(client: FrameClient) -> None:
    late = await push(client, groupId="g", priority=5)
    first = await push(client, groupId="g", priority=0)
    middle = await push(client, groupId="g", priority=2)
    assert await pull_ids(client) == [first, middle, late]


async def test_group_max_size_admission_is_all_or_nothing(client: FrameClient) -> None:
    await push(client, groupId="g", groupMaxSize=2)
    reply = await client.call(
        "PUSHB",
        queue="q",
        jobs=[
            {"data": 1, "groupId": "g", "groupMaxSize": 2},
            {"data": 2, "groupId": "g", "groupMaxSize": 2},
            {"data": 3, "groupId": "other", "groupMaxSize": 2},
        ],
    )
    assert reply["error"] == "jobs[1]: Group g has reached its maximum size of 2"
    assert (await client.call("Count", queue="q"))["count"] == 1
    single = await client.call("PUSH", queue="q", data={}, groupId="g", groupMaxSize=1)
    assert single["error"] == "Group g has reached its maximum size of 1"
    await pull_ids(client)  # started jobs no longer count as pending
    assert await push(client, groupId="g", groupMaxSize=1)


async def test_a_busy_group_does_not_block_other_jobs(client: FrameClient) -> None:
    a1 = await push(client, groupId="a")
    a2 = await push(client, groupId="a")
    plain = await push(client)
    b1 = await push(client, groupId="b")
    one_each = {"concurrency": 1}
    reply = await client.call("PULLB", queue="q", count=10, group=one_each)
    assert [job["id"] for job in reply["jobs"]] == [a1, plain, b1]
    assert (await client.call("PULL", queue="q", group=one_each))["job"] is None
    await client.call("ACK", id=a1)
    assert (await client.call("PULL", queue="q", group=one_each))["job"]["id"] == a2


async def test_a_parked_pull_takes_a_job_when_its_group_frees(
    client: FrameClient, autojump_clock
) -> None:
    first = await push(client, groupId="a")
    second = await push(client, groupId="a")
    await client.call("PULL", queue="q", group={"concurrency": 1})
    await client.send(
        {"cmd": "PULL", "queue": "q", "timeout": 30_000, "group": {"concurrency": 1}, "reqId": "p"}
    )
    await trio.sleep(1)
    start = trio.current_time()
    await client.call("ACK", id=first)
    assert (await client.receive_for("p"))["job"]["id"] == second
    assert trio.current_time() - start < 0.01


async def test_group_rate_limit(client: FrameClient, autojump_clock) -> None:
    ids = [await push(client, groupId="a") for _ in range(3)]
    limit = {"limit": {"max": 2, "duration": 1000}}
    reply = await client.call("PULLB", queue="q", count=10, group=limit)
    assert [job["id"] for job in reply["jobs"]] == ids[:2]
    start = trio.current_time()
    reply = await client.call("PULL", queue="q", timeout=5000, group=limit)
    assert reply["job"]["id"] == ids[2]
    assert 0.99 < trio.current_time() - start < 1.01


async def test_group_option_validation(client: FrameClient) -> None:
    bad = await client.call("PULL", queue="q", group={"concurrency": 0})
    assert bad["error"] == "group.concurrency must be at least 1"
    bad = await client.call("PULL", queue="q", group={"limit": {"max": 1, "duration": 0}})
    assert bad["error"] == "group.limit.duration must be greater than 0"


async def test_a_push_that_names_a_job_already_there_takes_no_group_room(
    client: FrameClient,
) -> None:
    first = await client.call("PUSH", queue="q", data={}, jobId="a", groupId="g", groupMaxSize=1)
    again = await client.call("PUSH", queue="q", data={}, jobId="a", groupId="g", groupMaxSize=1)
    assert again["id"] == first["id"]
    batch = await client.call(
        "PUSHB", queue="q", jobs=[{"data": {}, "customId": "a", "groupId": "g", "groupMaxSize": 1}]
    )  # fmt: skip
    assert batch["ok"] is True, batch


async def test_a_batch_counts_its_own_jobs_against_the_group_cap(client: FrameClient) -> None:
    def item(**fields: object) -> dict[str, object]:
        return {"data": {}, "groupId": "g", "groupMaxSize": 3, **fields}

    jobs = [{"data": {}}, item(), item(), item(), item()]  # the first has no group
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == "jobs[4]: Group g has reached its maximum size of 3"
    assert (await client.call("PUSHB", queue="q", jobs=jobs[:4]))["ok"] is True
    named = await client.call("PUSH", queue="q", data={}, jobId="new", groupId="g", groupMaxSize=3)
    assert named["error"] == "Group g has reached its maximum size of 3"  # a new id takes room


async def test_a_drained_group_has_room_again(client: FrameClient) -> None:
    assert (await client.call("PUSH", queue="q", data={}, groupId="g", groupMaxSize=1))["ok"]
    assert (await client.call("Drain", queue="q"))["count"] == 1
    again = await client.call("PUSH", queue="q", data={}, groupId="g", groupMaxSize=1)
    assert again["ok"] is True


async def test_a_grouped_job_counts_as_priority_zero_against_ungrouped_jobs(
    client: FrameClient,
) -> None:
    low = await push(client, priority=-1)
    grouped_late = await push(client, groupId="g", priority=9)
    grouped_first = await push(client, groupId="g", priority=1)
    high = await push(client, priority=1)
    plain = await push(client)
    ancient = await push(client, timestamp=-1_000_000)  # runs at a negative time: still after
    newest = await push(client, lifo=True)
    grouped_ancient = await push(client, groupId="g", priority=1, timestamp=-1_000_000)
    grouped_newest = await push(client, groupId="g", priority=1, lifo=True)
    # Priority 1 first; then priority 0: LIFO ahead of the rest, the ungrouped by run time,
    # then the grouped ones by their group priority (LIFO first there too); then -1.
    expected = [high, newest, ancient, plain, grouped_newest, grouped_ancient, grouped_first,
                grouped_late, low]  # fmt: skip
    assert await pull_ids(client) == expected


async def test_an_ackb_frees_its_jobs_groups(client: FrameClient) -> None:
    a1, a2 = await push(client, groupId="a"), await push(client, groupId="a")
    b1, b2 = await push(client, groupId="b"), await push(client, groupId="b")
    one_each = {"concurrency": 1}
    reply = await client.call("PULLB", queue="q", count=10, group=one_each)
    assert [job["id"] for job in reply["jobs"]] == [a1, b1]
    assert (await client.call("ACKB", ids=[a1, b1]))["ok"] is True
    reply = await client.call("PULLB", queue="q", count=10, group=one_each)
    assert [job["id"] for job in reply["jobs"]] == [a2, b2]


async def test_a_passed_over_group_spends_no_rate_token(client: FrameClient) -> None:
    await client.call("RateLimit", queue="q", limit=2)
    a1 = await push(client, groupId="a")
    await push(client, groupId="a")
    b1 = await push(client, groupId="b")
    one = {"concurrency": 1}
    assert (await client.call("PULL", queue="q", group=one))["job"]["id"] == a1
    reply = await client.call("PULLB", queue="q", count=5, group=one)
    assert [job["id"] for job in reply["jobs"]] == [b1]
