"""Dependencies between jobs: a dependency dropped on failure, a job revived or a dependency
cancelled, and custom ids that waiting jobs still name (in-memory connections and restarts)."""

from __future__ import annotations

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push, state_of
from tests.support.flows import family, finish
from tests.support.stores import StoreFactory


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


async def test_a_revived_job_waits_for_its_dependencies(client: FrameClient) -> None:
    await push(client, jobId="dep", delay=100_000)
    await push(client, jobId="child", dependsOn=["dep"])
    await client.call("Discard", id="child")
    assert (await client.call("RetryDlq", queue="q"))["count"] == 1
    assert await state_of(client, "child") == "waiting-children"


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


CONSUMERS = "Custom ID done still has unresolved dependency consumers"


async def finished_and_forgotten_with_a_waiter(client: FrameClient) -> str:
    """`done` completed and was removed; a job still waits for it and for another one."""
    done = await push(client, "q", jobId="done", removeOnComplete=True)
    other = await push(client, "later", delay=60_000)
    waiter = await push(client, "w", dependsOn=[done, other])
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    assert await state_of(client, waiter) == "waiting-children"
    assert await state_of(client, done) == "unknown"
    return waiter


async def test_a_finished_custom_id_is_not_reused_while_waiting_jobs_name_it(
    client: FrameClient,
) -> None:
    waiter = await finished_and_forgotten_with_a_waiter(client)
    assert (await client.call("PUSH", queue="q", data=1, jobId="done"))["error"] == CONSUMERS
    batch = await client.call("PUSHB", queue="q", jobs=[{"data": 1, "customId": "done"}])
    assert batch["error"] == f"jobs[0]: {CONSUMERS}"
    flow = [{"id": "done", "queue": "q", "input": {"name": "f", "data": 1}}]
    assert (await client.call("PUSHF", jobs=flow))["error"] == CONSUMERS
    assert await state_of(client, "done") == "unknown"
    await client.call("Cancel", id=waiter)  # nobody names it now: the id is free again
    assert (await client.call("PUSH", queue="q", data=1, jobId="done"))["id"] == "done"


async def test_a_custom_id_nobody_waits_for_is_reused_after_it_finished(
    client: FrameClient,
) -> None:
    done = await push(client, "q", jobId="done", removeOnComplete=True)
    await push(client, "w", dependsOn=[done])
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)  # its dependent is released: nothing waits for it
    assert (await client.call("PUSH", queue="q", data=2, jobId="done"))["id"] == "done"


async def test_a_reused_custom_id_is_a_dependency_only_if_its_latest_job_completed(
    client: FrameClient,
) -> None:
    # The first "x" completes and is forgotten; the second, pushed under the same id, fails
    # and is forgotten too: "x" no longer counts as a completed dependency.
    await push(client, jobId="x", removeOnComplete=True)
    await client.call("ACK", id=(await client.call("PULL", queue="q"))["job"]["id"])
    await push(client, jobId="x", removeOnFail=True, maxAttempts=1)
    await client.call("FAIL", id=(await client.call("PULL", queue="q"))["job"]["id"])
    reply = await client.call("PUSH", queue="q", data={}, dependsOn=["x"])
    assert (reply["ok"], reply["error"]) == (False, "Dependency job not found: x")
