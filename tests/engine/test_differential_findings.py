"""What differential runs against the reference found (issue 34, item 5): replace refused when
live jobs depend on the job, custom ids still named by waiting jobs, the stack a retried job
carries, GetJobs of a paused queue, and the reference's error texts where the seed is silent."""

from __future__ import annotations

from tests.engine.test_push_pull import push
from tests.support.client import FrameClient

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
