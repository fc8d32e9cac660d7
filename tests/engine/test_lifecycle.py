"""Logs, leases, transitions, progress and WaitJob (in-memory connections, MockClock)."""

from __future__ import annotations

import pytest
import trio

from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import fail_for_good, get_job, lease, logs_of, push, state_of


async def test_logs_page_and_cap(client: FrameClient) -> None:
    job_id = await push(client)
    for i in range(105):
        reply = await client.call("AddLog", id=job_id, message=f"m{i}", level="warn")
        assert reply["data"] == {"added": True}
    messages, count = await logs_of(client, job_id)
    assert count == 100 and messages[0] == "m5" and messages[-1] == "m104"
    assert await logs_of(client, job_id, start=1, end=2) == (["m6", "m7"], 100)
    assert (await logs_of(client, job_id, start=-2))[0] == ["m103", "m104"]
    entry = (await client.call("GetLogs", id=job_id))["data"]["logs"][0]
    assert entry["level"] == "warn" and isinstance(entry["timestamp"], float | int)


async def test_log_rules(client: FrameClient) -> None:
    missing = await client.call("AddLog", id="ghost", message="x")
    assert missing["error"] == "Job not found"
    assert (await client.call("GetLogs", id="ghost"))["data"] == {"logs": [], "count": 0}
    job_id = await push(client, keepLogs=2)
    bad = await client.call("AddLog", id=job_id, message="x", level="loud")
    assert bad["error"] == "level must be one of info, warn, error"
    for i in range(4):
        await client.call("AddLog", id=job_id, message=f"m{i}")
    assert await logs_of(client, job_id) == (["m2", "m3"], 2)  # the job's keepLogs applies
    entry = (await client.call("GetLogs", id=job_id))["data"]["logs"][0]
    assert entry["level"] == "info"


async def test_clear_logs_keeps_the_newest(client: FrameClient) -> None:
    job_id = await push(client)
    for i in range(5):
        await client.call("AddLog", id=job_id, message=f"m{i}")
    bad = await client.call("ClearLogs", id=job_id, keepLogs="many")
    assert bad["error"] == "keepLogs must be a number"
    assert (await logs_of(client, job_id))[1] == 5
    await client.call("ClearLogs", id=job_id, keepLogs="2.5")
    assert await logs_of(client, job_id) == (["m3", "m4"], 2)
    await client.call("ClearLogs", id=job_id, keepLogs=10)
    assert (await logs_of(client, job_id))[1] == 2
    await client.call("ClearLogs", id=job_id, keepLogs=-1)
    assert await logs_of(client, job_id) == ([], 0)
    assert (await client.call("ClearLogs", id="ghost"))["ok"] is True


async def test_extend_lock(client: FrameClient, autojump_clock) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    wrong = await client.call("ExtendLock", id=job_id, token="nope", duration=5000)
    assert wrong["error"] == "Lock not found or invalid token"
    nan = await client.call("ExtendLock", id=job_id, token=token, duration=float("nan"))
    assert nan["error"] == "duration must be a finite number"
    assert (await client.call("ExtendLock", id=job_id, token=token, duration=5000))["ok"]
    await trio.sleep(4.9)
    assert await state_of(client, job_id) == "active"
    await client.call("ExtendLock", id=job_id, token=token, duration=0)  # ends the lease now
    await trio.sleep(0.001)
    assert await state_of(client, job_id) == "waiting"


async def test_extend_locks_is_all_or_nothing_on_bad_input(
    client: FrameClient, autojump_clock
) -> None:
    await push(client)
    await push(client)
    reply = await client.call("PULLB", queue="q", count=2, owner="w", lockTtl=1000)
    ids = [job["id"] for job in reply["jobs"]]
    bad = await client.call("ExtendLocks", ids=ids, tokens=reply["tokens"], durations=[5000, "x"])
    assert bad["error"] == "durations[1]: duration must be a number"
    good = await client.call(
        "ExtendLocks", ids=[*ids, "ghost"], tokens=[*reply["tokens"], None],
        durations=[5000, 5000, 5000],
    )  # fmt: skip
    assert good["count"] == 2
    await trio.sleep(2)
    assert [await state_of(client, i) for i in ids] == ["active", "active"]


