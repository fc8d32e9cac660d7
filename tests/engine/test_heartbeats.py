"""JobHeartbeat and JobHeartbeatB: their exact replies and refusals, the leases they renew, and a
stale heartbeat that changes nothing (in-memory connections, MockClock)."""

from __future__ import annotations

import trio

from tests.support.client import FrameClient
from tests.support.engine import get_job, lease, push, state_of, without_req_id

NOT_ALIVE = "Job not found or not active (or invalid token)"


async def test_job_heartbeat_reply_and_refusals(client: FrameClient) -> None:
    assert (await client.call("JobHeartbeat", id="ghost"))["error"] == NOT_ALIVE
    waiting = await push(client)
    assert (await client.call("JobHeartbeat", id=waiting))["error"] == NOT_ALIVE
    await push(client)
    job_id, token = await lease(client)
    beat = await client.call("JobHeartbeat", id=job_id, token=token)
    assert without_req_id(beat) == {"ok": True, "data": {"ok": True}}


async def test_job_heartbeat_without_token_marks_the_job_alive(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    started = (await get_job(client, job_id))["startedAt"]
    await trio.sleep(5)
    assert (await client.call("JobHeartbeat", id=job_id))["ok"] is True
    assert (await get_job(client, job_id))["lastHeartbeat"] == started + 5000


async def test_job_heartbeat_renews_the_lease_for_its_duration(
    client: FrameClient, autojump_clock
) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    await trio.sleep(0.5)
    beat = await client.call("JobHeartbeat", id=job_id, token=token, duration=3000)
    assert beat["ok"] is True
    await trio.sleep(2.9)
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_job_heartbeat_batch_counts_the_live_jobs(
    client: FrameClient, autojump_clock
) -> None:
    first = await push(client)
    second = await push(client)
    idle = await push(client, "other")
    await client.call("PULLB", queue="q", count=2)
    started = (await get_job(client, first))["startedAt"]
    await trio.sleep(2)
    reply = await client.call("JobHeartbeatB", ids=[first, "ghost", idle, second])
    assert without_req_id(reply) == {"ok": True, "data": {"ok": True, "count": 2}}
    assert (await get_job(client, second))["lastHeartbeat"] == started + 2000


async def test_job_heartbeat_batch_renews_each_lease_for_its_ttl(
    client: FrameClient, autojump_clock
) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    await trio.sleep(0.9)
    stale = await client.call("JobHeartbeatB", ids=[job_id], tokens=["stale"])
    assert stale["data"]["count"] == 0
    assert (await client.call("JobHeartbeatB", ids=[job_id], tokens=[token]))["data"]["count"] == 1
    await trio.sleep(0.9)
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_job_heartbeat_batch_with_fewer_tokens_than_ids(client: FrameClient) -> None:
    await push(client)
    await push(client)
    reply = await client.call("PULLB", queue="q", count=2, owner="w")
    ids = [job["id"] for job in reply["jobs"]]
    beat = await client.call("JobHeartbeatB", ids=ids, tokens=reply["tokens"][:1])
    assert without_req_id(beat) == {"ok": True, "data": {"ok": True, "count": 1}}


async def test_a_stale_heartbeat_changes_nothing(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, stallTimeout=1000, maxAttempts=9)
    await client.call("PULL", queue="q", owner="w")
    await trio.sleep(0.9)
    beat = await client.call("JobHeartbeat", id=job_id, token="stale")
    assert beat["ok"] is False
    await trio.sleep(0.2)  # the stale beat did not keep it alive
    assert (await client.call("GetJob", id=job_id))["job"]["stallCount"] == 1
