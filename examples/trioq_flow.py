"""A flow (a parent that runs after its children, reading their results), with typed payloads
and the queue's events as an async iterator.

    python examples/trioq_flow.py
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import msgspec

import trioq

URL = os.environ.get("TRIOQ_URL", "tcp://127.0.0.1:6789")


class Part(msgspec.Struct):
    """A typed payload: msgspec Structs encode and decode as such."""

    n: int


async def render(job: trioq.Job[Part]) -> int:
    return job.data.n * 10


async def assemble(job: trioq.Job[Any]) -> int:
    values = await job.children_values()  # {"<queue>:<child id>": result}
    return sum(values.values())


async def main() -> None:
    async with trioq.connect(URL) as client, client.events("reports") as events:
        flow = await trioq.FlowProducer(client).add({
            "name": "report", "queue": "reports", "data": {}, "children": [
                {"name": "part", "queue": "parts", "data": Part(n=1)},
                {"name": "part", "queue": "parts", "data": Part(n=2)}]})  # fmt: skip
        async with (
            trioq.Worker(client, "parts", render, data_type=Part, concurrency=2),
            trioq.Worker(client, "reports", assemble),
        ):
            print("report total:", await flow.job.wait(timeout=10))
        async for event in events:
            print("event:", event.type, event.job_id == flow.job.id)
            if event.type == "completed":
                break


if __name__ == "__main__":
    anyio.run(main)
