"""Flows: PUSHF graphs and what they may name, parent/child failure policies, the children
queries, and the legacy edits (UpdateParent, MoveToWaitingChildren, RemoveChildDependency,
RemoveUnprocessedChildren), also on jobs that do not fit them."""

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


async def test_move_to_waiting_children_waits_for_children_attached_while_running(
    client: FrameClient,
) -> None:
    parent = await push(client, "parents")
    await client.call("PULL", queue="parents")
    alone = await client.call("MoveToWaitingChildren", id=parent)
    assert alone["data"] == {"moved": False}  # nothing to wait for: it stays active
    child = await push(client, "children", parentId=parent)
    await client.call("UpdateParent", parentId=parent, childId=child)
    moved = await client.call("MoveToWaitingChildren", id=parent)
    assert moved["data"] == {"moved": True}
    job = (await client.call("GetJob", id=parent))["job"]
    assert (job["state"], job["startedAt"]) == ("waiting-children", None)  # no longer started
    await client.call("PULL", queue="children")
    await client.call("ACK", id=child)
    assert await state_of(client, parent) == "waiting"
    idle = await client.call("MoveToWaitingChildren", id=child)
    assert idle["error"] == "Job is not active"


async def test_remove_child_dependency_releases_the_parent(client: FrameClient) -> None:
    jobs = [
        {"id": "p", "queue": "q", "input": {"name": "p", "data": 0, "dependsOn": ["c"],
                                            "childrenIds": ["c"]}},
        {"id": "c", "queue": "k", "input": {"name": "c", "data": 1, "parentId": "p"}},
    ]  # fmt: skip
    assert (await client.call("PUSHF", jobs=jobs))["ok"] is True
    assert await state_of(client, "p") == "waiting-children"
    reply = await client.call("RemoveChildDependency", id="c")
    assert reply["removed"] is True
    assert await state_of(client, "p") == "waiting"
    assert (await client.call("RemoveChildDependency", id="c"))["error"] == "Job c has no parent"
    assert (await client.call("RemoveChildDependency", id="x"))["error"] == "Job not found: x"


async def test_remove_unprocessed_children_releases_the_parent(client: FrameClient) -> None:
    jobs = [
        {"id": "p", "queue": "q", "input": {"name": "p", "data": 0, "dependsOn": ["c", "d"],
                                            "childrenIds": ["c", "d"]}},
        {"id": "c", "queue": "k", "input": {"name": "c", "data": 1, "parentId": "p"}},
        {"id": "d", "queue": "k", "input": {"name": "d", "data": 2, "parentId": "p"}},
    ]  # fmt: skip
    await client.call("PUSHF", jobs=jobs)
    await client.call("PULL", queue="k")  # c starts: it stays
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    assert [await state_of(client, i) for i in ("c", "d")] == ["active", "unknown"]
    await client.call("ACK", id="c")
    assert await state_of(client, "p") == "waiting"


async def test_a_flow_may_depend_on_a_finished_job_but_not_name_an_absent_child(
    client: FrameClient,
) -> None:
    done = await push(client, "fq", jobId="done")
    await finish(client, done)
    await client.call("Clean", queue="fq", grace=0, state="completed")  # forgotten, still done
    assert await state_of(client, done) == "unknown"
    reply = await client.call("PUSHF", jobs=[node("after", dependsOn=["done"])])
    assert reply["ok"] is True
    assert await state_of(client, "after") == "waiting"
    orphan = await client.call("PUSHF", jobs=[node("p", childrenIds=["x"])])
    assert orphan["error"] == "flow child not found: x"
    both = await client.call("PUSHF", jobs=[node("q1", dependsOn=["q2", "q2"]), node("q2")])
    assert both["ok"] is True


