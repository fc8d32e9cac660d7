"""Rules a code review found broken, each pinned by a test (see the commit that fixed them)."""

from __future__ import annotations

import trio

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push, state_of
from tests.support.flows import family, finish
from tests.support.stores import StoreFactory


async def test_a_job_finished_twice_at_once_ages_out_once(
    client: FrameClient, app, autojump_clock
) -> None:
    job_id = await push(client)
    await client.call("Discard", id=job_id)
    await client.call("RetryDlq", queue="q")
    await client.call("Discard", id=job_id)  # same instant: two retention entries
    await trio.sleep(8 * 86_400)  # past the 7-day age: the broker must not crash
    assert await state_of(client, job_id) == "unknown"
    assert app.actor.engine.state.failed.count == 0


async def test_a_schedule_that_ends_stops_cleanly(client: FrameClient, autojump_clock) -> None:
    # 2030 only: one more run, then croniter has no next date.
    once = "0 0 1 1 * 0 2030"
    assert (await client.call("Cron", name="once", queue="cq", data=1, schedule=once))["ok"]
    job = await client.call("PUSH", queue="rq", data=1, repeat={"pattern": once})
    assert (await client.call("PULL", queue="rq"))["job"] is None  # not before 2030
    await trio.sleep(4 * 365 * 86_400)
    assert (await client.call("CronGet", name="once"))["error"] == "Cron job not found"
    assert (await client.call("Count", queue="cq"))["count"] == 1
    assert (await client.call("PULL", queue="rq"))["job"]["id"] == job["id"]  # no next one
    assert (await client.call("Count", queue="rq"))["count"] == 0
    late = await client.call("PUSH", queue="rq", data=1, repeat={"pattern": once})
    assert late["error"] == "repeat has no future occurrence"


async def test_what_a_restart_changes_is_stored(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        job_id = await push(await connect(), ttl=1000, delay=60_000)
    await trio.sleep(5)
    async with broker.running() as connect:
        assert await state_of(await connect(), job_id) == "failed"
    store = broker.open_store()  # the store agrees, not just memory
    assert [row.state for row in store.load() if row.id == job_id] == ["failed"]
    store.close()


def dropped_dependency_graph() -> list[dict]:
    """p waits for c1, c2 (queue fq) and c3 (queue slow); c1 drops out if it fails."""
    jobs = family(removeDependencyOnFailure=True)
    jobs[2]["input"]["dependsOn"].append("c3")
    jobs[2]["input"]["childrenIds"].append("c3")
    jobs.insert(2, {"id": "c3", "queue": "slow", "input": {"data": 3, "parentId": "p"}})
    return jobs


async def test_a_dropped_dependency_does_not_count_twice(client: FrameClient) -> None:
    assert (await client.call("PUSHF", jobs=dropped_dependency_graph()))["ok"] is True
    await finish(client, "c1", ok=False)
    await finish(client, "c2")
    await client.call("RetryDlq", queue="fq")
    await finish(client, "c1")  # the retried child completing does not count again
    assert await state_of(client, "p") == "waiting-children"
    await finish(client, "c3", queue="slow")
    assert await state_of(client, "p") == "waiting"


async def test_a_dropped_dependency_stays_dropped_after_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        assert (await client.call("PUSHF", jobs=dropped_dependency_graph()))["ok"] is True
        await finish(client, "c1", ok=False)
        await finish(client, "c2")
    async with broker.running() as connect:
        client = await connect()
        await finish(client, "c3", queue="slow")
        assert await state_of(client, "p") == "waiting"


async def test_a_stale_heartbeat_changes_nothing(client: FrameClient, autojump_clock) -> None:
    job_id = await push(client, stallTimeout=1000, maxAttempts=9)
    await client.call("PULL", queue="q", owner="w")
    await trio.sleep(0.9)
    beat = await client.call("JobHeartbeat", id=job_id, token="stale")
    assert beat["ok"] is False
    await trio.sleep(0.2)  # the stale beat did not keep it alive
    assert (await client.call("GetJob", id=job_id))["job"]["stallCount"] == 1


async def test_a_revived_job_waits_for_its_dependencies(client: FrameClient) -> None:
    await push(client, jobId="dep", delay=100_000)
    await push(client, jobId="child", dependsOn=["dep"])
    await client.call("Discard", id="child")
    assert (await client.call("RetryDlq", queue="q"))["count"] == 1
    assert await state_of(client, "child") == "waiting-children"


async def test_a_passed_over_group_spends_no_rate_token(client: FrameClient) -> None:
    await client.call("RateLimit", queue="q", limit=2)
    a1 = await push(client, groupId="a")
    await push(client, groupId="a")
    b1 = await push(client, groupId="b")
    one = {"concurrency": 1}
    assert (await client.call("PULL", queue="q", group=one))["job"]["id"] == a1
    reply = await client.call("PULLB", queue="q", count=5, group=one)
    assert [job["id"] for job in reply["jobs"]] == [b1]


async def test_dependents_of_a_cancelled_job_keep_waiting(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await push(client, jobId="dep")
        await push(client, jobId="child", dependsOn=["dep"])
        await client.call("Cancel", id="dep")
        assert await state_of(client, "child") == "waiting-children"
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, "child") == "waiting-children"
        assert await pull_ids(client) == []
