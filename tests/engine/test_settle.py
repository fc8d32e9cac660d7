"""ACK, ACKB, FAIL, leases, stalls and connection release: late and stale settles, the stack a
failed job keeps, and the exact replies (in-memory connections, MockClock)."""

from __future__ import annotations

import trio
import trio.testing

from broker.node.app import App
from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import get_job, lease, push, state_of, without_req_id


async def test_ack_stores_the_result(client: FrameClient) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    assert (await client.call("ACK", id=job_id, result={"n": 1}))["ok"] is True
    job = await get_job(client, job_id)
    assert (job["state"], job["returnvalue"]) == ("completed", {"n": 1})
    assert job["completedAt"] is not None


async def test_ack_of_a_job_that_is_not_active_fails(client: FrameClient) -> None:
    job_id = await push(client)
    reply = await client.call("ACK", id=job_id)
    assert reply["error"] == f"Job not found or not in processing state: {job_id}"
    assert await state_of(client, job_id) == "waiting"


async def test_leased_job_needs_its_token(client: FrameClient) -> None:
    await push(client)
    job_id, token = await lease(client)
    missing = await client.call("ACK", id=job_id)
    assert missing["error"] == f"Lock token required for job {job_id}"
    wrong = await client.call("ACK", id=job_id, token="nope")
    assert wrong["error"] == f"Invalid or expired lock token for job {job_id}"
    assert await state_of(client, job_id) == "active"
    assert (await client.call("ACK", id=job_id, token=token))["ok"] is True


async def test_a_token_for_a_job_pulled_without_a_lease_is_refused(client: FrameClient) -> None:
    first, second = await push(client), await push(client)
    await client.call("PULLB", queue="q", count=2)  # no owner: no lease, no token
    wrong = await client.call("ACK", id=first, token="made-up")
    assert wrong["error"] == f"Invalid or expired lock token for job {first}"
    batch = await client.call("ACKB", ids=[first, second], tokens=[None, "made-up"])
    assert batch["error"] == f"Invalid or expired lock token for job {second}"
    assert [await state_of(client, i) for i in (first, second)] == ["active"] * 2
    assert (await client.call("ACKB", ids=[first, second]))["ok"] is True


async def test_remove_on_complete_forgets_the_job(client: FrameClient) -> None:
    kept = await push(client)
    by_option = await push(client, removeOnComplete=True)
    by_call = await push(client)
    await client.call("PULLB", queue="q", count=3)
    await client.call("ACK", id=kept)
    await client.call("ACK", id=by_option)
    await client.call("ACK", id=by_call, removeOnComplete=True)
    states = [await state_of(client, i) for i in (kept, by_option, by_call)]
    assert states == ["completed", "unknown", "unknown"]


async def test_ackb_checks_every_token_before_changing_anything(client: FrameClient) -> None:
    for _ in range(3):
        await push(client)
    reply = await client.call("PULLB", queue="q", count=3, owner="w")
    ids = [job["id"] for job in reply["jobs"]]
    bad = await client.call("ACKB", ids=ids, tokens=[*reply["tokens"][:2], "wrong"])
    assert bad["error"] == f"Invalid or expired lock token for job {ids[2]}"
    assert [await state_of(client, i) for i in ids] == ["active"] * 3
    good = await client.call("ACKB", ids=ids, tokens=reply["tokens"], results=[1, 2, 3])
    assert good == {"ok": True, "reqId": good["reqId"]}
    assert [(await client.call("GetResult", id=i))["result"] for i in ids] == [1, 2, 3]


async def test_ackb_with_a_missing_job_changes_nothing(client: FrameClient) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    reply = await client.call("ACKB", ids=[job_id, "ghost"])
    assert reply["error"] == "Job not found or not in processing state: ghost"
    assert await state_of(client, job_id) == "active"


async def test_ackb_with_a_job_not_yet_pulled_changes_nothing(client: FrameClient) -> None:
    pulled = await push(client)
    await client.call("PULL", queue="q")
    waiting = await push(client)
    reply = await client.call("ACKB", ids=[pulled, waiting])
    assert reply["error"] == f"Job not found or not in processing state: {waiting}"
    assert [await state_of(client, i) for i in (pulled, waiting)] == ["active", "waiting"]


async def test_ackb_reports_repeated_ids_as_ignored(client: FrameClient) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    reply = await client.call("ACKB", ids=[job_id, job_id])
    assert reply["data"] == {"ignoredIds": [job_id], "ignoredIndices": [1]}
    assert await state_of(client, job_id) == "completed"


async def test_fail_retries_with_exponential_backoff(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, maxAttempts=3, backoff=1000)
    await client.call("PULL", queue="q")
    for attempt, expected_ms in ((1, 1000), (2, 2000)):
        failed_at = trio.current_time()
        await client.call("FAIL", id=job_id, error="boom")
        job = await get_job(client, job_id)
        assert (job["state"], job["attempts"], job["failedReason"]) == ("delayed", attempt, "boom")
        reply = await client.call("PULL", queue="q", timeout=60000)
        assert reply["job"]["id"] == job_id
        assert round((trio.current_time() - failed_at) * 1000) == expected_ms
    await client.call("FAIL", id=job_id, error="boom")
    job = await get_job(client, job_id)
    assert (job["state"], job["attempts"]) == ("failed", 3)


