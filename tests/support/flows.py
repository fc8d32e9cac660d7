"""Flow builders and drivers: families of parent and child jobs."""

from __future__ import annotations

from typing import Any

from tests.support.client import FrameClient


def node(job_id: str, queue: str = "fq", **options: Any) -> dict[str, Any]:
    """One PUSHF node: `job_id` on `queue`, its name and data named after it."""
    return {
        "id": job_id,
        "queue": queue,
        "input": {"name": job_id, "data": {"n": job_id}, **options},
    }


def family(**child_options: Any) -> list[dict[str, Any]]:
    """A parent on queue `parents` with children c1 and c2 on queue `fq`."""
    return [
        node("c1", parentId="p", **child_options),
        node("c2", parentId="p", **child_options),
        node("p", "parents", dependsOn=["c1", "c2"], childrenIds=["c1", "c2"]),
    ]


async def finish(client: FrameClient, job_id: str, queue: str = "fq", ok: bool = True) -> None:
    """Pull `job_id` from `queue` (putting back the others pulled with it), then ACK it
    or fail it for good."""
    reply = await client.call("PULLB", queue=queue, count=10)
    assert job_id in [job["id"] for job in reply["jobs"]], reply
    for job in reply["jobs"]:
        if job["id"] != job_id:
            await client.call("MoveToWait", id=job["id"])
    if ok:
        await client.call("ACK", id=job_id, result={"from": job_id})
    else:
        await client.call("FAIL", id=job_id, error=f"{job_id} broke", unrecoverable=True)
