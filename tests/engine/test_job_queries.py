"""Reading jobs: GetJob, GetState, GetJobCounts and GetResult, with their exact replies."""

from __future__ import annotations

from tests.support.client import FrameClient
from tests.support.engine import push, without_req_id


async def test_get_result_only_of_completed_jobs(client: FrameClient) -> None:
    done = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done, result={"r": 1})
    reply = await client.call("GetResult", id=done)
    assert without_req_id(reply) == {"ok": True, "id": done, "result": {"r": 1}}
    waiting = await push(client)
    assert without_req_id(await client.call("GetResult", id=waiting)) == {
        "ok": True, "id": waiting, "result": None,
    }  # fmt: skip
    assert (await client.call("GetResult", id="ghost"))["result"] is None


async def test_get_job_of_an_unknown_id(client: FrameClient) -> None:
    reply = await client.call("GetJob", id="ghost")
    assert (reply["ok"], reply["error"]) == (False, "Job not found")


async def test_get_state_and_get_job_counts_answer_ok(client: FrameClient) -> None:
    job_id = await push(client)
    reply = without_req_id(await client.call("GetState", id=job_id))
    assert reply == {"ok": True, "id": job_id, "state": "waiting"}
    reply = without_req_id(await client.call("GetState", id="ghost"))
    assert reply == {"ok": True, "id": "ghost", "state": "unknown"}
    counts = await client.call("GetJobCounts", queue="q")
    assert (counts["ok"], counts["counts"]["waiting"]) == (True, 1)