async def test_change_delay(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, delay=60_000)
    assert (await client.call("ChangeDelay", id=job_id, delay="1000"))["ok"] is True
    await trio.sleep(1.001)
    assert await state_of(client, job_id) == "waiting"
    later = await push(client)
    assert (await client.call("ChangeDelay", id=later, delay=5000))["ok"] is True
    assert await state_of(client, later) == "delayed"
    bad = await client.call("ChangeDelay", id=later, delay=float("inf"))
    assert bad["error"] == "delay must be a finite number"
    front = await push(client)
    await client.call("ChangeDelay", id=front, delay=-1000)  # ready, ahead of later jobs
    assert (await client.call("PULL", queue="q"))["job"]["id"] == front


async def test_change_delay_of_a_leased_job_needs_its_token(client: FrameClient) -> None:
    await push(client)
    job_id, token = await lease(client)
    missing = await client.call("ChangeDelay", id=job_id, delay=1000)
    assert missing["error"] == f"Lock token required for job {job_id}"
    assert (await client.call("ChangeDelay", id=job_id, delay=1000, token=token))["ok"]
    assert await state_of(client, job_id) == "delayed"
    done = await push(client, "other")
    await client.call("PULL", queue="other")
    await client.call("ACK", id=done)
    finished = await client.call("ChangeDelay", id=done, delay=10)
    assert finished["error"] == "Job not found or cannot change delay"


async def test_move_to_wait_by_state(client: FrameClient) -> None:
    delayed = await push(client, "m", delay=60_000)
    assert (await client.call("MoveToWait", id=delayed))["ok"]
    assert await state_of(client, delayed) == "waiting"
    await client.call("PULL", queue="m")
    assert (await client.call("MoveToWait", id=delayed))["ok"]
    job = await get_job(client, delayed)
    assert (job["state"], job["attempts"]) == ("waiting", 0)
    dead = await push(client, "m", maxAttempts=1)
    await client.call("PULLB", queue="m", count=5)
    await client.call("FAIL", id=dead, error="x")
    await client.call("ACK", id=delayed)
    assert (await client.call("MoveToWait", id=dead))["ok"]
    job = await get_job(client, dead)
    assert (job["state"], job["attempts"], job["failedReason"]) == ("waiting", 0, None)
    done = await client.call("MoveToWait", id=delayed)
    assert done["error"] == "Cannot move job from state 'completed' to waiting"
    ghost = await client.call("MoveToWait", id="ghost")
    assert ghost["error"] == "Cannot move job from state 'unknown' to waiting"


async def test_promote_and_promote_jobs(client: FrameClient) -> None:
    ids = [await push(client, delay=60_000 + i) for i in range(4)]
    assert (await client.call("Promote", id=ids[3]))["ok"]
    assert (await client.call("PromoteJobs", queue="q", count=2))["count"] == 2
    states = [await state_of(client, i) for i in ids]
    assert states == ["waiting", "waiting", "delayed", "waiting"]
    assert (await client.call("PromoteJobs", queue="q"))["count"] == 1
    again = await client.call("Promote", id=ids[0])
    assert again["error"] == "Job not found or not delayed"


async def test_change_priority_reorders(client: FrameClient) -> None:
    first = await push(client)
    second = await push(client)
    assert (await client.call("ChangePriority", id=second, priority=7))["ok"]
    assert await state_of(client, second) == "prioritized"
    assert (await client.call("PULL", queue="q"))["job"]["id"] == second
    grouped = await push(client, "g", groupId="grp")
    bad = await client.call("ChangePriority", id=grouped, priority=1.5)
    assert bad["error"] == "priority must be an integer when groupId is set"
    assert (await get_job(client, first))["priority"] == 0


