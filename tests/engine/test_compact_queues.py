"""CompactMemory forgets only queues that hold nothing: no job, no parked pull, no setting."""

from __future__ import annotations

from typing import Any

import trio

from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push


async def queues(client: FrameClient) -> list[str]:
    return (await client.call("ListQueues"))["queues"]


SETTINGS: list[tuple[str, dict[str, Any], str, dict[str, Any], Any]] = [
    # (set command, its fields, read command, its fields, what the read shows)
    ("Pause", {}, "IsPaused", {}, True),
    ("RateLimit", {"limit": 5}, "GetQueueLimits", {}, 5),
    ("SetConcurrency", {"limit": 3}, "GetQueueLimits", {}, 3),
    ("SetStallConfig", {"config": {"maxStalls": 7}}, "GetStallConfig", {}, 7),
    ("SetDlqConfig", {"config": {"maxEntries": 9}}, "GetDlqConfig", {}, 9),
    ("SetGroupConcurrency", {"groupId": "g", "concurrency": 2}, "GetGroupConcurrency",
     {"groupId": "g"}, 2),
]  # fmt: skip


def shown(reply: dict[str, Any], read: str) -> Any:
    """The one value of `reply` that the setting changed."""
    if read == "IsPaused":
        return reply["paused"]
    if read == "GetQueueLimits":
        limits = reply["data"]["limits"]
        return limits["rateLimit"] or limits["concurrencyLimit"]
    if read == "GetStallConfig":
        return reply["config"]["maxStalls"]
    if read == "GetDlqConfig":
        return reply["config"]["maxEntries"]
    return reply["data"]["concurrency"]


async def test_an_empty_queue_with_a_setting_keeps_it_through_compact_memory(
    client: FrameClient,
) -> None:
    for n, (command, fields, read, read_fields, value) in enumerate(SETTINGS):
        queue = f"q{n}"
        assert (await client.call(command, queue=queue, **fields))["ok"] is True
        assert (await client.call("CompactMemory"))["ok"] is True
        assert queue in await queues(client), command
        assert shown(await client.call(read, queue=queue, **read_fields), read) == value
        assert (await client.call("PUSH", queue=queue, data=1))["ok"] is True  # still usable
        assert (await client.call("Count", queue=queue))["count"] == 1
        await client.call("Drain", queue=queue)
    await client.call("Resume", queue="q0")  # the setting undone: nothing left to keep
    await client.call("RemoveGroupConcurrency", queue="q5", groupId="g")
    assert (await client.call("CompactMemory"))["ok"] is True
    assert "q0" not in await queues(client) and "q5" not in await queues(client)


async def test_compact_memory_keeps_a_queue_with_a_parked_pull_or_jobs(
    client: FrameClient, autojump_clock: object
) -> None:
    await client.send({"cmd": "PULL", "queue": "parked", "timeout": 10_000, "reqId": "p"})
    await trio.sleep(1)
    grouped = [await push(client, groupId="g") for _ in range(3)]
    await client.call("PULL", queue="q")
    delayed = await push(client, "later", delay=60_000)
    assert (await client.call("CompactMemory"))["ok"] is True
    assert await queues(client) == ["later", "parked", "q"]
    job = await push(client, "parked")
    assert (await client.receive_for("p"))["job"]["id"] == job
    group = {"queue": "q", "groupId": "g"}
    assert (await client.call("GetGroupJobsCount", **group))["data"]["count"] == 2
    assert (await client.call("GetGroupActiveCount", **group))["data"]["count"] == 1
    assert await pull_ids(client) == grouped[1:]
    await trio.sleep(60)
    assert await pull_ids(client, "later") == [delayed]


async def test_a_removed_job_leaves_nothing_a_parked_pull_could_take(
    client: FrameClient, autojump_clock: object
) -> None:
    for _ in range(3):
        removed = await push(client)
        assert (await client.call("Cancel", id=removed))["ok"] is True
    await client.send({"cmd": "PULL", "queue": "q", "timeout": 2000, "reqId": "p"})
    await trio.sleep(1)
    later = await push(client)
    assert (await client.receive_for("p"))["job"]["id"] == later
    assert (await client.call("CompactMemory"))["ok"] is True
    assert (await client.call("PULL", queue="q", timeout=1000))["job"] is None


async def test_compact_memory_keeps_waiting_and_prioritized_jobs_alike(
    client: FrameClient,
) -> None:
    waiting = await push(client)
    prioritized = await push(client, priority=3)
    assert (await client.call("CompactMemory"))["ok"] is True
    assert await pull_ids(client) == [prioritized, waiting]
