"""Flow commands at their edges: what a graph may name, the children queries on jobs that are
not all finished, and the legacy edits on jobs that do not fit them."""

from __future__ import annotations

from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.flows import family, finish, node


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