async def test_progress_of_an_unknown_job_is_job_not_found(client: FrameClient) -> None:
    assert (await client.call("Progress", id="ghost", progress=5))["error"] == "Job not found"


async def test_update_progress_cancel_discard(client: FrameClient) -> None:
    job_id = await push(client, data={"v": 1})
    assert (await client.call("Update", id=job_id, data={"v": 2}))["ok"]
    assert (await get_job(client, job_id))["data"] == {"v": 2}
    idle = await client.call("Progress", id=job_id, progress=50)
    assert idle["error"] == "Job is not active (current state: waiting)"  # the reference's
    await client.call("PULL", queue="q")
    await client.call("Progress", id=job_id, progress=150, message="almost")
    assert await client.call("GetProgress", id=job_id) == {
        "ok": True, "progress": 100, "message": "almost", "reqId": "7",
    }  # fmt: skip
    gone = await push(client)
    assert (await client.call("Cancel", id=gone))["ok"]
    assert await state_of(client, gone) == "unknown"
    active = await client.call("Cancel", id=job_id)
    assert active["error"] == "Job not found or cannot be cancelled"
    assert (await client.call("Discard", id=job_id))["ok"]
    assert await state_of(client, job_id) == "failed"


async def test_wait_job(connect: Connect, autojump_clock) -> None:
    waiter = await connect()
    worker = await connect()
    job_id = await push(worker)
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id, result="done")
    assert await waiter.receive_for("w") == {
        "ok": True, "completed": True, "result": "done", "reqId": "w",
    }  # fmt: skip
    other = await push(worker)
    start = trio.current_time()
    reply = await waiter.call("WaitJob", id=other, timeout=2000)
    assert reply["completed"] is False and trio.current_time() - start >= 2
    missing = await waiter.call("WaitJob", id="ghost")
    assert missing["error"] == "Job not found"


@pytest.mark.parametrize(
    ("push_options", "ack"), [({"removeOnComplete": True}, {}), ({}, {"removeOnComplete": True})]
)
async def test_wait_job_on_a_job_removed_as_it_completes(
    connect: Connect, autojump_clock, push_options: dict[str, bool], ack: dict[str, bool]
) -> None:
    # Removed on completion (by its push or by its ACK): it did complete, with a result.
    waiter = await connect()
    worker = await connect()
    job_id = await push(worker, **push_options)
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id, result={"sent": 3}, **ack)
    with trio.fail_after(1):
        reply = await waiter.receive_for("w")
    assert reply == {"ok": True, "completed": True, "result": {"sent": 3}, "reqId": "w"}
    assert await state_of(worker, job_id) == "unknown"
    later = await waiter.call("WaitJob", id=job_id, timeout=1000)  # asked after it went
    del later["reqId"]
    assert later == {"ok": True, "completed": True, "result": None}  # (its result is not kept)


async def test_wait_job_on_an_id_pushed_again_waits_for_the_new_job(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, jobId="j", removeOnComplete=True)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=job_id)
    await push(client, jobId="j")  # a new job under the id: its completion is still to come
    start = trio.current_time()
    reply = await client.call("WaitJob", id="j", timeout=2000)
    assert reply["completed"] is False and trio.current_time() - start >= 2


@pytest.mark.parametrize(
    "removal", [{"cmd": "Cancel", "id": "j"}, {"cmd": "Drain", "queue": "q"}]
)
async def test_wait_job_on_a_job_that_is_removed(
    connect: Connect, autojump_clock, removal: dict[str, str]
) -> None:
    waiter = await connect()
    other = await connect()
    job_id = await push(other, jobId="j")
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    assert (await other.call(**removal))["ok"] is True
    with trio.fail_after(1):  # answered at the removal, not at the timeout
        reply = await waiter.receive_for("w")
    assert reply == {"ok": True, "completed": False, "state": "unknown", "reqId": "w"}


