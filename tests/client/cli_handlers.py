"""Handlers for the `trioq worker` tests (imported by the worker process)."""

from __future__ import annotations

from typing import Any

import anyio

import trioq


async def double(job: trioq.Job[Any]) -> int:
    """A plain handler: `trioq worker tests.client.cli_handlers:double --queue Q`."""
    if job.data == "slow":
        await anyio.sleep(0.5)
        return -1
    return int(job.data) * 2


settings = {"handler": double, "concurrency": 3}
"""Worker settings as a dict (the queue comes from --queue)."""
