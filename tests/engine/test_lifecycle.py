"""Logs, leases, transitions, progress and WaitJob: exact replies, stale tokens, several WaitJob
requests on one job and per connection, and changes that must reach a durable store (in-memory
connections, MockClock)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.engine.components.lifecycle import MAX_WAITS_PER_CONNECTION, TOO_MANY_WAITS
from broker.node.app import App
from store import open_sqlite
from tests.support.app import Broker, Connect
from tests.support.client import FrameClient
from tests.support.engine import (
    fail_for_good,
    get_job,
    lease,
    logs_of,
    push,
    state_of,
    without_req_id,
)


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


async def test_a_connection_holds_at_most_40_waitjobs(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    waiter, worker = await connect(), await connect()
    job_id = await push(worker)
    waits = [{"cmd": "WaitJob", "id": job_id, "timeout": 60_000, "reqId": f"w{n}"}
             for n in range(MAX_WAITS_PER_CONNECTION)]  # fmt: skip
    await waiter.send(*waits)
    assert (await waiter.call("WaitJob", id=job_id))["error"] == TOO_MANY_WAITS
    assert (await waiter.call("Ping"))["ok"] is True  # the connection still answers
    other = await connect()
    await other.send({"cmd": "WaitJob", "id": job_id, "timeout": 60_000, "reqId": "o"})
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id, result=1)
    answers = [await waiter.receive_for(f"w{n}") for n in range(MAX_WAITS_PER_CONNECTION)]
    assert all(answer["completed"] is True for answer in answers)
    assert (await other.receive_for("o"))["completed"] is True
    later = await push(worker)  # the waits were answered: room again
    assert (await waiter.call("WaitJob", id=later, timeout=1000))["completed"] is False


async def test_waitjobs_that_time_out_give_their_room_back(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    job_id = await push(client)
    for _ in range(3):  # more than the cap in all, never more than it at once
        waits = [{"cmd": "WaitJob", "id": job_id, "timeout": 1000, "reqId": f"t{n}"}
                 for n in range(MAX_WAITS_PER_CONNECTION)]  # fmt: skip
        await client.send(*waits)
        for n in range(MAX_WAITS_PER_CONNECTION):
            assert (await client.receive_for(f"t{n}"))["completed"] is False


@pytest.fixture
async def sqlite_broker(tmp_path: Path) -> Broker:
    """A broker on a SQLite file, restartable (the engine tracks changes for the store)."""
    path = str(tmp_path / "trioq.db")
    return Broker(lambda: open_sqlite(path))


async def test_keep_logs_zero_keeps_no_line(client: FrameClient) -> None:
    job_id = await push(client, keepLogs=0)
    added = await client.call("AddLog", id=job_id, message="dropped at once")
    assert without_req_id(added) == {"ok": True, "data": {"added": True}}
    assert await logs_of(client, job_id) == ([], 0)


async def test_extend_locks_reply_and_tokens(client: FrameClient, autojump_clock) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    stale = await client.call("ExtendLocks", ids=[job_id], tokens=["stale"], durations=[9000])
    assert without_req_id(stale) == {"ok": True, "count": 0}
    await trio.sleep(0.9)
    kept = await client.call("ExtendLocks", ids=[job_id], tokens=[token], durations=[None])
    assert without_req_id(kept) == {"ok": True, "count": 1}
    await trio.sleep(0.9)  # 1.8 s after the pull: the lease was renewed for its own 1 s TTL
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_move_to_delayed_of_a_leased_job(client: FrameClient, autojump_clock) -> None:
    await push(client)
    job_id, token = await lease(client)
    moved = await client.call("MoveToDelayed", id=job_id, token=token, delay=5000)
    assert moved["ok"] is True
    job = await get_job(client, job_id)
    assert (job["state"], job["startedAt"]) == ("delayed", None)  # no longer started
    await trio.sleep(4.9)
    assert await state_of(client, job_id) == "delayed"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_update_and_change_priority_refuse_finished_jobs(client: FrameClient) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=job_id)
    update = await client.call("Update", id=job_id, data={"v": 2})
    assert update["error"] == "Job not found or cannot be updated"
    assert (await client.call("Update", id="ghost", data={}))["error"] == update["error"]
    priority = await client.call("ChangePriority", id=job_id, priority=3)
    assert priority["error"] == "Job not found or not in queue"
    assert (await get_job(client, job_id))["data"] == {}


async def test_progress_reply_and_event(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:progress"])
    job_id = await push(client)
    await client.call("PULL", queue="q")
    assert without_req_id(await client.call("Progress", id=job_id, progress=40)) == {"ok": True}
    message = subscription.receive.receive_nowait()
    assert message["data"]["jobId"] == job_id and message["data"]["progress"] == 40


async def test_queued_changes_reach_the_store(sqlite_broker: Broker, autojump_clock) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        job_id = await push(client, data={"v": 1})
        assert (await client.call("Update", id=job_id, data={"v": 2}))["ok"] is True
        assert (await client.call("ChangePriority", id=job_id, priority=4))["ok"] is True
        delayed = await push(client, delay=60_000)
        assert (await client.call("ChangePriority", id=delayed, priority=9))["ok"] is True
    async with sqlite_broker.running() as connect:
        client = await connect()
        job = await get_job(client, job_id)
        assert (job["data"], job["priority"], job["state"]) == ({"v": 2}, 4, "prioritized")
        assert (await get_job(client, delayed))["priority"] == 9


async def test_progress_of_a_stored_job(sqlite_broker: Broker, autojump_clock) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        await client.call("PULL", queue="q")
        assert (await client.call("Progress", id=job_id, progress=30))["ok"] is True
        assert (await client.call("GetProgress", id=job_id))["progress"] == 30


async def test_wait_job_answers_failed_and_empty_results(connect: Connect) -> None:
    client = await connect()
    done = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    reply = await client.call("WaitJob", id=done, timeout=1000)
    assert without_req_id(reply) == {"ok": True, "completed": True, "result": None}
    dead = await push(client, maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=dead, error="x")
    reply = await client.call("WaitJob", id=dead, timeout=1000)
    assert without_req_id(reply) == {"ok": True, "completed": False, "state": "failed"}


async def test_two_waiters_on_one_job(connect: Connect, autojump_clock) -> None:
    waiter = await connect()
    worker = await connect()
    job_id = await push(worker)
    await waiter.send(
        {"cmd": "WaitJob", "id": job_id, "timeout": 1000, "reqId": "short"},
        {"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "long"},
    )
    timed_out = await waiter.receive_for("short")
    assert without_req_id(timed_out) == {"ok": True, "completed": False}
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id, result=7)
    done = await waiter.receive_for("long")
    assert without_req_id(done) == {"ok": True, "completed": True, "result": 7}


async def test_a_wait_answered_early_leaves_no_timer_error(
    connect: Connect, autojump_clock, caplog
) -> None:
    waiter = await connect()
    worker = await connect()
    job_id = await push(worker)
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 1000, "reqId": "w"})
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id)
    assert (await waiter.receive_for("w"))["completed"] is True
    with caplog.at_level(logging.ERROR):
        await trio.sleep(2)  # the answered wait's timer fires: nothing left to answer
        assert (await waiter.call("Ping"))["ok"] is True
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_get_logs_end_is_inclusive(client: FrameClient) -> None:
    job_id = await push(client)
    for i in range(5):
        await client.call("AddLog", id=job_id, message=f"m{i}")
    assert await logs_of(client, job_id, start=0, end=1) == (["m0", "m1"], 5)
    assert await logs_of(client, job_id, end=-2) == (["m0", "m1", "m2", "m3"], 5)
    reply = await client.call("GetLogs", id=job_id, start=4)
    assert reply["ok"] is True and len(reply["data"]["logs"]) == 1


async def test_extend_lock_without_duration_renews_its_ttl(
    client: FrameClient, autojump_clock
) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=1000)
    await trio.sleep(0.9)
    assert (await client.call("ExtendLock", id=job_id, token=token))["ok"] is True
    await trio.sleep(0.9)
    assert await state_of(client, job_id) == "active"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_leased_job_moves_and_is_discarded_with_its_token(client: FrameClient) -> None:
    await push(client)
    job_id, token = await lease(client)
    assert (await client.call("MoveToWait", id=job_id, token=token))["ok"] is True
    assert await state_of(client, job_id) == "waiting"
    job_id, token = await lease(client)
    assert (await client.call("Discard", id=job_id, token=token))["ok"] is True
    job = await get_job(client, job_id)
    assert (job["state"], job["failedReason"]) == ("failed", "Job discarded")


async def test_discard_and_get_progress_refuse_unknown_or_finished_jobs(
    client: FrameClient,
) -> None:
    assert (await client.call("Discard", id="ghost"))["error"] == "Job not found"
    job_id = await push(client)
    waiting = await client.call("GetProgress", id=job_id)
    assert waiting["error"] == "Job not found or not active"
    ghost = await client.call("GetProgress", id="ghost")
    assert ghost["error"] == "Job not found or not active"
    await client.call("PULL", queue="q")
    await client.call("ACK", id=job_id)
    assert (await client.call("Discard", id=job_id))["error"] == "Job not found"
    assert await state_of(client, job_id) == "completed"


async def test_promote_jobs_of_an_unknown_queue(client: FrameClient) -> None:
    reply = await client.call("PromoteJobs", queue="nothing-here")
    assert without_req_id(reply) == {"ok": True, "count": 0}


async def test_a_waiter_on_another_job_is_kept(connect: Connect, autojump_clock, caplog) -> None:
    waiter = await connect()
    worker = await connect()
    watched = await push(worker)
    other = await push(worker)
    await waiter.send({"cmd": "WaitJob", "id": watched, "timeout": 10_000, "reqId": "w"})
    await worker.call("PULLB", queue="q", count=2)
    with caplog.at_level(logging.ERROR):
        assert (await worker.call("ACK", id=other))["ok"] is True  # nobody waits for it
        assert (await worker.call("ACK", id=watched, result="r"))["ok"] is True
        assert (await waiter.receive_for("w"))["result"] == "r"
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_cleared_logs_stay_cleared(sqlite_broker: Broker, autojump_clock) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        job_id = await push(client)
        for i in range(3):
            await client.call("AddLog", id=job_id, message=f"m{i}")
        assert (await client.call("ClearLogs", id=job_id, keepLogs=1))["ok"] is True
    async with sqlite_broker.running() as connect:
        client = await connect()
        assert await logs_of(client, job_id) == (["m2"], 1)


async def test_extend_lock_is_a_heartbeat(client: FrameClient, autojump_clock) -> None:
    await push(client)
    job_id, token = await lease(client, ttl=5000)
    await trio.sleep(1)
    assert (await client.call("ExtendLock", id=job_id, token=token, duration=5000))["ok"]
    job = await get_job(client, job_id)
    assert job["lastHeartbeat"] - job["startedAt"] == 1000


async def test_an_extended_lease_survives_a_restart(
    sqlite_broker: Broker, autojump_clock
) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        await push(client)
        job_id, token = await lease(client, ttl=1000)
        extended = await client.call("ExtendLock", id=job_id, token=token, duration=60_000)
        assert extended["ok"] is True
    async with sqlite_broker.running() as connect:
        client = await connect()
        await trio.sleep(30)  # the stored lease is the extended one, not the first second's
        assert await state_of(client, job_id) == "active"
        assert (await client.call("ACK", id=job_id, token=token))["ok"] is True


async def test_a_promoted_job_delayed_again_waits_its_new_delay(
    client: FrameClient, autojump_clock
) -> None:
    # Every reschedule retires the job's pending promotion timers: none of the earlier ones
    # (at 10 s, and the retry's at 50 s) may promote it before its last delay.
    job_id = await push(client, delay=10_000, maxAttempts=3,
                        backoff={"type": "fixed", "delay": 50_000})  # fmt: skip
    assert (await client.call("Promote", id=job_id))["ok"] is True
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id)
    assert (await client.call("ChangeDelay", id=job_id, delay=100_000))["ok"] is True
    await trio.sleep(99.9)
    assert await state_of(client, job_id) == "delayed"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"


async def test_a_job_changed_and_removed_in_one_pass_stays_gone(sqlite_broker: Broker) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        await push(client)
        job_id, token = await lease(client)
        await client.send(  # one pass: the lease's renewal is written, then the ACK forgets it
            {"cmd": "ExtendLock", "id": job_id, "token": token, "duration": 60_000, "reqId": "x"},
            {"cmd": "ACK", "id": job_id, "token": token, "removeOnComplete": True, "reqId": "a"},
        )
        assert (await client.receive_for("a"))["ok"] is True
    async with sqlite_broker.running() as connect:
        client = await connect()
        assert await state_of(client, job_id) == "unknown"


async def test_a_timed_debounce_window_outlasts_a_restart_of_its_started_job(
    sqlite_broker: Broker, autojump_clock
) -> None:
    async with sqlite_broker.running() as connect:
        client = await connect()
        first = await push(client, debounceId="d", debounceTtl=60_000)
        await lease(client)
    async with sqlite_broker.running() as connect:
        client = await connect()
        assert await push(client, debounceId="d", debounceTtl=60_000) == first
        await trio.sleep(60)
        assert await push(client, debounceId="d", debounceTtl=60_000) != first
