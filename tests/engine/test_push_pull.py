"""PUSH, PUSHB, PULL and PULLB as a client sees them (in-memory connections, MockClock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.engine.state import engine_state as state_module
from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push, state_of
from tests.support.jobs import REFERENCE_JOB_KEYS


async def test_job_carries_every_option_and_the_reference_fields(client: FrameClient) -> None:
    job_id = await push(
        client, name="mail", data={"to": "a"}, priority=2, maxAttempts=5, tags=["t"],
        ttl=1000, timeout=2000, backoff={"type": "fixed", "delay": 50}, stallTimeout=7,
        keepLogs=3, sizeLimit=9, debounceId="d", debounceTtl=11, dedup={"ttl": 5},
    )  # fmt: skip
    job = (await client.call("GetJob", id=job_id))["job"]
    assert all(key in job for key in REFERENCE_JOB_KEYS)
    assert job["name"] == "mail" and job["data"] == {"to": "a"}
    assert (job["priority"], job["maxAttempts"], job["tags"]) == (2, 5, ["t"])
    assert (job["ttl"], job["timeout"], job["stallTimeout"]) == (1000, 2000, 7)
    assert job["backoffConfig"] == {"type": "fixed", "delay": 50}
    assert (job["keepLogs"], job["sizeLimit"], job["debounceId"]) == (3, 9, "d")
    assert job["deduplicationTtl"] == 5
    assert job["state"] == "prioritized"


async def test_a_pushed_job_was_last_heard_of_when_it_was_created(client: FrameClient) -> None:
    for options in ({}, {"priority": 2, "delay": 50}):  # the plain path and the general one
        job = (await client.call("GetJob", id=await push(client, **options)))["job"]
        assert job["lastHeartbeat"] == job["createdAt"]


async def test_name_inside_data_moves_to_the_job(client: FrameClient) -> None:
    job_id = await push(client, data={"name": "legacy", "x": 1})
    job = (await client.call("GetJob", id=job_id))["job"]
    assert job["name"] == "legacy"
    assert job["data"] == {"x": 1}


async def test_higher_priority_first_then_fifo(client: FrameClient) -> None:
    low = await push(client, priority=1)
    high = await push(client, priority=5)
    plain_a = await push(client)
    plain_b = await push(client)
    low_2 = await push(client, priority=1)
    assert await pull_ids(client) == [high, low, low_2, plain_a, plain_b]


async def test_lifo_jobs_come_out_newest_first(client: FrameClient) -> None:
    fifo = await push(client)
    first = await push(client, lifo=True)
    second = await push(client, lifo=True)
    assert await pull_ids(client) == [second, first, fifo]


async def test_negative_delay_runs_ahead_of_later_jobs(client: FrameClient) -> None:
    normal = await push(client)
    early = await push(client, delay=-5000)
    assert await state_of(client, early) == "waiting"
    assert await pull_ids(client) == [early, normal]


async def test_delayed_job_becomes_ready_at_its_run_time(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, delay=5000)
    assert await state_of(client, job_id) == "delayed"
    assert (await client.call("PULL", queue="q"))["job"] is None
    await trio.sleep(4.9)
    assert await state_of(client, job_id) == "delayed"
    await trio.sleep(0.2)
    assert await state_of(client, job_id) == "waiting"
    assert await pull_ids(client) == [job_id]


async def test_long_poll_times_out_with_no_job(client: FrameClient, autojump_clock) -> None:
    start = trio.current_time()
    reply = await client.call("PULL", queue="empty", timeout=3000)
    assert reply["job"] is None
    assert trio.current_time() - start >= 3.0
    reply = await client.call("PULLB", queue="empty", count=5, timeout=1000)
    assert reply["jobs"] == []


async def test_long_poll_is_woken_at_once_by_a_push(connect: Connect, autojump_clock) -> None:
    worker = await connect()
    producer = await connect()
    await worker.send({"cmd": "PULL", "queue": "w", "timeout": 60000, "reqId": "poll"})
    await trio.sleep(1)
    start = trio.current_time()
    job_id = await push(producer, "w")
    reply = await worker.receive_for("poll")
    assert reply["job"]["id"] == job_id
    assert trio.current_time() - start < 0.01


async def test_long_poll_wakes_when_a_delayed_job_is_due(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, delay=2000)
    start = trio.current_time()
    reply = await client.call("PULL", queue="q", timeout=10000)
    assert reply["job"]["id"] == job_id
    assert 2.0 <= trio.current_time() - start < 2.1


async def test_pullb_returns_what_is_ready_up_to_count(client: FrameClient) -> None:
    ids = [await push(client) for _ in range(5)]
    assert await pull_ids(client, count=3) == ids[:3]
    assert await pull_ids(client, count=10) == ids[3:]


async def test_pull_with_owner_returns_tokens(client: FrameClient) -> None:
    await push(client)
    await push(client)
    single = await client.call("PULL", queue="q", owner="w1")
    batch = await client.call("PULLB", queue="q", count=5, owner="w1")
    assert isinstance(single["token"], str)
    assert len(batch["tokens"]) == len(batch["jobs"]) == 1
    empty = await client.call("PULL", queue="q", owner="w1")
    assert empty == {"ok": True, "job": None, "token": None, "reqId": empty["reqId"]}
    plain = await client.call("PULL", queue="q")
    assert "token" not in plain


async def test_custom_job_id_is_idempotent(client: FrameClient) -> None:
    first = await push(client, jobId="order-1", data={"v": 1})
    again = await push(client, jobId="order-1", data={"v": 2})
    assert first == again == "order-1"
    assert (await client.call("GetJob", id="order-1"))["job"]["data"] == {"v": 1}
    assert (await client.call("Count", queue="q"))["count"] == 1


async def test_unique_key_dedups_until_the_job_completes(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k")
    assert await push(client, uniqueKey="k") == first
    assert await push(client, "other", uniqueKey="k") != first  # keys are per queue
    await pull_ids(client)
    await client.call("ACK", id=first)
    assert await push(client, uniqueKey="k") != first


async def test_unique_key_stays_taken_across_a_retry(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k", maxAttempts=3)
    await pull_ids(client)
    await client.call("FAIL", id=first, error="boom")
    assert await state_of(client, first) == "delayed"
    assert await push(client, uniqueKey="k") == first


async def test_depends_on_must_exist(client: FrameClient) -> None:
    reply = await client.call("PUSH", queue="q", data={}, dependsOn=["missing"])
    assert reply == {"ok": False, "error": "Dependency job not found: missing", "reqId": "1"}
    assert (await client.call("Count", queue="q"))["count"] == 0


async def test_dependent_waits_until_its_dependency_completes(client: FrameClient) -> None:
    parent = await push(client, "deps")
    child = await push(client, "deps", dependsOn=[parent])
    assert await state_of(client, child) == "waiting-children"
    assert await pull_ids(client, "deps") == [parent]
    await client.call("ACK", id=parent)
    assert await state_of(client, child) == "waiting"
    assert await pull_ids(client, "deps") == [child]


async def test_an_unrelated_job_completes_while_a_dependent_waits(client: FrameClient) -> None:
    parent = await push(client, "deps")
    child = await push(client, "deps", dependsOn=[parent])
    unrelated = await push(client, "other")
    assert await pull_ids(client, "other") == [unrelated]
    assert (await client.call("ACK", id=unrelated))["ok"] is True
    assert await state_of(client, child) == "waiting-children"


async def test_a_cancelled_dependent_does_not_hold_up_the_others(client: FrameClient) -> None:
    parent = await push(client, "deps")
    cancelled = await push(client, "deps", dependsOn=[parent])
    kept = await push(client, "deps", dependsOn=[parent])
    assert (await client.call("Cancel", id=cancelled))["ok"] is True
    assert await pull_ids(client, "deps") == [parent]
    assert (await client.call("ACK", id=parent))["ok"] is True
    assert await state_of(client, kept) == "waiting"


async def test_depending_on_a_completed_job_is_ready_at_once(client: FrameClient) -> None:
    done = await push(client)
    await pull_ids(client)
    await client.call("ACK", id=done)
    after = await push(client, dependsOn=[done])
    assert await state_of(client, after) == "waiting"


async def test_a_removed_job_satisfies_a_dependency_only_if_it_had_completed(
    client: FrameClient,
) -> None:
    done = await push(client)
    await pull_ids(client)
    await client.call("ACK", id=done)
    cleaned = await client.call("Clean", queue="q", grace=0, state="completed")
    assert cleaned["ids"] == [done]
    after = await push(client, dependsOn=[done])  # it completed: the broker remembers that
    assert await state_of(client, after) == "waiting"
    cancelled = await push(client, "other")
    assert (await client.call("Cancel", id=cancelled))["ok"] is True
    refused = await client.call("PUSH", queue="q", data={}, dependsOn=[cancelled])
    assert refused["error"] == f"Dependency job not found: {cancelled}"


async def test_the_newest_completed_ids_are_remembered_for_dependencies(
    client: FrameClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "KEEP_DONE_IDS", 3)
    done = []
    for _ in range(4):  # removed on completion: only the id is remembered, the oldest dropped
        job_id = await push(client, removeOnComplete=True)
        await pull_ids(client)
        await client.call("ACK", id=job_id)
        done.append(job_id)
    refused = await client.call("PUSH", queue="q", data={}, dependsOn=[done[0]])
    assert refused["error"] == f"Dependency job not found: {done[0]}"
    after = await push(client, dependsOn=done[1:])
    assert await state_of(client, after) == "waiting"


async def test_pushb_is_all_or_nothing(client: FrameClient) -> None:
    reply = await client.call(
        "PUSHB", queue="b", jobs=[{"data": 1}, {"data": 2, "timeout": -1}, {"data": 3}]
    )
    assert reply["ok"] is False
    assert reply["error"] == "jobs[1]: timeout must be at least 0"
    reply = await client.call(
        "PUSHB", queue="b", jobs=[{"data": 1}, {"data": 2, "dependsOn": ["x"]}]
    )
    assert reply["error"] == "jobs[1]: Dependency job not found: x"
    counts = (await client.call("GetJobCounts", queue="b"))["counts"]
    assert sum(counts.values()) == 0


async def test_pushb_chains_on_custom_ids_in_any_order(client: FrameClient) -> None:
    reply = await client.call(
        "PUSHB",
        queue="b",
        jobs=[
            {"data": "last", "customId": "c", "dependsOn": ["b"]},
            {"data": "middle", "customId": "b", "dependsOn": ["a"]},
            {"data": "first", "customId": "a"},
        ],
    )
    assert reply["ids"] == ["c", "b", "a"]
    order = []
    for _ in range(3):
        [job_id] = await pull_ids(client, "b")
        order.append(job_id)
        await client.call("ACK", id=job_id)
    assert order == ["a", "b", "c"]


async def test_pushb_repeated_custom_id_returns_the_first(client: FrameClient) -> None:
    reply = await client.call(
        "PUSHB", queue="b", jobs=[{"data": 1, "customId": "x"}, {"data": 2, "customId": "x"}]
    )
    assert reply["ids"] == ["x", "x"]
    assert (await client.call("Count", queue="b"))["count"] == 1


async def test_counts_by_state(client: FrameClient) -> None:
    await push(client, "c")
    await push(client, "c", priority=3)
    await push(client, "c", delay=10_000)
    active = await push(client, "c", priority=9)
    [pulled] = await pull_ids(client, "c", count=1)
    assert pulled == active
    counts = (await client.call("GetJobCounts", queue="c"))["counts"]
    assert counts == {
        "waiting": 1, "prioritized": 1, "delayed": 1, "active": 1, "completed": 0,
        "failed": 0, "waiting-children": 0, "paused": 0,
    }  # fmt: skip
    assert (await client.call("Count", queue="c"))["count"] == 3


async def test_timed_out_polls_do_not_pile_up(client: FrameClient, app, autojump_clock) -> None:
    for _ in range(100):
        assert (await client.call("PULLB", queue="idle", count=5, timeout=1000))["jobs"] == []
    assert len(app.actor.engine.state.queues.make("idle").waiters) == 0


async def test_backoff_max_delay_is_checked_on_push_pushb_and_pushf(client: FrameClient) -> None:
    for bad, error in (
        (-1, "backoff.maxDelay must be at least 0"),
        (86_400_001, "backoff.maxDelay must be at most 86400000"),
        ("x", "backoff.maxDelay must be a number"),
        (float("nan"), "backoff.maxDelay must be a finite number"),
    ):
        backoff = {"type": "fixed", "delay": 5, "maxDelay": bad}
        assert (await client.call("PUSH", queue="q", data=1, backoff=backoff))["error"] == error
        batch = await client.call("PUSHB", queue="q", jobs=[{"data": 1, "backoff": backoff}])
        assert batch["error"] == f"jobs[0]: {error}"
        flow = [{"id": "f", "queue": "q", "input": {"name": "f", "data": 1, "backoff": backoff}}]
        assert (await client.call("PUSHF", jobs=flow))["error"] == f"jobs[0]: {error}"
    assert (await client.call("Count", queue="q"))["count"] == 0
    edge = {"type": "fixed", "delay": 5, "maxDelay": 86_400_000}
    assert (await client.call("PUSH", queue="q", data=1, backoff=edge))["ok"] is True
