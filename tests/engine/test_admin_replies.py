"""Operator commands, reply by reply: what Stats, Metrics, Clean, Obliterate, RetryCompleted and
the fixed answers send back, field for field."""

from __future__ import annotations

import os

import pytest
import trio

from broker.engine.components import admin
from broker.engine.components.admin import rss_mib
from broker.engine.core import Engine
from broker.engine.state.telemetry import MAX_DATA_POINTS
from protocol.admin import Prometheus
from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.stores import StoreFactory


async def settle(client: FrameClient, job_id: str, verdict: str, **fields: object) -> None:
    """Pull every ready job of the job's queue and ACK or FAIL this one."""
    await client.call("PULLB", queue=(await client.call("GetJob", id=job_id))["job"]["queue"],
                      count=100)  # fmt: skip
    assert (await client.call(verdict, id=job_id, **fields))["ok"] is True


async def test_stats_adds_up_every_state_over_every_queue(
    client: FrameClient, autojump_clock
) -> None:
    await trio.sleep(10)
    for queue in ("a", "b"):
        await push(client, queue)
        await push(client, queue, priority=3)
    await push(client, "a", delay=60_000)
    active = await push(client, "c")
    done = await push(client, "c")
    failed = await push(client, "c", maxAttempts=1)
    await client.call("PULLB", queue="c", count=3)
    await client.call("ACK", id=done)
    await client.call("FAIL", id=failed, error="boom")
    assert await state_of(client, active) == "active"
    stats = await client.call("Stats")
    del stats["reqId"]
    assert stats == {
        "ok": True,
        "stats": {"waiting": 4, "active": 1, "delayed": 1, "dlq": 1, "completed": 1,
                  "failed": 1, "uptime": 10_000},
    }  # fmt: skip


async def test_metrics_replies_in_full(client: FrameClient) -> None:
    job_id = await push(client)
    await settle(client, job_id, "ACK")
    metrics = await client.call("Metrics")
    assert metrics["ok"] is True
    assert set(metrics["metrics"]) == {
        "totalPushed", "totalPulled", "totalCompleted", "totalFailed", "memoryUsageMb",
    }  # fmt: skip
    assert metrics["metrics"]["memoryUsageMb"] > 0
    per_minute = await client.call("Metrics", queue="q", type="completed")
    assert (per_minute["ok"], per_minute["data"]["data"]) == (True, [1])


def test_rss_mib_is_this_process_resident_memory() -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    for _ in range(100):  # the process may grow between the reads: retry until it did not
        with open("/proc/self/statm") as statm:
            before = int(statm.read().split()[1])
        reported = rss_mib()
        with open("/proc/self/statm") as statm:
            after = int(statm.read().split()[1])
        if before == after:
            break
    assert before == after
    assert isinstance(reported, float)
    assert reported == round(before * page / 2**20, 1)


def test_rss_mib_is_zero_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getpid", lambda: 2**31 - 1)  # no such process under /proc
    assert rss_mib() == 0.0


