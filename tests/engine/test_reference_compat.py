"""What clients written for the reference server send and expect (issue 10): empty lock tokens,
batch token checks, dependency rules, dedup replace, and the commands those clients call."""

from __future__ import annotations

import pytest

from tests.engine.test_push_pull import push, state_of
from tests.support.client import FrameClient


async def lease(client: FrameClient, queue: str = "q") -> tuple[str, str]:
    reply = await client.call("PULL", queue=queue, owner="w")
    return reply["job"]["id"], reply["token"]


# -- empty lock tokens (a `useLocks: false` Worker) ------------------------------------------


async def test_empty_token_on_an_unleased_job_counts_as_no_token(client: FrameClient) -> None:
    acked, batched, failed = [await push(client) for _ in range(3)]
    await client.call("PULLB", queue="q", count=3)
    assert (await client.call("ACK", id=acked, token=""))["ok"] is True
    assert (await client.call("ACKB", ids=[batched], tokens=[""]))["ok"] is True
    assert (await client.call("FAIL", id=failed, token="", error="x"))["ok"] is True
    assert [await state_of(client, i) for i in (acked, batched)] == ["completed"] * 2
    assert await state_of(client, failed) == "delayed"


@pytest.mark.parametrize(
    ("cmd", "fields"),
    [
        ("ExtendLock", {"duration": 1000}),
        ("ChangeDelay", {"delay": 1000}),
        ("MoveToDelayed", {"delay": 1000}),
        ("MoveToWait", {}),
        ("JobHeartbeat", {}),
        ("Discard", {}),
    ],
)
async def test_every_token_command_reads_an_empty_token_as_none(
    client: FrameClient, cmd: str, fields: dict[str, object]
) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    reply = await client.call(cmd, id=job_id, token="", **fields)
    if cmd == "ExtendLock":  # no lease to extend, with or without a token
        assert reply["error"] == "Lock not found or invalid token"
    else:
        assert reply["ok"] is True, reply


async def test_empty_token_on_a_leased_job_is_a_missing_token(client: FrameClient) -> None:
    await push(client)
    job_id, _token = await lease(client)
    for reply in (
        await client.call("ACK", id=job_id, token=""),
        await client.call("ACKB", ids=[job_id], tokens=[""]),
        await client.call("FAIL", id=job_id, token=""),
    ):
        assert reply["error"] == f"Lock token required for job {job_id}"
    assert await state_of(client, job_id) == "active"


async def test_ackb_checks_the_token_of_every_position_of_a_repeated_id(
    client: FrameClient,
) -> None:
    await push(client)
    job_id, token = await lease(client)
    reply = await client.call("ACKB", ids=[job_id, job_id], tokens=[token, "bad"])
    assert reply["error"] == f"Invalid or expired lock token for job {job_id}"
    assert await state_of(client, job_id) == "active"


# -- dependencies ----------------------------------------------------------------------------


async def test_a_batch_job_cannot_depend_on_itself(client: FrameClient) -> None:
    reply = await client.call(
        "PUSHB", queue="q", jobs=[{"data": 1, "customId": "x", "dependsOn": ["x"]}]
    )
    assert reply["error"] == "jobs[0]: Job cannot depend on itself: x"
    assert await state_of(client, "x") == "unknown"


async def test_a_pushed_job_cannot_depend_on_itself(client: FrameClient) -> None:
    reply = await client.call("PUSH", queue="q", data=1, jobId="y", dependsOn=["y"])
    assert reply["error"] == "Job cannot depend on itself: y"


async def test_a_batch_cannot_hold_a_dependency_cycle(client: FrameClient) -> None:
    jobs = [
        {"data": 1, "customId": "a", "dependsOn": ["b"]},
        {"data": 2, "customId": "b", "dependsOn": ["a"]},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == "jobs[0]: Dependency cycle: a -> b -> a"
    assert await state_of(client, "a") == "unknown"


async def test_a_completed_and_removed_dependency_is_satisfied(client: FrameClient) -> None:
    done = await push(client, removeOnComplete=True)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    follower = await push(client, dependsOn=[done])
    assert await state_of(client, follower) == "waiting"


# -- dedup replace ---------------------------------------------------------------------------


async def test_replace_is_refused_while_live_jobs_depend_on_the_job(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k")
    dependent = await push(client, dependsOn=[first])
    reply = await client.call(
        "PUSH", queue="q", data=2, uniqueKey="k", dedup={"ttl": 60000, "replace": True}
    )
    assert reply["error"] == f"Cannot replace job {first}: jobs depend on it ({dependent})"
    assert await state_of(client, first) == "waiting"


async def test_pushb_applies_replace_like_push(client: FrameClient) -> None:
    jobs = [
        {"data": 1, "uniqueKey": "z"},
        {"data": 2, "uniqueKey": "z", "dedup": {"ttl": 60000, "replace": True}},
    ]
    ids = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert ids[0] != ids[1]
    assert await state_of(client, ids[0]) == "unknown"
    job = (await client.call("GetJob", id=ids[1]))["job"]
    assert job["data"] == 2


async def test_a_grouped_job_with_a_priority_is_prioritized(client: FrameClient) -> None:
    grouped = await push(client, groupId="g", priority=2)
    first_in_group = await push(client, groupId="g", priority=0)
    assert await state_of(client, grouped) == "prioritized"
    assert await state_of(client, first_in_group) == "waiting"
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["prioritized"], counts["waiting"]) == (1, 1)
