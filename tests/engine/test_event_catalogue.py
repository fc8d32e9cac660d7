"""The reference's event catalogue: every event type it publishes reaches a subscriber, with its
names and fields, the periodic ones on time; subscribers get only what they asked for, and an
event nobody wants costs the engine nothing."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from broker.events import EVENT_NAMES, Subscription
from broker.node.app import App
from tests.support.client import FrameClient
from tests.support.engine import push

# The 34 event types of the issue: what the reference's dashboard and clients consume.
PUBLISHED = {
    "job:pushed", "job:active", "job:completed", "job:failed", "job:removed", "job:progress",
    "job:promoted", "job:discarded", "job:priority-changed", "job:data-updated",
    "job:delay-changed", "queue:counts", "queue:paused", "queue:resumed", "queue:drained",
    "queue:cleaned", "queue:obliterated", "cron:created", "cron:deleted", "dlq:added",
    "dlq:purged", "dlq:retry-all", "worker:connected", "worker:disconnected", "ratelimit:set",
    "ratelimit:cleared", "concurrency:set", "concurrency:cleared", "webhook:added",
    "webhook:removed", "config:dlq-changed", "config:stall-changed", "health:status",
    "stats:snapshot",
}  # fmt: skip


def drain(subscription: Subscription) -> list[dict[str, Any]]:
    """The messages the subscription holds now."""
    got = []
    while True:
        try:
            got.append(subscription.receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return got


def by_name(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        found.setdefault(message["event"], []).append(message["data"])
    return found


async def every_kind_of_change(client: FrameClient) -> dict[str, str]:
    """Commands that make the engine publish each of its event types; returns job ids."""
    ids = {"later": await push(client, "p", delay=60_000)}
    await client.call("ChangePriority", id=ids["later"], priority=4)
    await client.call("Update", id=ids["later"], data={"v": 2})
    await client.call("ChangeDelay", id=ids["later"], delay=30_000)
    await client.call("Promote", id=ids["later"])
    await client.call("Discard", id=ids["later"])
    ids["done"] = await push(client)
    await client.call("PULL", queue="q")
    await client.call("Progress", id=ids["done"], progress=40)
    await client.call("ACK", id=ids["done"])
    ids["bad"] = await push(client, maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=ids["bad"], error="boom")
    await client.call("RetryDlq", queue="q")
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=ids["bad"], error="boom")
    await client.call("PurgeDlq", queue="q")
    await push(client)
    await client.call("Drain", queue="q")
    await client.call("Clean", queue="q", grace=0, state="completed")
    for name in ("Pause", "Resume", "RateLimitClear", "ClearConcurrency", "Obliterate"):
        await client.call(name, queue="q")
    await client.call("RateLimit", queue="q", limit=5)
    await client.call("SetConcurrency", queue="q", limit=2)
    await client.call("SetStallConfig", queue="q", config={"stallInterval": 5000})
    await client.call("SetDlqConfig", queue="q", config={"maxEntries": 10})
    await client.call("Cron", name="nightly", queue="q", schedule="0 3 * * *")
    await client.call("CronDelete", name="nightly")
    await client.call("RegisterWorker", name="w1", queues=["q"], hostname="h", pid=7)
    await client.call("UnregisterWorker", workerId="w1")
    hook = await client.call("AddWebhook", url="https://93.184.216.34/hook", events=["*"])
    ids["hook"] = hook["data"]["webhookId"]
    await client.call("RemoveWebhook", webhookId=ids["hook"])
    return ids


async def test_every_event_type_reaches_a_subscriber_with_the_reference_fields(
    client: FrameClient, app: App, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["*"])
    ids = await every_kind_of_change(client)
    await trio.sleep(10.5)  # the counts coalesce; the snapshots come every 5 s and 10 s
    seen = by_name(drain(subscription))
    assert set(seen) >= PUBLISHED, sorted(PUBLISHED - set(seen))
    later, done, bad = ids["later"], ids["done"], ids["bad"]
    assert seen["job:priority-changed"] == [{"queue": "p", "jobId": later, "newPriority": 4}]
    assert seen["job:delay-changed"] == [{"queue": "p", "jobId": later, "newDelay": 30_000}]
    assert seen["job:data-updated"] == [{"queue": "p", "jobId": later}]
    assert seen["job:promoted"] == [{"queue": "p", "jobId": later}]
    assert seen["job:discarded"] == [{"queue": "p", "jobId": later}]
    assert {"queue": "q", "jobId": done, "progress": 40} in seen["job:progress"]
    assert seen["dlq:added"][0] == {"queue": "p", "jobId": later, "reason": "explicit_fail"}
    assert seen["dlq:added"][1] == {"queue": "q", "jobId": bad, "reason": "max_attempts_exceeded"}
    assert seen["dlq:retry-all"] == [{"queue": "q", "count": 1}]
    assert seen["dlq:purged"] == [{"queue": "q", "count": 1}]
    assert seen["queue:drained"] == [{"queue": "q", "count": 1}]
    assert seen["queue:cleaned"] == [{"queue": "q", "state": "completed", "count": 1}]
    for name in ("queue:paused", "queue:resumed", "queue:obliterated", "ratelimit:cleared",
                 "concurrency:cleared"):  # fmt: skip
        assert seen[name] == [{"queue": "q"}], name
    assert seen["ratelimit:set"] == [{"queue": "q", "max": 5, "duration": 1000}]
    assert seen["concurrency:set"] == [{"queue": "q", "concurrency": 2}]
    assert seen["config:stall-changed"] == [{"queue": "q", "config": {"stallInterval": 5000}}]
    assert seen["config:dlq-changed"] == [{"queue": "q", "config": {"maxEntries": 10}}]
    created = seen["cron:created"][0]
    assert (created["name"], created["queue"], created["pattern"]) == ("nightly", "q", "0 3 * * *")
    assert created["nextRun"] > 0 and "every" not in created
    assert seen["cron:deleted"] == [{"name": "nightly"}]
    assert seen["worker:connected"] == [
        {"workerId": "w1", "name": "w1", "queues": ["q"], "hostname": "h", "pid": 7}
    ]
    assert seen["worker:disconnected"] == [{"workerId": "w1"}]
    hook = {"id": ids["hook"], "url": "https://93.184.216.34/hook", "events": ["*"]}
    assert seen["webhook:added"] == [hook]
    assert seen["webhook:removed"] == [{"id": ids["hook"]}]
    counts = seen["queue:counts"][0]
    assert set(counts) == {"queue", "waiting", "prioritized", "active", "completed", "failed",
                           "delayed"}  # fmt: skip
    assert all(name in EVENT_NAMES for name in seen)


async def test_queue_counts_are_coalesced_and_exact_after_a_burst(
    client: FrameClient, app: App, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["queue:counts"])
    await client.call("PUSHB", queue="q", jobs=[{"data": n} for n in range(50)])
    await client.call("PUSH", queue="q", data=1, priority=3)
    await client.call("PULL", queue="q")  # the prioritized job
    await trio.sleep(0.05)
    counts = drain(subscription)
    assert [message["data"] for message in counts] == [
        {"queue": "q", "waiting": 50, "prioritized": 0, "active": 1, "completed": 0,
         "failed": 0, "delayed": 0}
    ]  # fmt: skip


async def test_the_periodic_snapshots_come_every_5_and_10_seconds_with_their_fields(
    client: FrameClient, app: App, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["stats:*", "health:status"])
    await push(client, "mail")
    await client.call("Pause", queue="mail")
    await client.call("RegisterWorker", name="w", queues=["mail"])
    await client.call("Cron", name="c", queue="mail", repeatEvery=60_000)
    started = trio.current_time()
    await trio.sleep(10.5)
    seen = drain(subscription)
    stats = [m for m in seen if m["event"] == "stats:snapshot"]
    health = [m for m in seen if m["event"] == "health:status"]
    assert (len(stats), len(health)) == (2, 1)
    assert health[0]["ts"] - stats[0]["ts"] == pytest.approx(5000)
    assert trio.current_time() - started == pytest.approx(10.5)
    snapshot = stats[0]["data"]
    assert (snapshot["waiting"], snapshot["totalPushed"], snapshot["cronJobs"]) == (1, 1, 1)
    assert snapshot["queues"]["mail"] == {
        "waiting": 1, "active": 0, "delayed": 0, "dlq": 0, "paused": True,
    }  # fmt: skip
    assert snapshot["workers"] == {"total": 1, "active": 1}
    for key in ("active", "delayed", "completed", "dlq", "totalCompleted", "totalFailed",
                "pushPerSec", "pullPerSec", "uptime"):  # fmt: skip
        assert isinstance(snapshot[key], int | float), key
    status = health[0]["data"]
    assert status["ok"] is True and status["uptime"] >= 10
    assert set(status["memory"]) == {"rss", "heapUsed"} and status["memory"]["rss"] > 0
    assert status["connections"] == {"ws": 0, "sse": 0, "tcp": 1}


async def test_a_subscriber_gets_only_its_names_and_its_queue(
    client: FrameClient, app: App, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    mail = app.actor.bus.subscribe(["queue:*", "worker:connected"], queue="mail")
    await push(client, "mail")
    for queue in ("mail", "other"):
        await client.call("Pause", queue=queue)
    await client.call("RegisterWorker", name="w", queues=["other"])
    await trio.sleep(0.05)
    assert [(m["event"], m["data"].get("queue")) for m in drain(mail)] == [
        ("queue:paused", "mail"), ("worker:connected", None), ("queue:counts", "mail"),
    ]  # fmt: skip


async def test_a_subscriber_of_the_snapshots_alone_costs_the_engine_nothing(
    client: FrameClient, app: App, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["stats:snapshot", "health:*"])
    await push(client)
    assert not app.actor.engine.state.emitting  # PUSH, PULL and ACK record nothing
    assert app.actor.engine.state.observers.events == []
    await trio.sleep(5.5)
    assert [m["event"] for m in drain(subscription)] == ["stats:snapshot"]
    app.actor.bus.unsubscribe(subscription)
    assert not app.actor.bus.wants("stats:snapshot")


async def test_a_snapshot_names_the_first_queues_and_counts_the_rest(
    client: FrameClient,
    app: App,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("broker.services.broadcasts.MAX_SNAPSHOT_QUEUES", 2)
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["stats:snapshot"])
    for queue in ("c", "a", "b"):
        await push(client, queue)
    await trio.sleep(5.5)
    snapshot = drain(subscription)[0]["data"]
    assert (sorted(snapshot["queues"]), snapshot["queuesOmitted"]) == (["a", "b"], 1)
