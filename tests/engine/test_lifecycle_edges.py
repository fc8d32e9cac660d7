"""Lifecycle commands at their edges: exact replies, stale tokens, several WaitJob requests on
one job, and changes that must reach a durable store (in-memory connections, MockClock)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from broker.node.app import App
from store import open_sqlite
from tests.conftest import Connect
from tests.engine.test_lifecycle import logs_of
from tests.engine.test_push_pull import push, state_of
from tests.engine.test_restart import Broker
from tests.engine.test_settle import get_job, lease
from tests.support.client import FrameClient


def without_req_id(reply: dict) -> dict:
    return {key: value for key, value in reply.items() if key != "reqId"}


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
