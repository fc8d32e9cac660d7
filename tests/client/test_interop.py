"""Interop both ways: the official TypeScript SDK's jobs worked by a trioq.Worker, and trioq's
jobs worked by the TypeScript and Python SDKs' workers (tests/interop/ts/trioq.ts runs the
TypeScript side with bun; `make test` installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from typing import Any

from bunqueue import Worker as SdkWorker

import trioq
from tests.support.client_broker import Broker, run_async
from tests.support.typescript import BUN, HERE

JOBS = 5


def run_ts(mode: str, broker: Broker, queue: str) -> dict[str, Any]:
    """Run tests/interop/ts/trioq.ts; its JSON report."""
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    env = {**os.environ, "TRIOQ_HOST": "127.0.0.1", "TRIOQ_PORT": str(broker.port),
           "MODE": mode, "QUEUE": queue, "JOBS": str(JOBS)}  # fmt: skip
    result = subprocess.run([str(BUN), "run", "trioq.ts"], cwd=HERE, env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_jobs_added_by_the_typescript_sdk_are_worked_by_a_trioq_worker(
    memory_broker: Broker, queue_name: str
) -> None:
    ids = run_ts("produce", memory_broker, queue_name)["ids"]

    async def main() -> list[Any]:
        async def double(job: trioq.Job[Any]) -> dict[str, Any]:
            return {"doubled": job.data["n"] * 2, "name": job.name}

        async with (
            trioq.connect(memory_broker.url) as client,
            trioq.Worker(client, queue_name, double, concurrency=2),
        ):
            jobs = [await client.get_job(job_id) for job_id in ids]
            return [await job.wait(timeout=10) for job in jobs if job is not None]

    results = run_async("trio", main)
    assert results == [{"doubled": n * 2, "name": "from-ts"} for n in range(JOBS)]


def test_jobs_added_by_trioq_are_worked_by_the_typescript_sdk(memory_broker: Broker,
                                                              queue_name: str) -> None:  # fmt: skip
    async def add() -> list[str]:
        async with trioq.connect(memory_broker.url) as client:
            jobs = await client.queue(queue_name).add_bulk([("from-trioq", {"n": n})
                                                             for n in range(JOBS)])  # fmt: skip
            return [job.id for job in jobs]

    ids = run_async("asyncio", add)
    seen = run_ts("consume", memory_broker, queue_name)["seen"]
    assert sorted(item["data"]["n"] for item in seen) == list(range(JOBS))
    assert {item["name"] for item in seen} == {"from-trioq"}

    async def results() -> list[Any]:
        async with trioq.connect(memory_broker.url) as client:
            return [(await client.get_job(job_id)).result for job_id in ids]  # type: ignore[union-attr]

    assert run_async("asyncio", results) == [
        {"doubled": n * 2, "name": "from-trioq"} for n in range(JOBS)
    ]


def test_jobs_added_by_trioq_are_worked_by_the_python_sdk(memory_broker: Broker,
                                                          queue_name: str) -> None:  # fmt: skip
    seen: list[Any] = []
    all_done = threading.Event()

    def process(job: Any) -> dict[str, Any]:
        seen.append(job.data)
        if len(seen) == JOBS:
            all_done.set()
        return {"tripled": job.data["n"] * 3}

    with trioq.sync.connect(memory_broker.url) as client:
        jobs = client.queue(queue_name).add_bulk([("from-trioq", {"n": n}) for n in range(JOBS)])
        worker = SdkWorker(queue_name, process, host="127.0.0.1", port=memory_broker.port,
                           concurrency=2, poll_timeout_ms=200)  # fmt: skip
        try:
            assert [job.wait(timeout=10) for job in jobs] == [
                {"tripled": n * 3} for n in range(JOBS)
            ]
        finally:
            worker.close()
    assert all_done.is_set()
    assert sorted(item["n"] for item in seen) == list(range(JOBS))