async def retry_delays(client: FrameClient, queue: str, job_id: str, times: int) -> list[int]:
    """FAIL the job `times` times, returning each wait before it was ready again (ms)."""
    delays = []
    await client.call("PULL", queue=queue)
    for _ in range(times):
        failed_at = trio.current_time()
        await client.call("FAIL", id=job_id)
        reply = await client.call("PULL", queue=queue, timeout=60000)
        while reply["job"] is None:  # a long backoff outlasts one long poll
            reply = await client.call("PULL", queue=queue, timeout=60000)
        assert reply["job"]["id"] == job_id
        delays.append(round((trio.current_time() - failed_at) * 1000))
    return delays


async def test_fixed_backoff_waits_the_same_each_time(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, backoff={"type": "fixed", "delay": 500}, maxAttempts=5)
    assert await retry_delays(client, "q", job_id, 3) == [500, 500, 500]


async def test_max_delay_caps_the_backoff(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, backoff={"delay": 10_000, "maxDelay": 15_000}, maxAttempts=9)
    assert await retry_delays(client, "q", job_id, 3) == [10_000, 15_000, 15_000]


async def test_backoff_is_capped_at_one_hour(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, backoff=2_000_000, maxAttempts=9)
    assert await retry_delays(client, "q", job_id, 2) == [2_000_000, 3_600_000]


async def test_a_backoff_of_zero_retries_at_once_however_many_attempts(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, backoff=0, maxAttempts=100)
    assert await retry_delays(client, "q", job_id, 70) == [0] * 70


async def test_a_backoff_past_the_largest_number_waits_its_cap(
    client: FrameClient, autojump_clock
) -> None:
    backoff = {"delay": 4e15, "maxDelay": 5}  # 4e15·2^972 is past the largest float
    job_id = await push(client, backoff=backoff, maxAttempts=2000)
    assert await retry_delays(client, "q", job_id, 975) == [5] * 975


async def test_fail_after_max_attempts_goes_to_failed_with_stack(client: FrameClient) -> None:
    job_id = await push(client, maxAttempts=1, stackTraceLimit=2)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="bad", stack=["a", "b", "c"])
    job = await get_job(client, job_id)
    assert (job["state"], job["failedReason"], job["stacktrace"]) == ("failed", "bad", ["a", "b"])
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert counts["failed"] == 1


async def test_unrecoverable_skips_retries_and_remove_on_fail_forgets(client: FrameClient) -> None:
    unrecoverable = await push(client, maxAttempts=5)
    removed = await push(client, maxAttempts=1, removeOnFail=True)
    await client.call("PULLB", queue="q", count=2)
    await client.call("FAIL", id=unrecoverable, unrecoverable=True)
    await client.call("FAIL", id=removed)
    assert await state_of(client, unrecoverable) == "failed"
    assert await state_of(client, removed) == "unknown"


async def test_expired_lease_requeues_then_fails_after_three(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client)
    for stall in (1, 2):
        pulled, token = await lease(client, ttl=1000)
        assert pulled == job_id
        await trio.sleep(1.001)
        job = await get_job(client, job_id)
        assert (job["state"], job["stallCount"], job["attempts"]) == ("waiting", stall, stall)
        late = await client.call("ACK", id=job_id, token=token)
        assert late["ok"] is False
    await lease(client, ttl=1000)
    await trio.sleep(1.001)
    assert await state_of(client, job_id) == "failed"


async def test_an_expired_lease_is_the_last_sign_of_life(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, maxAttempts=3)
    await lease(client, ttl=1000)
    await trio.sleep(1.001)
    job = await get_job(client, job_id)
    assert (job["state"], job["startedAt"]) == ("waiting", None)
    assert job["lastHeartbeat"] == job["createdAt"] + 1000  # when the lease ran out


async def test_a_job_whose_lease_ran_out_is_pulled_again_without_one(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, maxAttempts=3)
    await lease(client, ttl=1000)
    await trio.sleep(1.001)  # requeued: the old lease is gone with its token
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    assert (await client.call("ACK", id=job_id))["ok"] is True


async def test_a_connection_closing_leaves_a_job_it_once_held_to_its_new_worker(
    connect: Connect,
) -> None:
    first, second = await connect(), await connect()
    job_id = await push(first, maxAttempts=3, backoff=0)
    await first.call("PULL", queue="q")  # held by the first connection
    await first.call("FAIL", id=job_id)  # back to waiting, no longer held
    job_id_again, token = await lease(second)
    assert job_id_again == job_id
    await first.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert (await second.call("ACK", id=job_id, token=token))["ok"] is True


async def test_a_connection_is_held_to_exactly_the_jobs_it_has_not_settled(
    app: App, connect: Connect
) -> None:
    worker, producer = await connect(), await connect()
    settled, kept = await push(producer), await push(producer)
    await worker.call("PULLB", queue="q", count=2)
    await worker.call("ACK", id=settled)
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert await state_of(producer, kept) == "waiting"  # still held when the connection went
    other = await connect()
    await other.call("PULL", queue="q")
    await other.call("ACK", id=kept)
    assert app.actor is not None
    assert app.actor.engine.state.holdings == {}  # nothing kept for a connection holding none