async def test_children_values_list_only_completed_children(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family())
    assert (await client.call("GetChildrenValues", id="p"))["data"]["values"] == {}
    reply = await client.call("PULLB", queue="fq", count=2)
    assert len(reply["jobs"]) == 2
    await client.call("ACK", id="c1")  # no result
    values = (await client.call("GetChildrenValues", id="p"))["data"]["values"]
    assert values == {"fq:c1": None}
    for query in ("GetChildrenValues", "GetFailedChildrenValues", "GetIgnoredChildrenFailures"):
        reply = await client.call(query, id="nobody")
        assert reply["ok"] is True
        assert (reply["data"]["values"] if "data" in reply else reply["values"]) == {}
    assert (await client.call("GetFailedChildrenValues", id="p"))["values"] == {}
    assert (await client.call("GetIgnoredChildrenFailures", id="p"))["values"] == {}


async def test_update_parent_refuses_a_job_as_its_own_parent(client: FrameClient) -> None:
    job = await push(client, jobId="solo")
    reply = await client.call("UpdateParent", childId=job, parentId=job)
    assert reply["error"] == "Job cannot depend on itself: solo"
    missing = await client.call("UpdateParent", childId=job, parentId="ghost")
    assert missing["error"] == "Parent job not found: ghost"


async def test_a_child_that_failed_before_update_parent_applies_the_failure_policy(
    client: FrameClient,
) -> None:
    child = await push(client, "fq", maxAttempts=1, failParentOnFailure=True, parentId="later")
    await client.call("PULL", queue="fq")
    await client.call("FAIL", id=child, error="boom")
    parent = await push(client, "parents", dependsOn=[child], childrenIds=[child])
    assert (await client.call("UpdateParent", childId=child, parentId=parent))["ok"] is True
    assert (await client.call("UpdateParent", childId=child, parentId=parent))["ok"] is True
    job = (await client.call("GetJob", id=parent))["job"]
    assert job["state"] == "failed"
    assert job["childrenIds"] == [child]  # attached once, however often it is asked


async def test_remove_child_dependency_leaves_a_parent_that_does_not_wait_alone(
    client: FrameClient,
) -> None:
    await client.call("PUSHF", jobs=family())
    await finish(client, "c1")
    await finish(client, "c2")
    assert await state_of(client, "p") == "waiting"
    reply = await client.call("RemoveChildDependency", id="c1")
    assert (reply["ok"], reply["removed"]) == (True, False)  # the parent waits for nothing


async def test_remove_child_dependency_keeps_a_finished_child(client: FrameClient) -> None:
    await client.call("PUSHF", jobs=family())
    await finish(client, "c1", ok=False)  # failed: no longer a dependency to drop
    reply = await client.call("RemoveChildDependency", id="c1")
    assert reply["removed"] is False
    assert await state_of(client, "p") == "waiting-children"
    assert (await client.call("RemoveChildDependency", id="c2"))["removed"] is True
    assert await state_of(client, "p") == "waiting-children"  # still waits for failed c1


async def test_remove_unprocessed_children_of_an_unknown_or_running_parent(
    client: FrameClient,
) -> None:
    assert (await client.call("RemoveUnprocessedChildren", id="nobody"))["ok"] is True
    parent = await push(client, "parents", jobId="p")
    child = await push(client, "fq", jobId="c", parentId="p")
    await client.call("UpdateParent", childId=child, parentId=parent)
    await client.call("PULL", queue="parents")  # the parent runs: it waits for nothing
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    assert await state_of(client, "c") == "unknown"
    assert await state_of(client, "p") == "active"


async def test_removing_a_child_it_does_not_wait_for_leaves_the_parent_waiting(
    client: FrameClient,
) -> None:
    first = await push(client, "fq", jobId="first")
    await client.call("PUSHF", jobs=[node("p", "parents", dependsOn=[first])])
    extra = await push(client, "fq", jobId="extra", parentId="p")
    await client.call("UpdateParent", childId=extra, parentId="p")  # a child, not a dependency
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    assert await state_of(client, "extra") == "unknown"
    assert await state_of(client, "p") == "waiting-children"  # still waits for `first`