async def test_wait_job_on_a_job_that_fails(connect: Connect, autojump_clock) -> None:
    waiter = await connect()
    worker = await connect()
    job_id = await push(worker, maxAttempts=1)
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    await worker.call("PULL", queue="q")
    await worker.call("FAIL", id=job_id)
    with trio.fail_after(1):  # answered at the failure, not at the timeout
        reply = await waiter.receive_for("w")
    assert reply == {"ok": True, "completed": False, "state": "failed", "reqId": "w"}


async def test_compact_memory_keeps_every_job_and_timer_that_matters(
    client: FrameClient, app, autojump_clock
) -> None:
    ready = await push(client)
    later = await push(client, delay=5000)
    for _ in range(50):  # leave stale heap entries and answered polls behind
        await client.call("ChangePriority", id=ready, priority=1)
        await client.call("PULLB", queue="idle", count=1, timeout=10)
    assert (await client.call("CompactMemory"))["ok"] is True
    state = app.actor.engine.state
    assert len(state.queues["q"].ready) == 1
    assert "idle" not in state.queues
    await trio.sleep(5.001)
    assert await state_of(client, later) == "waiting"
    pulled = await client.call("PULLB", queue="q", count=5)
    assert [job["id"] for job in pulled["jobs"]] == [ready, later]


async def test_compact_memory_drops_only_the_timers_that_no_longer_apply(
    client: FrameClient, app, autojump_clock
) -> None:
    leased = await push(client, queue="lease", backoff=0)
    first = (await client.call("PULL", queue="lease", owner="w", lockTtl=10_000))["token"]
    await client.call("FAIL", id=leased, token=first)  # retried at once
    await client.call("PULL", queue="lease", owner="w", lockTtl=10_000)  # a second lease
    later = await push(client, queue="later", delay=5000)
    await client.call("ChangeDelay", id=later, delay=6000)
    retried = await push(client, queue="retried", timeout=2000, stallTimeout=1500, backoff=60_000)
    await client.call("PULL", queue="retried")
    await client.call("FAIL", id=retried)  # its timeout and stall check no longer apply
    timed = await push(client, queue="timed", timeout=2000, maxAttempts=1)
    stalled = await push(client, queue="stalled", stallTimeout=1500, maxAttempts=5)
    await client.call("PULLB", queue="timed", count=1)
    await client.call("PULLB", queue="stalled", count=1)
    done = await push(client, queue="done", ttl=3000)
    await client.call("PULL", queue="done")
    await client.call("ACK", id=done)  # its ttl no longer applies
    expiring = await push(client, queue="expiring", ttl=3000)
    config = {"autoRetry": True, "autoRetryInterval": 1000}
    await client.call("SetDlqConfig", queue="dlq", config=config)
    dead = await fail_for_good(client, "dlq")
    await client.call("RetryDlq", queue="dlq", jobId=dead)
    await fail_for_good(client, "dlq", dead)  # its first auto-retry no longer applies
    assert (await client.call("CompactMemory"))["ok"] is True
    kinds = sorted(timer.kind for timer in app.actor.engine.state.wheel.heap)
    assert kinds == [
        "dlq-retry", "lease", "promote", "promote", "retention", "retention", "stall", "timeout",
        "ttl",
    ]  # fmt: skip
    await trio.sleep(10.001)  # every deadline kept still fires
    states = []
    for job_id in (leased, later, retried, timed, stalled, expiring, dead):
        job = await get_job(client, job_id)
        states.append((job["state"], job["stallCount"], job["failedReason"]))
    assert states == [
        ("waiting", 1, "Job failed"),  # the second lease expired
        ("waiting", 0, None),
        ("delayed", 0, "Job failed"),
        ("failed", 0, "Job timeout exceeded"),
        ("waiting", 1, None),
        ("failed", 0, "Job expired (ttl)"),
        ("waiting", 0, None),  # retried from the dead-letter queue by itself
    ]


async def test_set_webhook_enabled_for_an_unknown_webhook(client: FrameClient) -> None:
    reply = await client.call("SetWebhookEnabled", id="nope", enabled=True)
    assert reply["error"] == "Webhook not found"