async def test_job_heartbeat_renews_the_lease(client: FrameClient, autojump_clock) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    for _ in range(5):
        await trio.sleep(0.8)
        reply = await client.call("JobHeartbeatB", ids=[job_id], tokens=[token])
        assert reply["data"]["count"] == 1
    assert await state_of(client, job_id) == "active"
    assert (await client.call("ACK", id=job_id, token=token))["ok"] is True


async def test_closing_a_connection_releases_unleased_jobs(connect: Connect) -> None:
    producer = await connect()
    worker = await connect()
    plain = await push(producer)
    also_plain = await push(producer)
    detached = await push(producer)
    leased = await push(producer)
    await worker.call("PULL", queue="q")
    await worker.call("PULL", queue="q")
    await worker.call("PULL", queue="q", detach=True)
    await worker.call("PULL", queue="q", owner="w")
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert await state_of(producer, plain) == "waiting"
    job = await get_job(producer, plain)
    assert (job["attempts"], job["startedAt"]) == (0, None)
    assert isinstance(job["lastHeartbeat"], float)  # alive until its connection went
    assert await state_of(producer, also_plain) == "waiting"  # every job it held
    assert await state_of(producer, detached) == "active"
    assert await state_of(producer, leased) == "active"


async def test_commands_in_flight_are_capped_at_fifty(client: FrameClient, autojump_clock) -> None:
    polls = [
        {"cmd": "PULL", "queue": "idle", "timeout": 10_000, "reqId": f"p{i}"} for i in range(50)
    ]
    await client.send(*polls, {"cmd": "Count", "queue": "idle", "reqId": "late"})
    start = trio.current_time()
    await client.receive_for("late")
    assert trio.current_time() - start >= 10.0


async def fail_and_pull_again(client: FrameClient, job_id: str, stack: list[object]) -> object:
    await client.call("FAIL", id=job_id, error="boom", stack=stack)
    job = (await client.call("PULL", queue="q", timeout=1000))["job"]
    assert job["id"] == job_id
    return job["stacktrace"]


async def test_a_job_pulled_again_carries_the_stack_of_its_failed_attempt(
    client: FrameClient,
) -> None:
    job_id = await push(client, maxAttempts=5, backoff=0, stackTraceLimit=2)
    await client.call("PULL", queue="q")
    trimmed = await fail_and_pull_again(client, job_id, ["  at a  ", "", "at b", "at c"])
    assert trimmed == ["at a", "at b"]  # trimmed, blank lines left out, the limit applied
    assert await fail_and_pull_again(client, job_id, []) == ["at a", "at b"]  # none: kept
    assert await fail_and_pull_again(client, job_id, [1, None, "at x"]) == ["at x"]
    assert await fail_and_pull_again(client, job_id, ["   "]) is None  # only blank: none


async def test_a_null_backoff_is_the_default_one(client: FrameClient) -> None:
    job_id = (await client.call("PUSH", queue="q", data=1, backoff=None))["id"]
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["backoff"], job["backoffConfig"]) == (1000, None)


async def test_an_orphaned_active_job_is_recovered_through_the_stall_path(
    app: App, client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    stalls = app.actor.bus.subscribe(["job:stalled"])
    await client.call("SetStallConfig", queue="q", config={"stallInterval": 30_000})
    job_id = await push(client, maxAttempts=5, uniqueKey="once")
    await client.call("PULL", queue="q", detach=True)  # nobody will settle it: an orphan
    await trio.sleep(31)
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["state"], job["attempts"], job["stallCount"]) == ("waiting", 1, 1)
    assert stalls.receive.receive_nowait()["data"] == {"queue": "q", "jobId": job_id,
                                                       "stallCount": 1}  # fmt: skip
    # what it held is free: its unique key is still its own (it is not finished)
    assert (await client.call("PUSH", queue="q", data=1, uniqueKey="once"))["id"] == job_id


async def test_a_closing_connection_releases_only_the_deliveries_it_owns(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    first, second = await connect(), await connect()
    await first.call("SetStallConfig", queue="q", config={"stallInterval": 5_000})
    job_id = await push(first, maxAttempts=5)
    await first.call("PULL", queue="q")  # first goes silent with it
    await trio.sleep(6)  # recovered as a stall
    assert (await second.call("PULL", queue="q"))["job"]["id"] == job_id
    await first.aclose()  # its old delivery is gone: the second one must stay
    await trio.sleep(1)
    assert await state_of(second, job_id) == "active"
    assert (await second.call("ACK", id=job_id))["ok"] is True


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


async def test_ack_of_an_unknown_job_is_refused_by_name(client: FrameClient) -> None:
    for token in (None, "t"):
        reply = await client.call("ACK", id="ghost", token=token)
        assert without_req_id(reply) == {
            "ok": False,
            "error": "Job not found or not in processing state: ghost",
        }
