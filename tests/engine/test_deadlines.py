"""Processing timeouts finalise exactly at their deadline (a timeout of 0 is none); ttl expires
queued jobs; waits longer than a JavaScript timer allows last their whole time."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import get_job, lease, push, state_of

ALREADY = {"applied": False, "reason": "already-finalized"}


async def test_timeout_fails_the_attempt_at_its_deadline(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=2000, maxAttempts=2, backoff=1000)
    await client.call("PULL", queue="q")
    await trio.sleep(1.999)
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.002)
    job = await get_job(client, job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == (
        "delayed", 1, "Job timeout exceeded",
    )  # fmt: skip
    late = await client.call("ACK", id=job_id, result="too late")
    assert late["data"] == ALREADY
    assert (await get_job(client, job_id))["state"] == "delayed"
    reply = await client.call("PULL", queue="q", timeout=5000)
    assert reply["job"]["id"] == job_id
    await trio.sleep(2.001)  # the second attempt times out too: out of attempts
    assert await state_of(client, job_id) == "failed"


async def test_a_final_timeout_forgets_a_job_with_remove_on_fail(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=1, removeOnFail=True)
    await client.call("PULL", queue="q")
    await trio.sleep(1.001)
    assert await state_of(client, job_id) == "unknown"


async def test_late_fail_and_stale_token_after_a_timeout(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=3, backoff=1)
    _, token = await lease(client)
    await trio.sleep(1.001)
    assert (await client.call("FAIL", id=job_id, token=token, error="x"))["data"] == ALREADY
    await trio.sleep(0.01)
    _, new_token = await lease(client)
    stale = await client.call("ACK", id=job_id, token=token)
    assert stale["error"] == f"Invalid or expired lock token for job {job_id}"
    assert (await client.call("ACK", id=job_id, token=new_token))["ok"] is True
    assert await state_of(client, job_id) == "completed"


async def test_ackb_reports_positions_a_timeout_won(client: FrameClient, autojump_clock) -> None:
    slow = await push(client, timeout=1000, maxAttempts=1)
    fast = await push(client)
    reply = await client.call("PULLB", queue="q", count=2, owner="w")
    tokens = dict(zip([j["id"] for j in reply["jobs"]], reply["tokens"], strict=True))
    await trio.sleep(1.001)
    ackb = await client.call("ACKB", ids=[fast, slow], tokens=[tokens[fast], tokens[slow]])
    assert ackb["data"] == {"ignoredIds": [slow], "ignoredIndices": [1]}
    assert [await state_of(client, i) for i in (fast, slow)] == ["completed", "failed"]


async def test_only_the_timed_out_lease_is_answered_as_late(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=3, backoff=60_000)
    await lease(client)
    await trio.sleep(1.001)  # timed out: delayed for its retry, the lease's token remembered
    foreign = await client.call("ACK", id=job_id, token="another-workers-token")
    assert foreign["error"] == f"Job not found or not in processing state: {job_id}"
    untokened = await client.call("ACK", id=job_id)  # the late worker, not sending its token
    assert untokened["data"] == ALREADY
    assert await state_of(client, job_id) == "delayed"


async def test_a_timed_out_token_is_late_only_until_the_job_runs_again(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, timeout=1000, maxAttempts=3, backoff=1)
    _, first = await lease(client)
    await trio.sleep(1.001)  # the first activation timed out
    await trio.sleep(0.01)
    _, second = await lease(client)
    assert (await client.call("FAIL", id=job_id, token=second))["ok"] is True
    stale = await client.call("ACK", id=job_id, token=first)  # from before the second run
    assert stale["error"] == f"Job not found or not in processing state: {job_id}"


async def test_ttl_expires_a_queued_job_visibly(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, ttl=5000)
    delayed = await push(client, ttl=1000, delay=10_000)
    await trio.sleep(4.9)
    assert await state_of(client, job_id) == "waiting"
    await trio.sleep(0.2)
    job = await get_job(client, job_id)
    assert (job["state"], job["failedReason"]) == ("failed", "Job expired (ttl)")
    assert await state_of(client, delayed) == "failed"
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["waiting"], counts["delayed"], counts["failed"]) == (0, 0, 2)


async def test_ttl_does_not_cut_an_active_job_short(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, ttl=1000, maxAttempts=3)
    await client.call("PULL", queue="q")
    await trio.sleep(2)
    assert await state_of(client, job_id) == "active"
    await client.call("FAIL", id=job_id)  # its ttl has passed: it does not come back
    assert await state_of(client, job_id) == "failed"


async def test_a_retry_due_at_or_past_the_ttl_fails_the_job_as_expired(
    client: FrameClient, autojump_clock
) -> None:
    # Failed at exactly its ttl, the job may not come back: it is failed as expired, not
    # with the worker's error.
    job_id = await push(client, ttl=1000, maxAttempts=3)
    await client.call("PULL", queue="q")
    await trio.sleep(1)
    await client.call("FAIL", id=job_id, error="boom")
    job = await get_job(client, job_id)
    assert (job["state"], job["failedReason"]) == ("failed", "Job expired (ttl)")


async def test_an_old_lease_running_out_leaves_a_later_unleased_run_alone(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, maxAttempts=3, backoff=0)
    _, token = await lease(client, ttl=1000)
    assert (await client.call("FAIL", id=job_id, token=token))["ok"] is True  # ready again
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id  # no lease this time
    await trio.sleep(2)  # past the first lease's expiry
    assert await state_of(client, job_id) == "active"


async def test_a_job_completed_before_its_stall_check_stays_completed(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, stallTimeout=1000, maxAttempts=3)
    await client.call("PULL", queue="q")
    assert (await client.call("ACK", id=job_id))["ok"] is True
    await trio.sleep(3)  # its stall checks come due
    job = await get_job(client, job_id)
    assert (job["state"], job["stallCount"]) == ("completed", 0)


async def test_stall_timeout_requeues_then_fails(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, stallTimeout=1000, maxAttempts=10)
    for stall in (1, 2):
        await client.call("PULL", queue="q")
        await trio.sleep(0.6)
        await client.call("Progress", id=job_id, progress=10)  # a heartbeat
        await trio.sleep(0.6)
        assert await state_of(client, job_id) == "active"
        await trio.sleep(0.5)
        job = await get_job(client, job_id)
        assert (job["state"], job["stallCount"]) == ("waiting", stall)
    await client.call("PULL", queue="q")
    await trio.sleep(1.001)
    job = await get_job(client, job_id)
    assert (job["state"], job["failedReason"]) == ("failed", "Job stalled 3 times")


async def test_a_stall_timeout_of_one_millisecond_is_kept(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, stallTimeout=1, maxAttempts=10)
    await client.call("PULL", queue="q")
    await trio.sleep(0.002)
    job = await get_job(client, job_id)
    assert (job["state"], job["stallCount"]) == ("waiting", 1)


async def test_without_stall_timeout_a_silent_lease_is_kept(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client)
    await lease(client, ttl=300_000)
    await trio.sleep(299)
    assert await state_of(client, job_id) == "active"


async def test_a_queued_job_past_its_ttl_is_removed_when_asked(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, ttl=1000, removeOnFail=True)
    await trio.sleep(1.5)
    assert await state_of(client, job_id) == "unknown"


DAY_S = 86_400


JS_TIMER_LIMIT_S = 2**31 / 1000  # about 24.8 days: JavaScript timers overflow past it


async def test_a_timeout_of_0_is_no_timeout(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    job_id = await push(client, timeout=0)
    await client.call("PULL", queue="q")
    await trio.sleep(DAY_S)
    assert await state_of(client, job_id) == "active"
    assert (await client.call("ACK", id=job_id))["ok"] is True


async def test_waits_longer_than_24_8_days_last_their_whole_time(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    client, waiter = await connect(), await connect()
    thirty_days_ms = 30 * DAY_S * 1000
    delayed = await push(client, "d", delay=thirty_days_ms)
    expiring = await push(client, "t", ttl=thirty_days_ms)
    keyed = await push(client, "k", uniqueKey="u", dedup={"ttl": thirty_days_ms})
    leased = await push(client, "l", timeout=thirty_days_ms)
    token = (await client.call("PULL", queue="l", owner="w", lockTtl=thirty_days_ms))["token"]
    await waiter.send({"cmd": "WaitJob", "id": leased, "timeout": thirty_days_ms, "reqId": "w"})
    await trio.sleep(JS_TIMER_LIMIT_S + DAY_S)  # past where a JavaScript timer fires at once
    assert await state_of(client, delayed) == "delayed"
    assert await state_of(client, expiring) == "waiting"
    assert (await client.call("PUSH", queue="k", data=2, uniqueKey="u"))["id"] == keyed
    assert await state_of(client, leased) == "active"
    assert (await client.call("ACK", id=leased, token=token))["ok"] is True
    assert (await waiter.receive_for("w"))["completed"] is True
    await trio.sleep(6 * DAY_S)  # and then they end
    assert await state_of(client, delayed) == "waiting"
    assert await state_of(client, expiring) == "failed"


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
