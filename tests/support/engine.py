"""Drivers of the engine over one FrameClient: push, pull, lease, read and settle jobs."""

from __future__ import annotations

import trio

from tests.support.client import FrameClient


async def push(client: FrameClient, queue: str = "q", **fields: object) -> str:
    """PUSH one job (data `{}` unless given); its id, the reply checked."""
    fields.setdefault("data", {})
    reply = await client.call("PUSH", queue=queue, **fields)
    assert reply["ok"] is True, reply
    return reply["id"]


async def pull_ids(client: FrameClient, queue: str = "q", count: int = 100) -> list[str]:
    """The ids of up to `count` jobs one PULLB claims."""
    reply = await client.call("PULLB", queue=queue, count=count)
    return [job["id"] for job in reply["jobs"]]


async def state_of(client: FrameClient, job_id: str) -> str:
    """What GetState says of the job."""
    return (await client.call("GetState", id=job_id))["state"]


async def lease(client: FrameClient, queue: str = "q", ttl: float = 30000) -> tuple[str, str]:
    """PULL one job with an owner and a lease of `ttl` ms; its id and lock token."""
    reply = await client.call("PULL", queue=queue, owner="w", lockTtl=ttl)
    return reply["job"]["id"], reply["token"]


async def get_job(client: FrameClient, job_id: str) -> dict:
    """The job as GetJob shows it."""
    return (await client.call("GetJob", id=job_id))["job"]


async def fail_for_good(client: FrameClient, queue: str = "q", job_id: str | None = None) -> str:
    """Push a one-attempt job (unless `job_id` is queued already), pull it and fail it."""
    if job_id is None:
        job_id = await push(client, queue, maxAttempts=1)
    pulled = (await client.call("PULL", queue=queue))["job"]
    assert pulled["id"] == job_id
    assert (await client.call("FAIL", id=job_id, error="boom"))["ok"] is True
    assert await state_of(client, job_id) == "failed"
    return job_id


def drain(subscription) -> list[tuple[str, str]]:
    """The (event, jobId) pairs a subscription holds now, without waiting."""
    got = []
    while True:
        try:
            message = subscription.receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return got
        got.append((message["event"], message["data"]["jobId"]))


async def logs_of(client: FrameClient, job_id: str, **page: int) -> tuple[list[str], int]:
    """A page of the job's log lines, and how many it holds in all."""
    data = (await client.call("GetLogs", id=job_id, **page))["data"]
    return [entry["message"] for entry in data["logs"]], data["count"]


def without_req_id(reply: dict) -> dict:
    """The reply without its reqId, to compare it whole."""
    return {key: value for key, value in reply.items() if key != "reqId"}
