"""Flows: PUSHF graphs, parent/child failure policies, legacy UpdateParent composition."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.flows import family, finish, node
from tests.support.stores import StoreFactory


async def test_pushf_commits_the_graph_and_the_parent_waits(client: FrameClient) -> None:
    reply = await client.call("PUSHF", jobs=family())
    snapshots = reply["data"]["jobs"]
    assert [(j["id"], j["queue"], j["state"]) for j in snapshots] == [
        ("c1", "fq", "waiting"), ("c2", "fq", "waiting"), ("p", "parents", "waiting-children"),
    ]  # fmt: skip
    assert snapshots[2]["childrenIds"] == ["c1", "c2"] and snapshots[0]["parentId"] == "p"
    await finish(client, "c1")
    assert await state_of(client, "p") == "waiting-children"
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting"
    values = (await client.call("GetChildrenValues", id="p"))["data"]["values"]
    assert values == {"fq:c1": {"from": "c1"}, "fq:c2": {"from": "c2"}}


@pytest.mark.parametrize(
    ("jobs", "error"),
    [
        ([node("a"), node("a")], "duplicate flow job id: a"),
        ([node("a:b")], "jobs[0].id must not contain ':'"),
        ([node("")], "jobs[0].id must be a non-empty string"),
        ([node("a", dependsOn=["a"])], "flow job cannot depend on itself: a"),
        ([node("a", dependsOn=["ghost"])], "flow dependency not found: ghost"),
        (
            [node("a", dependsOn=["b"]), node("b", dependsOn=["a"])],
            "flow graph has a cycle through a",
        ),
        (
            [node("c", parentId="p"), node("p", dependsOn=["c"])],
            "flow parent p does not own child c",
        ),
        (
            [node("c", parentId="p"), node("p", childrenIds=["c"])],
            "flow child is missing from dependencies: c",
        ),
        (
            [node("c"), node("p", childrenIds=["c"], dependsOn=["c"])],
            "flow child c does not point back to parent p",
        ),
        ([node("c", parentId="nobody")], "flow parent not found: nobody"),
        (
            family(failParentOnFailure=True, continueParentOnFailure=True),
            "jobs[0]: conflicting failure policies: failParentOnFailure, continueParentOnFailure",
        ),
        ([node("a", timeout=-1)], "jobs[0]: timeout must be at least 0"),
        (
            [{"id": "a", "queue": "bad queue!", "input": {"data": 1}}],
            "jobs[0]: Queue name contains invalid characters",
        ),
    ],
)
async def test_an_invalid_graph_publishes_nothing(
    client: FrameClient, jobs: list[dict[str, Any]], error: str
) -> None:
    reply = await client.call("PUSHF", jobs=[*jobs, node("innocent", "other")])
    assert reply["error"] == error
    for queue in ("fq", "parents", "other"):
        assert (await client.call("Count", queue=queue))["count"] == 0


async def test_an_existing_id_is_refused(client: FrameClient) -> None:
    await push(client, "fq", jobId="taken")
    reply = await client.call("PUSHF", jobs=[node("taken"), node("new")])
    assert reply["error"] == "flow job id already exists: taken"
    assert await state_of(client, "new") == "unknown"


@pytest.mark.parametrize("remove_on_fail", [False, True])
async def test_fail_parent_on_failure(client: FrameClient, remove_on_fail: bool) -> None:
    # A child removed on failure still fails its parent, with its reason.
    await client.call(
        "PUSHF", jobs=family(failParentOnFailure=True, removeOnFail=remove_on_fail)
    )
    await finish(client, "c1", ok=False)
    job = (await client.call("GetJob", id="p"))["job"]
    assert (job["state"], job["failedReason"]) == ("failed", "Child job c1 failed: c1 broke")


async def test_continue_parent_on_failure(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family(continueParentOnFailure=True))
    await finish(client, "c1", ok=False)
    assert await state_of(client, "p") == "waiting"
    failed = await client.call("GetFailedChildrenValues", id="p")
    assert failed["values"] == {"fq:c1": "c1 broke"}


async def test_remove_and_ignore_dependency_on_failure(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family(ignoreDependencyOnFailure=True))
    await finish(client, "c1", ok=False)
    assert await state_of(client, "p") == "waiting-children"  # still waits for c2
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting"
    ignored = await client.call("GetIgnoredChildrenFailures", id="p")
    assert ignored["values"] == {"fq:c1": "c1 broke"}


async def test_the_last_child_dropped_on_failure_releases_the_parent(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family(removeDependencyOnFailure=True))
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting-children"
    await finish(client, "c1", ok=False)
    assert await state_of(client, "p") == "waiting"


async def test_a_parent_failed_by_its_child_follows_its_own_remove_on_fail(
    client: FrameClient,
) -> None:
    jobs = family(failParentOnFailure=True)
    jobs[2]["input"]["removeOnFail"] = True
    await client.call("PUSHF", jobs=jobs)
    await finish(client, "c1", ok=False)
    assert await state_of(client, "p") == "unknown"  # failed, and removed as it asked


async def test_without_a_policy_the_parent_keeps_waiting_visibly(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family())
    await finish(client, "c1", ok=False)
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting-children"


async def test_legacy_flow_with_update_parent(client: FrameClient) -> None:
    child = await push(
        client, "fq", data={"name": "child", "__parentId": "pending"}, parentId="pending"
    )
    parent = await push(client, "parents", dependsOn=[child], childrenIds=[child])
    assert (await client.call("UpdateParent", childId=child, parentId=parent))["ok"]
    assert await state_of(client, parent) == "waiting-children"
    await finish(client, child)
    assert await state_of(client, parent) == "waiting"
    values = (await client.call("GetChildrenValues", id=parent))["data"]["values"]
    assert values == {f"fq:{child}": {"from": child}}
    bad = await client.call("UpdateParent", childId="ghost", parentId=parent)
    assert bad["error"] == "Child job not found: ghost"


async def test_a_flow_survives_a_restart_midway(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("PUSHF", jobs=family())
        await finish(client, "c1")
    async with broker.running() as connect:
        client = await connect()
        assert await state_of(client, "p") == "waiting-children"
        await finish(client, "c2")
        assert await state_of(client, "p") == "waiting"
        values = (await client.call("GetChildrenValues", id="p"))["data"]["values"]
        assert sorted(values) == ["fq:c1", "fq:c2"]


async def test_legacy_flow_edits_survive_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await push(client, "fq", jobId="c", parentId="placeholder")
        await push(client, "parents", jobId="legacy")
        await client.call("UpdateParent", childId="c", parentId="legacy")
        assert (await client.call("PUSHF", jobs=family()))["ok"] is True
        assert (await client.call("RemoveChildDependency", id="c1"))["removed"] is True
    async with broker.running() as connect:
        client = await connect()
        jobs = {i: (await client.call("GetJob", id=i))["job"] for i in ("c", "legacy", "c1")}
        assert (jobs["c"]["parentId"], jobs["legacy"]["childrenIds"]) == ("legacy", ["c"])
        assert jobs["c1"]["parentId"] is None


async def test_a_flow_holds_at_most_10000_jobs(client: FrameClient) -> None:
    jobs = [{"id": f"j{i}", "queue": "fq", "input": {"data": i}} for i in range(10_001)]
    reply = await client.call("PUSHF", jobs=jobs)
    assert reply["error"] == "a flow holds at most 10000 jobs"
    assert (await client.call("Count", queue="fq"))["count"] == 0


async def test_detaching_a_rerun_child_leaves_the_parent_waiting_for_the_others(
    client: FrameClient,
) -> None:
    await client.call("PUSHF", jobs=family())
    await finish(client, "c1")  # c1 counted as done for p; RetryCompleted runs it again
    assert (await client.call("RetryCompleted", queue="fq", id="c1"))["count"] == 1
    assert (await client.call("RemoveChildDependency", id="c1"))["removed"] is True
    assert await state_of(client, "p") == "waiting-children"  # c2 has not run yet
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting"
