"""ACKB's checks of each job and token, the usual batch (every job active, every token its
lease's) and every way out of it: what settles, the exact errors, what is ignored."""

from __future__ import annotations

from tests.support.client import FrameClient
from tests.support.engine import push, state_of


async def leased_batch(client: FrameClient, count: int) -> tuple[list[str], list[str]]:
    """Push `count` jobs and PULLB them with leases: their ids and tokens."""
    for _ in range(count):
        await push(client)
    reply = await client.call("PULLB", queue="q", count=count, owner="w", lockTtl=60_000)
    return [job["id"] for job in reply["jobs"]], reply["tokens"]


async def states(client: FrameClient, ids: list[str]) -> list[str]:
    """GetState of each job."""
    return [await state_of(client, job_id) for job_id in ids]


async def test_each_job_with_its_lease_token_completes(client: FrameClient) -> None:
    ids, tokens = await leased_batch(client, 4)
    reply = await client.call("ACKB", ids=ids, tokens=tokens, results=[1, 2, 3, 4])
    assert reply["ok"] is True and "data" not in reply
    assert await states(client, ids) == ["completed"] * 4
    assert [(await client.call("GetResult", id=i))["result"] for i in ids] == [1, 2, 3, 4]


async def test_one_token_of_another_job_refuses_the_whole_batch(client: FrameClient) -> None:
    ids, tokens = await leased_batch(client, 3)
    reply = await client.call("ACKB", ids=ids, tokens=[tokens[0], tokens[1], tokens[0]])
    assert reply["error"] == f"Invalid or expired lock token for job {ids[2]}"
    assert await states(client, ids) == ["active"] * 3


async def test_a_leased_job_without_its_token_refuses_the_batch(client: FrameClient) -> None:
    ids, tokens = await leased_batch(client, 2)
    reply = await client.call("ACKB", ids=ids, tokens=[tokens[0], None])
    assert reply["error"] == f"Lock token required for job {ids[1]}"
    assert await states(client, ids) == ["active"] * 2


async def test_a_token_for_a_job_without_a_lease_refuses_the_batch(client: FrameClient) -> None:
    plain = [await push(client) for _ in range(2)]
    assert len((await client.call("PULLB", queue="q", count=2))["jobs"]) == 2
    reply = await client.call("ACKB", ids=plain, tokens=[None, "made-up"])
    assert reply["error"] == f"Invalid or expired lock token for job {plain[1]}"
    reply = await client.call("ACKB", ids=plain)  # no tokens: both complete
    assert reply["ok"] is True and await states(client, plain) == ["completed"] * 2


async def test_a_job_not_active_refuses_the_batch(client: FrameClient) -> None:
    ids, tokens = await leased_batch(client, 2)
    waiting = await push(client)
    reply = await client.call("ACKB", ids=[*ids, waiting], tokens=[*tokens, None])
    assert reply["error"] == f"Job not found or not in processing state: {waiting}"
    assert await states(client, ids) == ["active"] * 2


async def test_a_repeated_id_settles_once_and_is_reported(client: FrameClient) -> None:
    ids, tokens = await leased_batch(client, 2)
    reply = await client.call("ACKB", ids=[*ids, ids[0]], tokens=[*tokens, tokens[0]])
    assert reply["data"] == {"ignoredIds": [ids[0]], "ignoredIndices": [2]}
    assert await states(client, ids) == ["completed"] * 2
