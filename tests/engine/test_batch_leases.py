"""The leases a PULLB gives: each job's lease ends at the pull's time plus lockTtl, as a PULL's
does, whatever other timers are armed, and each token settles its own job (MockClock)."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.client import FrameClient
from tests.support.engine import lease, push, state_of


async def states(client: FrameClient, ids: list[str]) -> list[str]:
    """GetState of each job."""
    return [await state_of(client, job_id) for job_id in ids]


async def test_a_batchs_leases_end_together_at_their_deadline(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    await push(client, "long")
    long_id, _ = await lease(client, "long", ttl=10_000)  # its lease armed first
    pushed = [await push(client) for _ in range(6)]
    reply = await client.call("PULLB", queue="q", count=6, owner="w", lockTtl=1000)
    ids = [job["id"] for job in reply["jobs"]]
    assert ids == pushed and len(set(reply["tokens"])) == 6
    await trio.sleep(0.999)
    assert await states(client, ids) == ["active"] * 6
    await trio.sleep(0.0015)  # 1000.5 ms after the pull
    assert await states(client, ids) == ["waiting"] * 6
    assert await state_of(client, long_id) == "active"
    await trio.sleep(9)
    assert await state_of(client, long_id) == "waiting"


async def test_a_batch_ends_its_leases_when_one_at_a_time_would(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    # Leases of 2 s are armed first, then a PULLB's of 1 s (which fall due before them).
    for _ in range(5):
        await push(client, "slow")
    singles = [(await lease(client, "slow", ttl=2000))[0] for _ in range(5)]
    for _ in range(5):
        await push(client)
    reply = await client.call("PULLB", queue="q", count=5, owner="w", lockTtl=1000)
    batch = [job["id"] for job in reply["jobs"]]
    await trio.sleep(1.001)
    assert await states(client, batch) == ["waiting"] * 5
    assert await states(client, singles) == ["active"] * 5
    await trio.sleep(1)
    assert await states(client, singles) == ["waiting"] * 5


async def test_each_token_of_a_batch_with_a_timed_job_settles_its_own_job(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    # The third job has a processing timeout: its timers are armed in its place in the batch.
    ids = [await push(client, **({"timeout": 5000} if index == 2 else {})) for index in range(5)]
    reply = await client.call("PULLB", queue="q", count=5, owner="w", lockTtl=1000)
    tokens = reply["tokens"]
    assert [job["id"] for job in reply["jobs"]] == ids
    wrong = await client.call("ACK", id=ids[0], token=tokens[1])
    assert wrong["ok"] is False
    for job_id, token in zip(ids[:3], tokens[:3], strict=True):
        assert (await client.call("ACK", id=job_id, token=token))["ok"] is True
    await trio.sleep(0.999)
    assert await states(client, ids[3:]) == ["active", "active"]
    await trio.sleep(0.0015)  # 1000.5 ms after the pull
    assert await states(client, ids) == ["completed"] * 3 + ["waiting"] * 2