async def test_a_flow_counts_the_jobs_already_in_its_groups_queue(client: FrameClient) -> None:
    await push(client, "fq", groupId="g")
    full = await client.call("PUSHF", jobs=[node("a", groupId="g", groupMaxSize=1)])
    assert full["error"] == "jobs[0]: Group g has reached its maximum size of 1"
    elsewhere = await client.call("PUSHF", jobs=[node("b", "other", groupId="g", groupMaxSize=1)])
    assert elsewhere["ok"] is True


async def test_update_parent_records_the_reason_of_a_child_that_failed_before(
    client: FrameClient,
) -> None:
    for error, recorded in (("boom", "boom"), ("", ""), (None, "Job failed")):
        child = await push(client, "fq", maxAttempts=1, continueParentOnFailure=True)
        await client.call("PULL", queue="fq")
        await client.call("FAIL", id=child, **({} if error is None else {"error": error}))
        parent = await push(client, "parents", dependsOn=[child], childrenIds=[child])
        assert (await client.call("UpdateParent", childId=child, parentId=parent))["ok"] is True
        failures = (await client.call("GetFailedChildrenValues", id=parent))["values"]
        assert failures == {f"fq:{child}": recorded}
        assert await state_of(client, parent) == "waiting"


async def test_move_to_waiting_children_checks_the_lease_and_skips_completed_children(
    client: FrameClient,
) -> None:
    parent = await push(client, "parents")
    leased = await client.call("PULL", queue="parents", owner="w", lockTtl=30_000)
    done = await push(client, "fq", parentId=parent)
    await client.call("UpdateParent", parentId=parent, childId=done)
    await finish(client, done)  # completed while the parent ran: nothing to wait for
    wrong = await client.call("MoveToWaitingChildren", id=parent, token="nope")
    assert wrong["error"] == f"Invalid or expired lock token for job {parent}"
    alone = await client.call("MoveToWaitingChildren", id=parent, token=leased["token"])
    assert (alone["ok"], alone["data"]) == (True, {"moved": False})
    assert await state_of(client, parent) == "active"
    late = await push(client, "fq", parentId=parent)
    await client.call("UpdateParent", parentId=parent, childId=late)
    moved = await client.call("MoveToWaitingChildren", id=parent, token=leased["token"])
    assert (moved["ok"], moved["data"]) == (True, {"moved": True})
    job = (await client.call("GetJob", id=parent))["job"]
    assert (job["state"], job["dependsOn"]) == ("waiting-children", [late])


async def test_remove_child_dependency_detaches_the_child_from_the_parent(
    client: FrameClient,
) -> None:
    await client.call("PUSHF", jobs=family())
    reply = await client.call("RemoveChildDependency", id="c1")
    assert (reply["ok"], reply["removed"]) == (True, True)
    parent = (await client.call("GetJob", id="p"))["job"]
    assert (parent["childrenIds"], parent["dependsOn"]) == (["c2"], ["c2"])
    assert (await client.call("GetJob", id="c1"))["job"]["parentId"] is None


async def test_remove_unprocessed_children_releases_a_parent_left_with_nothing_to_wait_for(
    client: FrameClient,
) -> None:
    await client.call("PUSHF", jobs=family())
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    states = [await state_of(client, i) for i in ("c1", "c2", "p")]
    assert states == ["unknown", "unknown", "waiting"]


async def test_remove_unprocessed_children_leaves_a_parent_failed_by_a_child_failed(
    client: FrameClient,
) -> None:
    await client.call("PUSHF", jobs=family(failParentOnFailure=True))
    await finish(client, "c1", ok=False)
    assert await state_of(client, "p") == "failed"
    assert (await client.call("RemoveUnprocessedChildren", id="p"))["ok"] is True
    assert [await state_of(client, i) for i in ("c2", "p")] == ["unknown", "failed"]
    parent = (await client.call("GetJob", id="p"))["job"]
    assert parent["dependsOn"] == ["c1", "c2"]  # a failed parent's record is left as it failed
