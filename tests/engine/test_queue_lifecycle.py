"""Issue 29: a queue costs nothing once it holds nothing, and their number is capped.

Every new name used to make a queue object (~2.8 KiB), reads included (100k `PULL` with
`timeout: 0` on fresh names: +157 MiB), and queues were never forgotten (300k queues of one job
each stayed, +956 MiB, after every job was cancelled). Now a read never makes one, an idle
queue (no job, parked poll, setting, cron or open group rate window) is forgotten a second
after it empties, and `--max-queues` caps how many exist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from broker.engine.rules import housekeeping
from broker.engine.state.engine_state import EngineState
from broker.engine.state.queues import SWEEP_DELAY_MS
from broker.node.app import App
from broker.node.config import Config
from tests.support.app import Connect, memory_connector, start_app
from tests.support.client import FrameClient
from tests.support.engine import push

SWEPT_S = 2 * SWEEP_DELAY_MS / 1000  # long enough for a sweep to have run


def held(app: App) -> EngineState:
    assert app.actor is not None
    return app.actor.engine.state


async def listed(client: FrameClient) -> list[str]:
    return (await client.call("ListQueues"))["queues"]


def without_req_id(reply: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in reply.items() if key not in ("reqId", "timestamp")}


READS: list[tuple[str, dict[str, Any]]] = [
    ("PULL", {"timeout": 0}),
    ("PULLB", {"count": 5, "timeout": 0}),
    ("IsPaused", {}),
    ("GetJobCounts", {}),
    ("Count", {}),
    ("GetCountsPerPriority", {}),
    ("GetQueueLimits", {}),
    ("GetStallConfig", {}),
    ("GetDlqConfig", {}),
    ("GetDlqStats", {}),
    ("Dlq", {}),
    ("GetJobs", {"state": ["waiting"]}),
    ("GetGroupConcurrency", {"groupId": "g"}),
    ("GetGroupRateLimit", {"groupId": "g"}),
    ("GetGroupRateLimitTtl", {"groupId": "g"}),
    ("IsGroupPaused", {"groupId": "g"}),
    ("GetGroupJobsCount", {"groupId": "g"}),
    ("GetGroupActiveCount", {"groupId": "g"}),
    ("GetGroupsJobsCount", {}),
    ("Metrics", {"type": "completed"}),
    ("Resume", {}),
    ("RateLimitClear", {}),
    ("ClearConcurrency", {}),
    ("RemoveGroupConcurrency", {"groupId": "g"}),
    ("RemoveGroupRateLimit", {"groupId": "g"}),
    ("ResumeGroup", {"groupId": "g"}),
    ("PromoteJobs", {}),
    ("Drain", {}),
    ("Clean", {"grace": 0}),
    ("RetryDlq", {}),
    ("PurgeDlq", {}),
    ("Obliterate", {}),
]


async def test_reads_of_a_queue_that_does_not_exist_make_nothing_and_answer_as_empty(
    connect: Connect, app: App, autojump_clock: object
) -> None:
    client, poller = await connect(), await connect()
    # `empty` exists, holding nothing but a parked poll: the answers of a queue with no jobs.
    await poller.send({"cmd": "PULL", "queue": "empty", "timeout": 60_000, "reqId": "p"})
    await trio.sleep(0.1)
    assert list(held(app).queues) == ["empty"]
    for command, fields in READS:
        fresh = await client.call(command, queue="fresh", **fields)
        empty = await client.call(command, queue="empty", **fields)
        named = repr(without_req_id(fresh)).replace("fresh", "empty")  # the queue's own name
        assert named == repr(without_req_id(empty)), command
        assert list(held(app).queues) in (["empty"], []), command  # Obliterate is last
    assert await listed(client) == []


async def test_dashboard_and_stats_of_a_queue_that_does_not_exist(
    client: FrameClient, app: App
) -> None:
    reply = await client.call("DashboardQueue", queue="fresh")
    assert reply["data"]["counts"]["waiting"] == 0 and reply["data"]["paused"] is False
    assert (await client.call("DashboardQueues"))["data"]["queues"] == []
    stats = (await client.call("Stats"))["stats"]
    assert (stats["waiting"], stats["active"], stats["dlq"]) == (0, 0, 0)
    assert held(app).queues == {}


async def test_a_queue_emptied_is_not_listed_and_is_forgotten_a_second_later(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    cancelled = await push(client, "cancelled")
    await push(client, "drained")
    done = await push(client, "acked", removeOnComplete=True)
    await push(client, "obliterated")
    assert await listed(client) == ["acked", "cancelled", "drained", "obliterated"]
    assert (await client.call("Cancel", id=cancelled))["ok"] is True
    assert (await client.call("Drain", queue="drained"))["count"] == 1
    assert (await client.call("PULL", queue="acked"))["job"]["id"] == done
    assert (await client.call("ACK", id=done))["ok"] is True
    assert (await client.call("Obliterate", queue="obliterated"))["ok"] is True
    assert await listed(client) == []  # at once, whether forgotten yet or not
    await trio.sleep(SWEPT_S)
    assert held(app).queues == {}
    # A queue forgotten is made again by the next push, and works as before.
    again = await push(client, "cancelled")
    assert (await client.call("PULL", queue="cancelled"))["job"]["id"] == again


async def test_thousands_of_queues_emptied_are_all_forgotten(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    ids = [await push(client, f"q{n}") for n in range(2000)]
    await client.send(*[{"cmd": "Cancel", "id": job_id, "reqId": job_id} for job_id in ids])
    await client.receive_for(ids[-1])
    await trio.sleep(SWEPT_S)
    assert held(app).queues == {}
    assert len(held(app).wheel) == 0  # no sweep left armed, no stale timer


async def test_what_keeps_an_empty_queue(
    connect: Connect, app: App, autojump_clock: object
) -> None:
    client, poller = await connect(), await connect()
    await client.call("Pause", queue="paused")
    await client.call("SetGroupConcurrency", queue="grouped", groupId="g", concurrency=1)
    await client.call("Cron", name="c", queue="cron", schedule="0 0 1 1 *", data={})
    await poller.send({"cmd": "PULL", "queue": "polled", "timeout": 5000, "reqId": "p"})
    failed = await push(client, "dead", maxAttempts=1)
    await client.call("PULL", queue="dead")
    await client.call("FAIL", id=failed, error="x")
    kept = await push(client, "done")
    await client.call("PULL", queue="done")
    await client.call("ACK", id=kept)
    await trio.sleep(SWEPT_S)
    everything = ["cron", "dead", "done", "grouped", "paused", "polled"]
    assert await listed(client) == everything and sorted(held(app).queues) == everything
    # Each undone: the queue is forgotten.
    await client.call("Resume", queue="paused")
    await client.call("RemoveGroupConcurrency", queue="grouped", groupId="g")
    await client.call("CronDelete", name="c")
    assert (await poller.receive_for("p"))["job"] is None  # its 5 s are up
    await client.call("PurgeDlq", queue="dead")
    await client.call("Clean", queue="done", grace=0, state="completed")
    await trio.sleep(SWEPT_S)
    assert await listed(client) == [] and held(app).queues == {}


async def test_a_cron_keeps_its_queue_through_an_obliterate(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    await client.call("Cron", name="c", queue="cq", repeatEvery=60_000, data={})
    await client.call("Obliterate", queue="cq")
    await trio.sleep(SWEPT_S)
    assert await listed(client) == ["cq"]
    await trio.sleep(60)  # it fires into its queue
    assert (await client.call("Count", queue="cq"))["count"] == 1


async def test_a_group_rate_window_outlives_the_queue_emptying(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    # One start per minute for group g: the queue empties after the first job, but forgetting
    # it would forget the window, and the second job would start at once.
    limit = {"limit": {"max": 1, "duration": 60_000}}
    first = await push(client, groupId="g", removeOnComplete=True)
    assert (await client.call("PULL", queue="q", group=limit))["job"]["id"] == first
    await client.call("ACK", id=first)
    await trio.sleep(SWEPT_S)
    second = await push(client, groupId="g")
    assert (await client.call("PULL", queue="q", group=limit))["job"] is None
    await trio.sleep(60)
    assert (await client.call("PULL", queue="q", group=limit))["job"]["id"] == second
    await client.call("ACK", id=second)
    await client.call("Clean", queue="q", grace=0, state="completed")
    await trio.sleep(61)  # its window closed, nothing is left: forgotten
    assert held(app).queues == {}


async def test_finish_counts_outlive_the_queue_and_are_kept_for_at_most_max_queues() -> None:
    state = EngineState(max_queues=2)
    for n, name in enumerate(("a", "b", "c")):
        state.observers.telemetry.record(name, "completed", 1_800_000_000_000.0 + n * 60_000)
    assert list(state.observers.telemetry.queues) == ["b", "c"]  # the oldest finish went
    state.observers.telemetry.record("b", "completed", 1_800_000_000_000.0 + 3 * 60_000)
    state.observers.telemetry.record("d", "completed", 1_800_000_000_000.0 + 4 * 60_000)
    # b finished in a later minute than c
    assert list(state.observers.telemetry.queues) == ["b", "d"]


@pytest.fixture
async def capped(nursery: trio.Nursery) -> AsyncIterator[tuple[App, Connect]]:
    """A broker that lets three queues exist."""
    app = await start_app(nursery, Config(port=0, http_port=0, memory=True, max_queues=3))
    yield app, memory_connector(app, nursery)
    app.shutdown()


def limit_error(what: str) -> str:
    return f"Queue limit reached: creating {what} would pass --max-queues (3)"


async def test_past_max_queues_a_new_queue_is_refused_and_nothing_changes(
    capped: tuple[App, Connect], autojump_clock: object
) -> None:
    app, connect = capped
    client = await connect()
    ids = [await push(client, name) for name in ("a", "b", "c")]
    refused: list[tuple[str, dict[str, Any]]] = [
        ("PUSH", {"data": 1}),
        ("PUSHB", {"jobs": [{"data": 1}, {"data": 2}]}),
        ("PULL", {"timeout": 1000}),
        ("Pause", {}),
        ("RateLimit", {"limit": 5}),
        ("SetConcurrency", {"limit": 2}),
        ("SetStallConfig", {"config": {"maxStalls": 2}}),
        ("SetDlqConfig", {"config": {"maxEntries": 2}}),
        ("SetGroupConcurrency", {"groupId": "g", "concurrency": 1}),
        ("PauseGroup", {"groupId": "g"}),
    ]
    for command, fields in refused:
        reply = await client.call(command, queue="d", **fields)
        assert reply["error"] == limit_error("queue 'd'"), command
    cron = await client.call("Cron", name="c", queue="d", schedule="0 0 1 1 *", data={})
    assert cron["error"] == limit_error("queue 'd'")
    flow = [{"id": f"f{n}", "queue": queue, "input": {"data": n}} for n, queue in
            enumerate(["a", "d", "e"])]  # fmt: skip
    assert (await client.call("PUSHF", jobs=flow))["error"] == limit_error("2 queues")
    assert (await client.call("PULL", queue="d", timeout=0))["job"] is None  # a read: fine
    assert sorted(held(app).queues) == ["a", "b", "c"] and len(held(app).jobs) == 3
    assert (await client.call("CronList"))["crons"] == []
    # One queue emptied makes room at once (no wait for the sweep).
    await client.call("Cancel", id=ids[0])
    assert (await client.call("PUSH", queue="d", data=1))["ok"] is True
    assert sorted(held(app).queues) == ["b", "c", "d"]


async def test_max_queues_is_a_setting(tmp_path: Any) -> None:
    from broker.node.config import load

    assert load(None, {}, {}).max_queues == 100_000
    assert load(None, {"TRIOQ_MAX_QUEUES": "50"}, {}).max_queues == 50
    assert load(None, {}, {"max_queues": "7"}).max_queues == 7


async def test_polls_served_while_a_sweep_is_armed_leave_no_timer_behind(
    connect: Connect, app: App, autojump_clock: object
) -> None:
    # The sweep's timer sits at the top of the wheel for a second: the timers of the polls
    # served meanwhile are still dropped under it, not kept until it fires.
    client, worker = await connect(), await connect()
    await client.call("Cancel", id=await push(client, "emptied"))  # a sweep is armed
    for n in range(3):
        await worker.send({"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": n})
        job_id = await push(client)
        assert (await worker.receive_for(n))["job"]["id"] == job_id
    assert [timer.kind for timer in held(app).wheel.heap] == ["queue-sweep"]


async def test_a_sweep_forgetting_many_queues_hands_the_heap_back(
    client: FrameClient, app: App, autojump_clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(housekeeping, "TRIM_AFTER", 5)
    monkeypatch.setattr(housekeeping, "trim_heap", lambda: trims.append(1))
    for count in (4, 5):  # four queues forgotten: no trim; five: one
        ids = [await push(client, f"q{count}-{n}") for n in range(count)]
        for job_id in ids:
            await client.call("Cancel", id=job_id)
        await trio.sleep(SWEPT_S)
        assert held(app).queues == {}
        assert len(trims) == count - 4
    assert housekeeping.MALLOC_TRIM is not None  # glibc: the trim is real here
    housekeeping.trim_heap()
