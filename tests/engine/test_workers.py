"""Registered workers: register (an upsert), heartbeat, list (stale after 30 s), unregister,
and dropped with the connection that registered them."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.app import Connect
from tests.support.client import FrameClient


async def now_ms(client: FrameClient) -> float:
    return (await client.call("Ping"))["data"]["time"]


async def test_register_replies_the_whole_record(client: FrameClient, autojump_clock) -> None:
    start = await now_ms(client)
    reply = await client.call(
        "RegisterWorker", name="w", queues=["a", "b"], concurrency=4, hostname="box", pid=42
    )  # fmt: skip
    assert reply["ok"] is True
    assert reply["data"] == {
        "workerId": "w", "registeredAt": start, "activeJobs": 0, "processedJobs": 0,
        "failedJobs": 0, "currentJob": None, "name": "w", "queues": ["a", "b"], "concurrency": 4,
        "hostname": "box", "pid": 42, "status": "active", "lastSeen": start,
    }  # fmt: skip


async def test_register_again_keeps_the_record_and_its_counts(
    client: FrameClient, autojump_clock
) -> None:
    start = await now_ms(client)
    await client.call("RegisterWorker", name="w", workerId="id-1", queues=["a"])
    beat = await client.call("Heartbeat", id="id-1", activeJobs=2, processed=5, failed=1)
    assert (beat["ok"], beat["data"]) == (True, {"ok": True})
    await trio.sleep(10)
    again = (await client.call("RegisterWorker", name="w2", workerId="id-1", queues=["b"]))["data"]
    assert (again["registeredAt"], again["lastSeen"]) == (start, start + 10_000)
    assert (again["activeJobs"], again["processedJobs"], again["failedJobs"]) == (2, 5, 1)
    assert (again["name"], again["queues"]) == ("w2", ["b"])
    listed = (await client.call("ListWorkers"))["data"]
    assert [worker["id"] for worker in listed["workers"]] == ["id-1"]


async def test_heartbeat_refreshes_only_the_counts_it_carries(
    client: FrameClient, autojump_clock
) -> None:
    start = await now_ms(client)
    await client.call("RegisterWorker", name="w")
    await client.call("Heartbeat", id="w", activeJobs=3, processed=7, failed=2)
    await trio.sleep(5)
    await client.call("Heartbeat", id="w", processed=8)
    (worker,) = (await client.call("ListWorkers"))["data"]["workers"]
    assert (worker["activeJobs"], worker["processedJobs"], worker["failedJobs"]) == (3, 8, 2)
    assert worker["lastSeen"] == start + 5000


async def test_a_worker_unseen_for_over_30_s_is_listed_stale(
    client: FrameClient, autojump_clock
) -> None:
    await client.call("RegisterWorker", name="quiet")
    await client.call("RegisterWorker", name="busy")
    await trio.sleep(30)
    await client.call("Heartbeat", id="busy")
    statuses = {w["id"]: w["status"] for w in (await client.call("ListWorkers"))["data"]["workers"]}
    assert statuses == {"quiet": "active", "busy": "active"}  # exactly 30 s is not over
    await trio.sleep(0.001)
    listed = await client.call("ListWorkers")
    assert listed["ok"] is True
    assert listed["data"]["stats"] == {"total": 2}
    statuses = {w["id"]: w["status"] for w in listed["data"]["workers"]}
    assert statuses == {"quiet": "stale", "busy": "active"}


async def test_unknown_workers_are_refused(client: FrameClient) -> None:
    assert (await client.call("Heartbeat", id="ghost"))["error"] == "Worker not found"
    assert (await client.call("UnregisterWorker", workerId="ghost"))["error"] == "Worker not found"


async def test_unregister_forgets_the_worker(client: FrameClient) -> None:
    await client.call("RegisterWorker", name="w")
    await client.call("RegisterWorker", name="other")
    reply = await client.call("UnregisterWorker", workerId="w")
    assert (reply["ok"], reply["data"]) == (True, {"removed": True})
    listed = (await client.call("ListWorkers"))["data"]["workers"]
    assert [worker["id"] for worker in listed] == ["other"]
    assert (await client.call("Heartbeat", id="w"))["error"] == "Worker not found"


async def test_a_closed_connection_takes_its_workers_along(
    client: FrameClient, connect: Connect
) -> None:
    await client.call("RegisterWorker", name="stays")
    leaving = await connect()
    await leaving.call("RegisterWorker", name="goes", workerId="g1")
    await leaving.call("RegisterWorker", name="goes too", workerId="g2")
    await leaving.aclose()
    await trio.testing.wait_all_tasks_blocked()  # the broker has seen the connection close
    listed = (await client.call("ListWorkers"))["data"]["workers"]
    assert [worker["id"] for worker in listed] == ["stays"]
