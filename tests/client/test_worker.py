"""Workers, cancellation and reconnection against a real broker, under asyncio and Trio."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import trioq
from tests.support.client_broker import Broker, Run


def test_a_cancelled_call_leaves_the_connection_in_step(run: Run, queue_name: str,
                                                        memory_broker: Broker) -> None:  # fmt: skip
    async def main() -> None:
        async with trioq.connect(memory_broker.url, pool_size=1) as client:
            queue = client.queue(queue_name)
            job = await queue.add("x", {"n": 1})
            with anyio.move_on_after(0.1) as scope:
                await job.wait(timeout=30)  # parked on the broker: cancelled mid-call
            assert scope.cancelled_caught
            with pytest.raises(trioq.Timeout):
                await job.wait(timeout=0.2)
            # Adds cancelled in flight: each either went out whole or not at all.
            with anyio.move_on_after(0.002):
                async with anyio.create_task_group() as group:
                    for n in range(100):
                        group.start_soon(queue.add, "cancelled", {"n": n})
            added = [j.data["n"] for j in await queue.get_jobs("waiting", limit=1000)
                     if j.name == "cancelled"]  # fmt: skip
            assert len(added) == len(set(added)) and set(added) <= set(range(100))
            # Every later call on the same connection gets its own answer, also while the
            # abandoned WaitJob's answer arrives (when the worker completes the job).
            async with trioq.Worker(client, queue_name, lambda job: job.data["n"] + 1):
                assert await job.wait(timeout=10) == 2
                for n in range(20):
                    other = await queue.add("x", {"n": n})
                    same = await client.get_job(other.id)
                    assert same is not None and same.data == {"n": n}
                    assert await other.wait(timeout=10) == n + 1

    run(main)


def test_stopping_a_worker_gives_back_the_jobs_in_hand(run: Run, queue_name: str,
                                                       memory_broker: Broker) -> None:  # fmt: skip
    async def main() -> None:
        started: list[str] = []
        both = anyio.Event()

        async def stuck(job: trioq.Job[Any]) -> None:
            started.append(job.id)
            if len(started) == 2:
                both.set()
            await anyio.sleep_forever()

        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            for n in range(5):
                await queue.add("x", n)
            worker = trioq.Worker(client, queue_name, stuck, concurrency=2, shutdown_grace=0.2)
            async with worker:
                await both.wait()
                assert (await queue.counts())["active"] == 4  # two running, two prefetched
            counts = await queue.counts()
            assert (counts["waiting"], counts["active"]) == (5, 0)
            assert all(job.attempts == 0 for job in await queue.get_waiting())

    run(main)


def test_cancelling_a_running_worker_finishes_the_job_in_hand(
    run: Run, queue_name: str, memory_broker: Broker
) -> None:
    async def main() -> None:
        started = anyio.Event()

        async def slow(job: trioq.Job[Any]) -> str:
            started.set()
            await anyio.sleep(0.3)
            return "finished"

        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            job = await queue.add("x", None)
            async with anyio.create_task_group() as group:
                group.start_soon(trioq.Worker(client, queue_name, slow, shutdown_grace=5).run)
                await started.wait()
                group.cancel_scope.cancel()  # as on SIGTERM: stop taking jobs, finish this one
            assert await job.wait(timeout=5) == "finished"
            assert (await queue.counts())["active"] == 0

    run(main)


def test_sync_handlers_run_in_threads_and_report_progress(
    run: Run, queue_name: str, memory_broker: Broker
) -> None:
    threads: set[int] = set()

    def handler(job: trioq.SyncJob[Any]) -> int:
        threads.add(threading.get_ident())
        job.progress(50, "half way")
        job.log("working on it")
        return int(job.data) * 2

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            job = await client.queue(queue_name).add("x", 21)
            async with trioq.Worker(client, queue_name, handler, name="resizer") as worker:
                assert await job.wait(timeout=10) == 42
                listed = [w for w in await client.list_workers() if w["id"] == worker.id]
                assert [(w["name"], w["queues"], w["status"]) for w in listed] == [
                    ("resizer", [queue_name], "active")
                ]
            assert worker.id not in [w["id"] for w in await client.list_workers()]
            assert [line["message"] for line in await job.logs()] == ["working on it"]

    run(main)
    assert threading.get_ident() not in threads


def test_concurrency_and_rate_limits_are_respected(run: Run, queue_name: str,
                                                   memory_broker: Broker) -> None:  # fmt: skip
    async def main() -> None:
        running = peak = 0
        starts: list[float] = []

        async def handler(job: trioq.Job[Any]) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            starts.append(anyio.current_time())
            await anyio.sleep(0.02)
            running -= 1

        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            jobs = await queue.add_bulk([("x", n) for n in range(12)])
            async with trioq.Worker(client, queue_name, handler, concurrency=3,
                                    rate_limit=(4, 0.25)):  # fmt: skip
                for job in jobs:
                    await job.wait(timeout=10)
        assert peak == 3
        # No window of 0.25 s holds more than 4 starts (10 ms for clock rounding: a broken
        # limit starts the fifth job at once, 0.23 s early).
        assert min(starts[i + 4] - starts[i] for i in range(len(starts) - 4)) > 0.24

    run(main)


def test_long_jobs_keep_their_lease(run: Run, queue_name: str, memory_broker: Broker) -> None:
    runs: list[str] = []

    async def long(job: trioq.Job[Any]) -> str:
        runs.append(job.id)
        await anyio.sleep(1.2)  # twice the lease: only renewals keep the job ours
        return "done"

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            job = await client.queue(queue_name).add("x", None)
            async with trioq.Worker(client, queue_name, long, lock_ttl=0.6):
                assert await job.wait(timeout=10) == "done"
            latest = await client.get_job(job.id)
            assert latest is not None and latest.attempts == 0
        assert runs == [job.id]

    run(main)


def test_a_broker_restart_under_a_running_worker_loses_no_job(
    run: Run, queue_name: str, tmp_path: Path
) -> None:
    broker = Broker(data_dir=tmp_path / "data")
    total = 300
    done: set[str] = set()

    async def main() -> None:
        a_third, all_done = anyio.Event(), anyio.Event()

        async def handler(job: trioq.Job[Any]) -> int:
            await anyio.sleep(0.005)
            done.add(job.id)
            if len(done) >= total // 3:
                a_third.set()
            if len(done) == total:
                all_done.set()
            return int(job.data)

        async with trioq.connect(broker.url, backoff=(0.05, 0.2)) as client:
            queue = client.queue(queue_name)
            ids = {job.id for job in await queue.add_bulk([("x", n) for n in range(total)])}
            async with trioq.Worker(client, queue_name, handler, concurrency=20, lock_ttl=5):
                await a_third.wait()
                await anyio.to_thread.run_sync(broker.restart)
                await all_done.wait()
            assert done == ids
            counts = await queue.counts()  # the worker sent every result before it stopped
            assert (counts["completed"], counts["active"], counts["waiting"]) == (total, 0, 0)

    try:
        run(main)
    finally:
        broker.stop()


def test_events_arrive_as_an_async_iterator(run: Run, queue_name: str,
                                            memory_broker: Broker) -> None:  # fmt: skip
    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            async with client.events(queue_name) as events:
                job = await client.queue(queue_name).add("x", 1)
                async with trioq.Worker(client, queue_name, lambda job: "r"):
                    seen: list[str] = []
                    async for event in events:
                        assert event.queue == queue_name and event.job_id == job.id
                        seen.append(event.type)
                        if event.type == "completed":
                            break
            assert seen == ["pushed", "pulled", "completed"]

    run(main)


def test_auth_token(run: Run, queue_name: str) -> None:
    broker = Broker("--auth-token", "s3cret")

    async def main() -> None:
        async with trioq.connect(broker.url, token="s3cret") as client:
            assert (await client.queue(queue_name).add("x", 1)).id
        with pytest.raises(trioq.AuthError):
            async with trioq.connect(broker.url, token="wrong"):
                pass
        with pytest.raises(trioq.ConnectError):
            async with trioq.connect("tcp://127.0.0.1:1", connect_timeout=2):
                pass

    try:
        run(main)
    finally:
        broker.stop()


def test_the_sync_facade(backend: str, queue_name: str, memory_broker: Broker) -> None:
    with trioq.sync.connect(memory_broker.url, backend=backend) as client:
        queue = client.queue(queue_name)
        with client.events(queue_name) as events:
            job = queue.add("welcome", {"to": "ada"})
            event = next(events)
            assert (event.type, event.job_id) == ("pushed", job.id)
        assert queue.counts()["waiting"] == 1
        same = client.get_job(job.id)
        assert same is not None and same.data == {"to": "ada"}
        with trioq.sync.Worker(client, queue_name, lambda job: job.data["to"].upper()):
            assert job.wait(timeout=10) == "ADA"
        failing = queue.add("x", None, attempts=1)
        with trioq.sync.Worker(client, queue_name, _raise), pytest.raises(trioq.JobFailed):
            failing.wait(timeout=10)
        assert [j.id for j in queue.dlq()] == [failing.id]


def _raise(job: trioq.SyncJob[Any]) -> None:
    raise RuntimeError("nope")
