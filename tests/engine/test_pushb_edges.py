"""PUSHB's checks and duplicates item by item: what a batch does that a run of PUSHes would."""

from __future__ import annotations

from tests.support.client import FrameClient
from tests.support.engine import push, state_of


async def count(client: FrameClient, queue: str = "q") -> int:
    return (await client.call("Count", queue=queue))["count"]


async def test_a_batch_item_with_a_bad_repeat_refuses_the_whole_batch(client: FrameClient) -> None:
    cases = [
        ({"pattern": "every day"}, "Invalid repeat pattern: every day"),
        ({"every": 1000, "endDate": 1000, "immediately": True}, "repeat has no future occurrence"),
    ]
    for repeat, error in cases:
        jobs = [{"data": 1, "repeat": {"every": 1000}}, {"data": 2, "repeat": repeat}]
        reply = await client.call("PUSHB", queue="q", jobs=jobs)
        assert reply == {"ok": False, "error": f"jobs[1]: {error}", "reqId": reply.get("reqId")}
    assert await count(client) == 0


async def test_a_batch_of_repeating_jobs_is_accepted(client: FrameClient) -> None:
    jobs = [{"data": n, "repeat": {"every": 1000}} for n in range(2)]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ok"] is True and len(reply["ids"]) == 2
    assert await count(client) == 2


async def test_a_batch_item_reusing_a_held_custom_id_gets_that_job(client: FrameClient) -> None:
    held = await push(client, jobId="x", data="first")
    jobs = [{"data": "again", "customId": "x"}, {"data": "new", "customId": "y"}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ids"] == [held, "y"]
    assert (await client.call("GetJob", id="x"))["job"]["data"] == "first"
    job = (await client.call("GetJob", id="y"))["job"]
    assert (job["data"], job["customId"]) == ("new", "y")
    assert await count(client) == 2


async def test_a_batch_item_with_a_held_unique_key_gets_the_holder(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k", data="first")
    jobs = [{"data": "again", "uniqueKey": "k"}, {"data": "other"}]
    ids = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert ids[0] == held and ids[1] != held
    assert (await client.call("GetJob", id=held))["job"]["data"] == "first"
    assert await count(client) == 2


REPLACE_BLOCKED_A = "Cannot replace deduplicated job a because live jobs depend on it"


async def test_a_batch_cannot_replace_a_held_job_that_others_wait_for(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k")
    waiter = await push(client, dependsOn=[held])
    jobs = [{"data": 2, "uniqueKey": "k", "dedup": {"ttl": 60000, "replace": True}}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert waiter != held
    text = f"jobs[0]: Cannot replace deduplicated job {held} because live jobs depend on it"
    assert reply["error"] == text
    assert await state_of(client, held) == "waiting"


async def test_a_batch_cannot_replace_its_own_item_that_another_item_waits_for(
    client: FrameClient,
) -> None:
    jobs = [
        {"data": 1, "customId": "a", "uniqueKey": "k"},
        {"data": 2, "customId": "b", "dependsOn": ["a"]},
        {"data": 3, "uniqueKey": "k", "dedup": {"ttl": 60000, "replace": True}},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[2]: {REPLACE_BLOCKED_A}"
    assert await count(client) == 0


async def test_a_waiting_batch_item_without_a_custom_id_also_blocks_the_replace(
    client: FrameClient,
) -> None:
    jobs = [
        {"data": 1, "customId": "a", "uniqueKey": "k"},
        {"data": 2, "dependsOn": ["a"]},
        {"data": 3, "uniqueKey": "k", "dedup": {"replace": True}},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[2]: {REPLACE_BLOCKED_A}"