def test_rss_mib_is_given_to_one_decimal(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    pages = round(3.05 * 2**20 / page)  # near 3.05 MiB (3.051 with 4 KiB pages, 3.047 16 KiB)
    exact = pages * page / 2**20
    assert round(exact, 1) != round(exact, 2)  # the sizes this test needs to tell apart
    statm = tmp_path / "statm"
    statm.write_text(f"9999 {pages} 0 0 0 0 0\n")
    real_open = open
    monkeypatch.setattr(admin, "open", lambda _, *a, **k: real_open(statm, *a, **k), raising=False)
    assert rss_mib() == round(exact, 1)


async def test_stats_uptime_is_whole_milliseconds(client: FrameClient, autojump_clock) -> None:
    await trio.sleep(1.2345678)
    uptime = (await client.call("Stats"))["stats"]["uptime"]
    assert (uptime, type(uptime)) == (1234, int)  # the reference's unit, never a fraction
    overview = (await client.call("DashboardOverview"))["data"]["stats"]["uptime"]
    assert (overview, type(overview)) == (1234, int)


async def test_stats_of_a_broker_without_queues_are_zero(client: FrameClient) -> None:
    stats = (await client.call("Stats"))["stats"]
    del stats["uptime"]
    assert stats == {
        "waiting": 0, "active": 0, "delayed": 0, "dlq": 0, "completed": 0, "failed": 0,
    }  # fmt: skip


async def test_fixed_replies(client: FrameClient) -> None:
    replies = [
        await client.call("TrimEvents", queue="q", maxLength=0),
        await client.call("StorageStatus"),
        await client.call("ListQueues"),
    ]
    for reply in replies:
        del reply["reqId"]
    assert replies == [
        {"ok": True, "data": {"removed": 0}},
        {"ok": True, "data": {"diskFull": False, "error": None, "since": None}},
        {"ok": True, "queues": []},
    ]


def test_prometheus_without_metrics_is_a_clear_error() -> None:
    class Session:
        def __init__(self) -> None:
            self.replies: list[dict[str, object]] = []

        def stage_reply(self, reply: dict[str, object], req_id: object) -> None:
            self.replies.append(reply)

    session = Session()
    Engine().execute(session, Prometheus(), 0.0)  # an engine no app wired to its metrics
    assert session.replies == [{"ok": False, "error": "Prometheus metrics are not available"}]


async def test_counts_per_priority_count_queued_jobs_only(client: FrameClient) -> None:
    await push(client, priority=1.5)
    await push(client, priority=2.0)
    await push(client, priority=2)
    await push(client, priority=2.0**40)  # a whole float past 32 bits stays a float
    for _ in range(2):
        await settle(client, await push(client, "busy", priority=7), "ACK")
    await push(client, "busy", priority=4)
    running = await push(client, "busy", priority=7)
    await client.call("PULL", queue="busy")
    assert await state_of(client, running) == "active"
    reply = await client.call("GetCountsPerPriority", queue="q")
    del reply["reqId"]
    assert reply == {"ok": True, "queue": "q", "counts": {"1.5": 1, "2": 2, "1099511627776": 1}}
    assert (await client.call("GetCountsPerPriority", queue="busy"))["counts"] == {"4": 1}


async def test_job_by_custom_id_replies_ok(client: FrameClient) -> None:
    await push(client, jobId="mine")
    reply = await client.call("GetJobByCustomId", customId="mine")
    assert (reply["ok"], reply["job"]["id"]) == (True, "mine")


async def test_clean_takes_only_the_state_asked_for_from_grace_on(
    client: FrameClient, autojump_clock
) -> None:
    old_done = await push(client)
    old_failed = await push(client, maxAttempts=1)
    old_active = await push(client)
    await settle(client, old_done, "ACK")
    await client.call("FAIL", id=old_failed, error="boom")
    await trio.sleep(5)
    young_done = await push(client)
    await settle(client, young_done, "ACK")
    waiting = await push(client)  # exactly 5 s old when cleaned below
    await trio.sleep(5)
    queued = await client.call("Clean", queue="q", grace=5000)
    assert queued["ids"] == [waiting]  # not the older active or finished ones
    done = await client.call("Clean", queue="q", grace=10_000, state="completed")
    assert done["ids"] == [old_done]  # finished exactly 10 s ago; not the failed one
    states = [await state_of(client, i) for i in (old_failed, old_active, young_done)]
    assert states == ["failed", "active", "completed"]


async def test_retry_completed_one_or_all_starts_them_afresh(client: FrameClient) -> None:
    first, second, third = [await push(client) for _ in range(3)]
    failed = await push(client, maxAttempts=1)
    await client.call("PULLB", queue="q", count=4)
    await client.call("Progress", id=first, progress=50)
    for job_id in (first, second, third):
        await client.call("ACK", id=job_id, result=1)
    await client.call("FAIL", id=failed, error="boom")
    one = await client.call("RetryCompleted", queue="q", id=second)
    assert (one["ok"], one["count"]) == (True, 1)
    assert [await state_of(client, i) for i in (first, second)] == ["completed", "waiting"]
    assert (await client.call("RetryCompleted", queue="q"))["count"] == 2
    assert [await state_of(client, i) for i in (first, third, failed)] == [
        "waiting", "waiting", "failed",
    ]  # fmt: skip
    assert (await client.call("GetJob", id=first))["job"]["progress"] == 0


async def test_obliterate_forgets_the_queue_everywhere(client: FrameClient, autojump_clock) -> None:
    assert (await client.call("Obliterate", queue="never-used"))["ok"] is True
    await settle(client, await push(client), "ACK")
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 30_000, "reqId": "parked"})
    await trio.sleep(1)
    await client.call("Obliterate", queue="q")
    assert (await client.receive_for("parked"))["job"] is None  # answered now, not in 30 s
    view = await client.call("Metrics", queue="q", type="completed")
    assert view["data"]["data"] == []


async def test_obliterate_and_clean_are_stored(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        gone = await push(client, "gone")
        await client.call("Pause", queue="gone")
        assert (await client.call("Obliterate", queue="gone"))["ok"] is True
        cleaned = await push(client)
        assert (await client.call("Clean", queue="q", grace=0))["ids"] == [cleaned]
    async with broker.running() as connect:
        client = await connect()
        assert [await state_of(client, i) for i in (gone, cleaned)] == ["unknown", "unknown"]
        assert (await client.call("IsPaused", queue="gone"))["paused"] is False


async def test_queue_metrics_keep_two_weeks_of_minutes(client: FrameClient, autojump_clock) -> None:
    await settle(client, await push(client), "ACK")
    await trio.sleep((MAX_DATA_POINTS - 1) * 60)  # the first minute is the oldest one kept
    await settle(client, await push(client), "ACK")
    view = (await client.call("Metrics", queue="q", type="completed"))["data"]
    assert view["count"] == MAX_DATA_POINTS
    assert (view["data"][0], view["data"][-1], sum(view["data"])) == (1, 1, 2)
    assert view["meta"]["prevTS"] == (await client.call("Ping"))["data"]["time"]
    await trio.sleep(60)  # now it is one minute too old
    await settle(client, await push(client), "ACK")
    view = (await client.call("Metrics", queue="q", type="completed"))["data"]
    assert (view["data"], view["meta"]["count"]) == ([1, 1], 3)  # the first minute is gone
