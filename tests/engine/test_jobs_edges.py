"""Job commands at their edges: heartbeats, results and batch acks, with their exact replies
(in-memory connections, MockClock)."""

from __future__ import annotations

import trio

from tests.engine.test_lifecycle_edges import without_req_id
from tests.engine.test_push_pull import push, state_of
from tests.engine.test_settle import get_job, lease
from tests.support.client import FrameClient

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


async def test_get_result_only_of_completed_jobs(client: FrameClient) -> None:
    done = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done, result={"r": 1})
    reply = await client.call("GetResult", id=done)
    assert without_req_id(reply) == {"ok": True, "id": done, "result": {"r": 1}}
    waiting = await push(client)
    assert without_req_id(await client.call("GetResult", id=waiting)) == {
        "ok": True, "id": waiting, "result": None,
    }  # fmt: skip
    assert (await client.call("GetResult", id="ghost"))["result"] is None


async def test_ackb_without_tokens_or_results(client: FrameClient) -> None:
    ids = [await push(client) for _ in range(2)]
    await client.call("PULLB", queue="q", count=2)
    assert without_req_id(await client.call("ACKB", ids=ids)) == {"ok": True}
    assert [await state_of(client, i) for i in ids] == ["completed", "completed"]
    assert (await client.call("GetResult", id=ids[0]))["result"] is None


async def test_a_late_ack_is_a_successful_no_op(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=1)
    await client.call("PULL", queue="q")
    await trio.sleep(1.001)  # the processing timeout finalised the attempt
    late = await client.call("ACK", id=job_id, result="too late")
    assert without_req_id(late) == {
        "ok": True, "data": {"applied": False, "reason": "already-finalized"},
    }  # fmt: skip
    assert await state_of(client, job_id) == "failed"


async def test_job_heartbeat_batch_with_fewer_tokens_than_ids(client: FrameClient) -> None:
    await push(client)
    await push(client)
    reply = await client.call("PULLB", queue="q", count=2, owner="w")
    ids = [job["id"] for job in reply["jobs"]]
    beat = await client.call("JobHeartbeatB", ids=ids, tokens=reply["tokens"][:1])
    assert without_req_id(beat) == {"ok": True, "data": {"ok": True, "count": 1}}


async def test_ackb_completes_the_jobs_after_an_ignored_one(
    client: FrameClient, autojump_clock
) -> None:
    finalised = await push(client, timeout=1000, maxAttempts=1)
    removed = await push(client, removeOnComplete=True)
    await client.call("PULLB", queue="q", count=2)
    await trio.sleep(1.001)  # the first one's processing timeout finalised it
    reply = await client.call("ACKB", ids=[finalised, removed])
    assert without_req_id(reply) == {
        "ok": True, "data": {"ignoredIds": [finalised], "ignoredIndices": [0]},
    }  # fmt: skip
    assert await state_of(client, removed) == "unknown"  # completed, then removed as asked


async def test_a_late_ackb_with_a_stale_token_is_refused_as_a_late_ack_is(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=1)
    token = (await client.call("PULL", queue="q", owner="w"))["token"]
    await push(client)
    other = (await client.call("PULL", queue="q", owner="w"))["token"]
    await trio.sleep(1.001)  # the processing timeout finalised the first job
    stale = await client.call("ACKB", ids=[job_id], tokens=[other])
    assert stale["ok"] is False
    assert stale["error"] == (await client.call("ACK", id=job_id, token=other))["error"]
    late = await client.call("ACKB", ids=[job_id], tokens=[token])
    assert late["data"] == {"ignoredIds": [job_id], "ignoredIndices": [0]}


async def test_get_job_of_an_unknown_id(client: FrameClient) -> None:
    reply = await client.call("GetJob", id="ghost")
    assert (reply["ok"], reply["error"]) == (False, "Job not found")
