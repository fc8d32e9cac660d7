"""Add a job and work it with the trioq client (asyncio; `--trio` runs the same under Trio).

trioq serve --memory &                 # a broker on 127.0.0.1:6789
python examples/trioq_quickstart.py    # or TRIOQ_URL=tcp://host:port ...
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

import trioq

URL = os.environ.get("TRIOQ_URL", "tcp://127.0.0.1:6789")


async def send_welcome(job: trioq.Job[Any]) -> dict[str, Any]:
    """The handler: its return value is the job's result; an exception fails the attempt."""
    await job.progress(50, "rendering")
    await job.log(f"sending to {job.data['to']}")
    return {"sent": True, "to": job.data["to"]}


async def main() -> None:
    async with trioq.connect(URL) as client:
        emails = client.queue("emails")
        job = await emails.add("welcome", {"to": "ada@example.com"}, attempts=3)
        async with trioq.Worker(client, "emails", send_welcome, concurrency=10):
            result = await job.wait(timeout=10)
        print("result:", result)
        print("counts:", await emails.counts())


if __name__ == "__main__":
    anyio.run(main, backend="trio" if "--trio" in sys.argv else "asyncio")
