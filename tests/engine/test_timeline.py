"""A job's timeline: every state it entered, when, and why it failed."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push
from tests.support.stores import StoreFactory


async def timeline(client: FrameClient, job_id: str) -> list[dict]:
    return (await client.call("GetJob", id=job_id))["job"]["timeline"]


def steps(entries: list[dict]) -> list[tuple]:
    """(state, ms since the first entry, error) for each entry."""
    start = entries[0]["timestamp"]
    return [(e["state"], e["timestamp"] - start, e.get("error")) for e in entries]


async def test_a_completed_job_shows_when_it_waited_ran_and_finished(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client)
    await trio.sleep(1)
    await client.call("PULL", queue="q")
    await trio.sleep(2)
    await client.call("ACK", id=job_id)
    assert steps(await timeline(client, job_id)) == [
        ("waiting", 0, None), ("active", 1000, None), ("completed", 3000, None),
    ]  # fmt: skip


async def test_retries_and_the_final_failure_are_shown_with_the_error(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, maxAttempts=2, backoff={"type": "fixed", "delay": 1000})
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="first")
    await trio.sleep(1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="second")
    assert steps(await timeline(client, job_id)) == [
        ("waiting", 0, None), ("active", 0, None), ("delayed", 0, None),
        ("waiting", 1000, None), ("active", 1000, None), ("failed", 1000, "second"),
    ]  # fmt: skip


async def test_the_latest_twenty_entries_are_kept(client: FrameClient) -> None:
    job_id = await push(client)
    for _ in range(12):  # 1 + 24 entries
        await client.call("PULL", queue="q")
        await client.call("MoveToWait", id=job_id)
    entries = await timeline(client, job_id)
    assert len(entries) == 20
    assert [e["state"] for e in entries[-2:]] == ["active", "waiting"]


async def test_a_restart_adds_only_what_happened_while_the_broker_was_down(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        ready = await push(client, delay=5000)
        await trio.sleep(6)
        later = await push(client, delay=60_000)
        before = await timeline(client, ready)
    assert [e["state"] for e in before] == ["delayed", "waiting"]
    await trio.sleep(60)
    async with broker.running() as connect:
        client = await connect()
        assert await timeline(client, ready) == before  # nothing happened to it
        # Due while the broker was down: ready from the restart on, 60 s after its push.
        assert steps(await timeline(client, later)) == [
            ("delayed", 0, None), ("waiting", 60_000, None),
        ]  # fmt: skip


async def test_a_failure_at_the_cap_still_shows_its_error(client: FrameClient) -> None:
    job_id = await push(client, maxAttempts=1)
    for _ in range(12):  # the timeline reaches its cap of twenty entries
        await client.call("PULL", queue="q")
        await client.call("MoveToWait", id=job_id)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=job_id, error="boom")
    entries = await timeline(client, job_id)
    assert len(entries) == 20
    assert (entries[-1]["state"], entries[-1]["error"]) == ("failed", "boom")
