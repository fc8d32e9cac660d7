"""Job commands at their edges: heartbeats, results and batch acks, with their exact replies
(in-memory connections, MockClock)."""

from __future__ import annotations

import trio

from tests.support.app import EPOCH_MS
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


async def test_a_late_fail_with_a_stale_token_is_refused_and_with_its_own_token_ignored(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=1)
    token = (await client.call("PULL", queue="q", owner="w"))["token"]
    await push(client)
    other = (await client.call("PULL", queue="q", owner="w"))["token"]
    await trio.sleep(1.001)  # the processing timeout finalised the first job
    stale = await client.call("FAIL", id=job_id, token=other, error="boom")
    assert stale["ok"] is False
    late = await client.call("FAIL", id=job_id, token=token, error="boom")
    assert late["data"] == {"applied": False, "reason": "already-finalized"}


async def test_get_state_and_get_job_counts_answer_ok(client: FrameClient) -> None:
    job_id = await push(client)
    reply = without_req_id(await client.call("GetState", id=job_id))
    assert reply == {"ok": True, "id": job_id, "state": "waiting"}
    reply = without_req_id(await client.call("GetState", id="ghost"))
    assert reply == {"ok": True, "id": "ghost", "state": "unknown"}
    counts = await client.call("GetJobCounts", queue="q")
    assert (counts["ok"], counts["counts"]["waiting"]) == (True, 1)


async def test_a_stack_trace_limit_of_zero_keeps_no_stack(client: FrameClient) -> None:
    job_id = await push(client, stackTraceLimit=0, maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="boom", stack=["at a", "at b"])
    assert (await get_job(client, job_id))["stacktrace"] is None  # the reference's null


async def test_a_lease_expiring_past_max_stalls_fails_the_job_with_its_reason(
    client: FrameClient, autojump_clock
) -> None:
    await client.call("SetStallConfig", queue="q", config={"maxStalls": 1})
    kept = await push(client, maxAttempts=5)
    assert (await lease(client, ttl=1000))[0] == kept
    await trio.sleep(2)  # the lease expired: one stall, the queue's maximum
    job = await get_job(client, kept)
    assert (job["state"], job["failedReason"]) == ("failed", "Lock expired: job stalled 1 times")
    removed = await push(client, maxAttempts=5, removeOnFail=True)
    assert (await lease(client, ttl=1000))[0] == removed
    await trio.sleep(2)
    assert await state_of(client, removed) == "unknown"  # failed, then removed as asked


async def test_a_repeating_job_waits_for_its_start_date(client: FrameClient) -> None:
    later = await push(client, repeat={"every": 1000, "startDate": EPOCH_MS + 5000})
    assert await state_of(client, later) == "delayed"
    assert (await get_job(client, later))["runAt"] == EPOCH_MS + 5000
    # A delay past the end date: no occurrence of the rule is left, the delay stands.
    past_end = await push(client, delay=10_000, repeat={"every": 1000, "endDate": EPOCH_MS + 5000})
    job = await get_job(client, past_end)
    assert job["runAt"] == job["createdAt"] + 10_000
    only_starting = await push(client, repeat={"limit": 2, "startDate": EPOCH_MS + 5000})
    assert await state_of(client, only_starting) == "waiting"  # no rule: not a schedule


async def test_a_processing_timeout_of_an_earlier_attempt_never_ends_a_later_one(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=3, backoff=100)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    await trio.sleep(0.1)
    await client.call("FAIL", id=job_id, error="first attempt")  # retried after 100 ms
    await trio.sleep(0.3)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id  # the second attempt
    await trio.sleep(0.8)  # past the first attempt's timeout, within the second's
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.3)  # past the second attempt's timeout
    assert await state_of(client, job_id) != "active"


async def test_ack_of_an_unknown_job_is_refused_by_name(client: FrameClient) -> None:
    for token in (None, "t"):
        reply = await client.call("ACK", id="ghost", token=token)
        assert without_req_id(reply) == {
            "ok": False,
            "error": "Job not found or not in processing state: ghost",
        }


async def test_a_reused_custom_id_is_a_dependency_only_if_its_latest_job_completed(
    client: FrameClient,
) -> None:
    # The first "x" completes and is forgotten; the second, pushed under the same id, fails
    # and is forgotten too: "x" no longer counts as a completed dependency.
    await push(client, jobId="x", removeOnComplete=True)
    await client.call("ACK", id=(await client.call("PULL", queue="q"))["job"]["id"])
    await push(client, jobId="x", removeOnFail=True, maxAttempts=1)
    await client.call("FAIL", id=(await client.call("PULL", queue="q"))["job"]["id"])
    reply = await client.call("PUSH", queue="q", data={}, dependsOn=["x"])
    assert (reply["ok"], reply["error"]) == (False, "Dependency job not found: x")
