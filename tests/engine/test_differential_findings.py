"""What differential runs against the reference found (issue 34, item 5): replace refused when
live jobs depend on the job, custom ids still named by waiting jobs, the stack a retried job
carries, GetJobs of a paused queue, and the reference's error texts where the seed is silent."""

from __future__ import annotations

from tests.support.client import FrameClient
from tests.support.engine import push

REPLACE = {"replace": True}


def blocked(job_id: str) -> str:
    return f"Cannot replace deduplicated job {job_id} because live jobs depend on it"


async def state_of(client: FrameClient, job_id: str) -> str:
    return str((await client.call("GetState", id=job_id))["state"])


# -- dedup replace of a job live jobs depend on -----------------------------------------------


async def test_a_batch_item_waiting_for_a_held_job_blocks_a_later_item_replacing_it(
    client: FrameClient,
) -> None:
    held = await push(client, uniqueKey="k", jobId="held")
    jobs = [{"data": 1, "dependsOn": [held]}, {"data": 2, "uniqueKey": "k", "dedup": REPLACE}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[1]: {blocked(held)}"
    assert await state_of(client, held) == "waiting"
    assert (await client.call("Count", queue="q"))["count"] == 1  # nothing of the batch landed


async def test_a_job_may_not_replace_the_job_it_depends_on(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k", jobId="held")
    alone = await client.call(
        "PUSH", queue="q", data=2, uniqueKey="k", dedup=REPLACE, dependsOn=[held]
    )
    assert alone["error"] == blocked(held)
    item = {"data": 2, "uniqueKey": "k", "dedup": REPLACE, "dependsOn": [held]}
    batch = await client.call("PUSHB", queue="q", jobs=[item])
    assert batch["error"] == f"jobs[0]: {blocked(held)}"
    assert await state_of(client, held) == "waiting"


async def test_a_batch_item_replacing_an_earlier_one_gets_its_own_id_as_push_does(
    client: FrameClient,
) -> None:
    jobs = [{"data": 1, "uniqueKey": "k"}, {"data": 2, "uniqueKey": "k", "dedup": REPLACE}]
    first, second = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert first != second
    listed = (await client.call("GetJobs", queue="q"))["jobs"]
    assert [(job["id"], job["data"]) for job in listed] == [(second, 2)]


# -- a finished custom id still named by waiting jobs -------------------------------------------

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


# -- the stack a job pulled after a failed attempt carries -------------------------------------


async def fail_and_pull_again(client: FrameClient, job_id: str, stack: list[object]) -> object:
    await client.call("FAIL", id=job_id, error="boom", stack=stack)
    job = (await client.call("PULL", queue="q", timeout=1000))["job"]
    assert job["id"] == job_id
    return job["stacktrace"]


async def test_a_job_pulled_again_carries_the_stack_of_its_failed_attempt(
    client: FrameClient,
) -> None:
    job_id = await push(client, maxAttempts=5, backoff=0, stackTraceLimit=2)
    await client.call("PULL", queue="q")
    trimmed = await fail_and_pull_again(client, job_id, ["  at a  ", "", "at b", "at c"])
    assert trimmed == ["at a", "at b"]  # trimmed, blank lines left out, the limit applied
    assert await fail_and_pull_again(client, job_id, []) == ["at a", "at b"]  # none: kept
    assert await fail_and_pull_again(client, job_id, [1, None, "at x"]) == ["at x"]
    assert await fail_and_pull_again(client, job_id, ["   "]) is None  # only blank: none


# -- GetJobs of a paused queue -------------------------------------------------------------------


async def test_a_paused_queues_ready_jobs_are_listed_as_paused(client: FrameClient) -> None:
    waiting = await push(client)
    urgent = await push(client, priority=5)
    grouped = await push(client, groupId="g", priority=2)
    later = await push(client, delay=60_000)
    await client.call("Pause", queue="q")
    listed = (await client.call("GetJobs", queue="q", state="paused"))["jobs"]
    assert sorted((job["id"], job["state"]) for job in listed) == sorted(
        [(waiting, "paused"), (urgent, "paused"), (grouped, "paused")]
    )
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert counts["paused"] == len(listed) == 3
    both = (await client.call("GetJobs", queue="q", state=["paused", "delayed"]))["jobs"]
    assert {(job["id"], job["state"]) for job in both} == {
        (waiting, "paused"), (urgent, "paused"), (grouped, "paused"), (later, "delayed"),
    }  # fmt: skip
    assert (await client.call("GetJobs", queue="q", state="waiting"))["jobs"] == []
    assert await state_of(client, waiting) == "waiting"  # GetState still says waiting


# -- the reference's error texts where the seed words none ---------------------------------------

BAD_NAME = "Job name must be a non-empty string of at most 256 characters"


async def test_error_texts_are_the_references_where_the_seed_is_silent(
    client: FrameClient,
) -> None:
    async def error(cmd: str, **fields: object) -> object:
        reply = await client.call(cmd, **fields)
        assert reply["ok"] is False, reply
        return reply["error"]

    assert await error("PUSH", queue="q", name=5, data=1) == BAD_NAME
    assert await error("PUSH", queue="q", data={"name": ""}) == BAD_NAME  # an older SDK's form
    assert await error("PUSHB", queue="q", jobs=[{"name": ["a"], "data": 1}]) == (
        f"jobs[0]: {BAD_NAME}"
    )
    assert await error("PUSH", queue="q", data=1, groupId="g", groupMaxSize=0) == (
        "group.maxSize must be a positive safe integer"
    )
    assert await error("PUSH", queue="q", data=1, repeat={"every": -1}) == (
        "repeat.every must be a positive finite number"
    )
    assert await error("PUSH", queue="q", data=1, repeat={"pattern": "soon"}) == (
        "Invalid repeat pattern: soon"
    )
    await push(client, groupId="g", groupMaxSize=1)
    assert await error("PUSH", queue="q", data=2, groupId="g", groupMaxSize=1) == (
        "Group g has reached its maximum size of 1"
    )
    assert await error("RateLimit", queue="q", limit="x") == "limit must be a finite number"
    assert await error("SetConcurrency", queue="q", limit="x") == "limit must be a finite number"
    waiting = await push(client, "other")
    assert await error("Progress", id=waiting, progress=5) == (
        "Job is not active (current state: waiting)"
    )
    assert await error("UpdateParent", childId="ghost", parentId=waiting) == (
        "Child job not found: ghost"
    )
    assert await error("UpdateParent", childId=waiting, parentId="ghost") == (
        "Parent job not found: ghost"
    )
