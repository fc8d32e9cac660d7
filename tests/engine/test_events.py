"""Job events reach subscribers after the commit, in order; a slow subscriber is dropped."""

from __future__ import annotations

import pytest
import trio

from broker.events import DROPPED_SLOW, SUBSCRIBER_BUFFER
from broker.node.app import App
from tests.support.client import FrameClient
from tests.support.engine import drain, push


async def test_a_jobs_events_arrive_in_order(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:*"], queue="q")
    other = app.actor.bus.subscribe(["job:completed"])
    job_id = await push(client, maxAttempts=2, backoff=1)
    await push(client, "elsewhere")
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="x")
    await client.call("PULL", queue="q", timeout=1000)
    await client.call("Progress", id=job_id, progress=50)
    await client.call("ACK", id=job_id)
    assert [event for event, _ in drain(subscription)] == [
        "job:pushed", "job:active", "job:retried", "job:delayed", "job:active",
        "job:progress", "job:completed",
    ]  # fmt: skip
    assert drain(other) == [("job:completed", job_id)]


async def test_a_slow_subscriber_is_dropped_not_waited_for(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:pushed"])
    await client.call("PUSHB", queue="q", jobs=[{"data": i} for i in range(SUBSCRIBER_BUFFER + 1)])
    assert subscription.dropped == DROPPED_SLOW
    assert len(drain(subscription)) == SUBSCRIBER_BUFFER
    assert not app.actor.engine.state.emitting  # nobody left listening


async def test_a_retry_event_says_why_and_how_long(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:retried"])
    job_id = await push(client, maxAttempts=2, backoff={"type": "fixed", "delay": 5000})
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="boom")
    message = subscription.receive.receive_nowait()
    assert message["data"] == {"queue": "q", "jobId": job_id, "error": "boom", "delay": 5000}
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["state"], job["startedAt"]) == ("delayed", None)  # no longer started


async def test_a_failure_event_says_why(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:failed"])
    job_id = await push(client, maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="boom")
    message = subscription.receive.receive_nowait()
    assert message["data"] == {"queue": "q", "jobId": job_id, "error": "boom"}


async def test_a_stall_event_says_how_many_times(
    client: FrameClient, app: App, autojump_clock
) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:stalled"])
    job_id = await push(client, stallTimeout=1000, maxAttempts=5)
    for _ in range(2):
        await client.call("PULL", queue="q")
        await trio.sleep(1.001)
    counts = []
    while True:
        try:
            message = subscription.receive.receive_nowait()
        except trio.WouldBlock:
            break
        counts.append(message["data"])
    assert counts == [{"queue": "q", "jobId": job_id, "stallCount": n} for n in (1, 2)]


async def test_drained_jobs_are_announced_as_removed(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:removed"])
    job_id = await push(client)
    assert (await client.call("Drain", queue="q"))["count"] == 1
    assert drain(subscription) == [("job:removed", job_id)]


async def test_an_event_carries_the_time_it_happened(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:*"], queue="q")
    before = (await client.call("Ping"))["data"]["time"]
    await client.call("PUSH", queue="q", data=1, delay=60_000)
    after = (await client.call("Ping"))["data"]["time"]
    message = subscription.receive.receive_nowait()
    assert (message["event"], message["data"]["queue"]) == ("job:pushed", "q")
    assert before - 1 <= message["ts"] <= after + 1  # Ping shows whole milliseconds


async def test_a_delayed_job_event_says_how_long_it_waits(client: FrameClient, app: App) -> None:
    assert app.actor is not None
    subscription = app.actor.bus.subscribe(["job:delayed"])
    job_id = await push(client, delay=60_000)
    data = subscription.receive.receive_nowait()["data"]
    assert data == {"queue": "q", "jobId": job_id, "delay": pytest.approx(60_000, abs=0.01)}
