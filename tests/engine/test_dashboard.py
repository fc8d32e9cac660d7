"""The dashboard views, field by field: DashboardOverview, DashboardQueues, DashboardQueue."""

from __future__ import annotations

import trio

from tests.support.client import FrameClient
from tests.support.engine import push


async def fail_now(client: FrameClient, queue: str, **fields: object) -> str:
    """Push a job and fail it for good at once."""
    job_id = await push(client, queue, maxAttempts=1, **fields)
    await client.call("PULLB", queue=queue, count=100)
    await client.call("FAIL", id=job_id, error="boom")
    return job_id


async def test_overview_shows_totals_workers_and_crons(client: FrameClient, autojump_clock) -> None:
    await trio.sleep(10)
    done = await push(client)
    await push(client, delay=60_000)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    await fail_now(client, "q")
    await client.call("RegisterWorker", name="quiet")
    await trio.sleep(31)
    await client.call("RegisterWorker", name="busy")
    await client.call("RegisterWorker", name="busy too")
    await client.call("Cron", name="c", queue="cq", data=1, repeatEvery=3_600_000)
    now = (await client.call("Ping"))["data"]["time"]
    reply = await client.call("DashboardOverview")
    assert reply["ok"] is True
    data = reply["data"]
    assert data["stats"] == {
        "waiting": 0, "active": 0, "delayed": 1, "dlq": 1, "completed": 1, "failed": 1,
        "uptime": 41_000, "totalPushed": 3, "totalPulled": 2, "totalCompleted": 1,
        "totalFailed": 1,
    }  # fmt: skip
    assert data["memory"]["rss"] > 0
    workers = data["workers"]
    assert (workers["total"], workers["active"]) == (3, 2)
    assert [worker["id"] for worker in workers["list"]] == ["quiet", "busy", "busy too"]
    assert [cron["name"] for cron in data["crons"]] == ["c"]
    assert data["timestamp"] == now


async def test_queues_lists_every_queue_by_name(client: FrameClient, autojump_clock) -> None:
    await push(client, "b")
    await push(client, "b", priority=2)
    await push(client, "b", priority=2)
    await push(client, "b", delay=1000)
    await client.call("PULL", queue="b")  # one of the prioritized
    await fail_now(client, "a")
    await client.call("Pause", queue="a")
    now = (await client.call("Ping"))["data"]["time"]
    reply = await client.call("DashboardQueues")
    assert reply["ok"] is True
    assert reply["data"] == {
        "queues": [
            {"name": "a", "waiting": 0, "prioritized": 0, "delayed": 0, "active": 0, "dlq": 1,
             "paused": True},
            {"name": "b", "waiting": 1, "prioritized": 1, "delayed": 1, "active": 1, "dlq": 0,
             "paused": False},
        ],
        "timestamp": now,
    }  # fmt: skip


async def test_queue_view_previews_the_oldest_failures(client: FrameClient, autojump_clock) -> None:
    pushed = [await push(client, maxAttempts=1, data={"n": n}) for n in range(12)]
    await client.call("PULLB", queue="q", count=12)
    failed = pushed[::-1]  # failed newest first: the preview's order is not the ids' order
    for job_id in failed:
        await client.call("FAIL", id=job_id, error="boom")
        await trio.sleep(1)
    await push(client, priority=3)
    await client.call("Pause", queue="q")
    now = (await client.call("Ping"))["data"]["time"]
    reply = await client.call("DashboardQueue", queue="q")
    assert reply["ok"] is True
    data = reply["data"]
    assert (data["name"], data["paused"], data["timestamp"]) == ("q", True, now)
    assert (data["counts"]["failed"], data["counts"]["paused"]) == (12, 1)
    assert data["priorityCounts"] == {"3": 1}
    preview = data["dlqPreview"]
    assert [entry["id"] for entry in preview] == failed[:10]
    assert preview[0]["data"] == {"n": 11}
    assert preview[0]["attempts"] == 1
    job = (await client.call("GetJob", id=failed[0]))["job"]
    assert preview[0]["createdAt"] == job["createdAt"]
    other = (await client.call("DashboardQueue", queue="unused"))["data"]
    assert (other["paused"], other["dlqPreview"]) == (False, [])


async def test_dashboard_views(client: FrameClient) -> None:
    await push(client)
    overview = (await client.call("DashboardOverview"))["data"]
    assert overview["stats"]["totalPushed"] == 1
    queues = (await client.call("DashboardQueues"))["data"]["queues"]
    assert queues == [{"name": "q", "waiting": 1, "prioritized": 0, "delayed": 0, "active": 0,
                       "dlq": 0, "paused": False}]  # fmt: skip
    one = (await client.call("DashboardQueue", queue="q"))["data"]
    assert (one["name"], one["counts"]["waiting"], one["dlqPreview"]) == ("q", 1, [])
