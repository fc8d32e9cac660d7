"""The client against a real broker (memory and SQLite), under asyncio and Trio."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

import trioq
from tests.support.client_broker import Broker, Run


async def echo(job: trioq.Job[Any]) -> Any:
    return {"echo": job.data, "name": job.name}


def test_add_work_and_wait_for_results(run: Run, broker: Broker, queue_name: str) -> None:
    async def main() -> None:
        async with trioq.connect(broker.url, token=None) as client:
            queue = client.queue(queue_name)
            job = await queue.add(
                "welcome", {"to": "ada@example.com"}, attempts=3, delay_ms=0, priority=0
            )
            jobs = await queue.add_bulk([("welcome", {"to": "a@x"}), ("welcome", {"to": "b@x"})])
            assert len({job.id, *(j.id for j in jobs)}) == 3
            counts = await queue.counts()
            assert (counts["waiting"], counts["active"], counts["completed"]) == (3, 0, 0)
            same = await client.get_job(job.id)
            assert same is not None
            assert (same.id, same.name, same.data, same.state) == (
                job.id, "welcome", {"to": "ada@example.com"}, "waiting",
            )  # fmt: skip
            assert same.max_attempts == 3
            assert await client.get_job("no-such-job") is None
            worker = trioq.Worker(client, queue_name, echo, concurrency=10)
            async with worker:
                result = await job.wait(timeout=10)
                results = [await j.wait(timeout=10) for j in jobs]
            assert result == {"echo": {"to": "ada@example.com"}, "name": "welcome"}
            assert [r["echo"]["to"] for r in results] == ["a@x", "b@x"]
            counts = await queue.counts()
            assert (counts["waiting"], counts["active"], counts["completed"]) == (0, 0, 3)
            done = await client.get_job(job.id)
            assert done is not None and done.state == "completed" and done.result == result

    run(main)


def test_a_failed_job_raises_job_failed_with_its_reason(run: Run, queue_name: str,
                                                        memory_broker: Broker) -> None:  # fmt: skip
    async def fail(job: trioq.Job[Any]) -> None:
        if job.data["kind"] == "unrecoverable":
            raise trioq.Unrecoverable("bad input, do not retry")
        raise ValueError(f"boom {job.data['kind']}")

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            once = await queue.add("x", {"kind": "once"}, attempts=1)
            never = await queue.add("x", {"kind": "unrecoverable"}, attempts=5)
            async with trioq.Worker(client, queue_name, fail, concurrency=2):
                with pytest.raises(trioq.JobFailed) as failed:
                    await once.wait(timeout=10)
                assert failed.value.reason == "boom once" and failed.value.state == "failed"
                with pytest.raises(trioq.JobFailed, match="bad input"):
                    await never.wait(timeout=10)
            latest = await client.get_job(never.id)
            assert latest is not None and latest.attempts == 1  # no retry was made
            assert any("ValueError" in line for line in (await client.get_job(once.id)).stacktrace)  # type: ignore[union-attr]
            assert sorted(j.id for j in await queue.dlq()) == sorted([once.id, never.id])
            assert await queue.retry_dlq(never.id) == 1
            assert await queue.purge_dlq() == 1

    run(main)


def test_an_exception_is_retried_by_the_broker(run: Run, queue_name: str,
                                               memory_broker: Broker) -> None:  # fmt: skip
    tries: list[int] = []

    async def flaky(job: trioq.Job[Any]) -> str:
        tries.append(job.attempts)
        if len(tries) == 1:
            raise RuntimeError("first try fails")
        return "ok"

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            job = await client.queue(queue_name).add("x", None, attempts=2, backoff_ms=1)
            async with trioq.Worker(client, queue_name, flaky):
                assert await job.wait(timeout=10) == "ok"
        assert tries == [0, 1]

    run(main)


def test_a_flow_runs_children_first_and_the_parent_reads_their_results(
    run: Run, broker: Broker, queue_name: str
) -> None:
    order: list[str] = []

    async def part(job: trioq.Job[Any]) -> int:
        order.append(f"part{job.data['n']}")
        return int(job.data["n"]) * 10

    async def report(job: trioq.Job[Any]) -> dict[str, Any]:
        order.append("report")
        return await job.children_values()

    async def main() -> None:
        async with trioq.connect(broker.url) as client:
            parts, reports = f"{queue_name}-parts", f"{queue_name}-reports"
            flow = await trioq.FlowProducer(client).add({
                "name": "report", "queue": reports, "data": {}, "children": [
                    {"name": "part", "queue": parts, "data": {"n": 1}},
                    {"name": "part", "queue": parts, "data": {"n": 2}}]})  # fmt: skip
            assert [c.job.name for c in flow.children] == ["part", "part"]
            parent = await client.get_job(flow.job.id)
            assert parent is not None and parent.state == "waiting-children"
            async with (
                trioq.Worker(client, parts, part, concurrency=2),
                trioq.Worker(client, reports, report),
            ):
                values = await flow.job.wait(timeout=10)
            child_ids = {child.job.id for child in flow.children}
            assert {key.split(":", 1)[1] for key in values} == child_ids
            assert sorted(values.values()) == [10, 20]
            assert order[-1] == "report" and sorted(order[:2]) == ["part1", "part2"]

    run(main)


class Email(msgspec.Struct):
    to: str
    subject: str = "hello"


class Receipt(msgspec.Struct):
    sent_to: str


def test_payloads_and_results_as_msgspec_structs(run: Run, queue_name: str,
                                                 memory_broker: Broker) -> None:  # fmt: skip
    async def send(job: trioq.Job[Email]) -> Receipt:
        assert isinstance(job.data, Email)
        return Receipt(sent_to=job.data.to)

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name, Email)
            job = await queue.add("send", Email(to="ada@example.com"))
            stored = await queue.get_job(job.id)
            assert stored is not None and stored.data == Email(to="ada@example.com")
            async with trioq.Worker(client, queue_name, send, data_type=Email):
                receipt = await job.wait(timeout=10, result_type=Receipt)
            assert receipt == Receipt(sent_to="ada@example.com")

    run(main)


def test_concurrent_adds_are_batched_and_a_bad_one_fails_alone(
    run: Run, queue_name: str, memory_broker: Broker
) -> None:
    async def main() -> None:
        async with trioq.connect(memory_broker.url, pool_size=1) as client:
            queue = client.queue(queue_name)
            ids: dict[int, str] = {}
            errors: dict[int, BaseException] = {}

            async def add(n: int) -> None:
                try:
                    options: Any = {"priority": "not a number"} if n == 7 else {}
                    ids[n] = (await queue.add("x", {"n": n}, **options)).id
                except trioq.ServerError as exc:
                    errors[n] = exc

            async with anyio.create_task_group() as group:
                for n in range(200):
                    group.start_soon(add, n)
            assert set(errors) == {7} and "priority must be a number" in str(errors[7])
            assert len(set(ids.values())) == 199
            assert (await queue.counts())["waiting"] == 199
            jobs = await queue.get_jobs("waiting", limit=1000)
            assert sorted(job.data["n"] for job in jobs) == sorted(ids)

    run(main)


def test_queue_management_and_crons(run: Run, queue_name: str, memory_broker: Broker) -> None:
    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            await queue.add("a", 1)
            delayed = await queue.add("b", 2, delay_ms=60_000, job_id=f"{queue_name}-b")
            assert await delayed.get_state() == "delayed"
            again = await queue.add("b", 2, job_id=f"{queue_name}-b")
            assert again.id == delayed.id  # a custom id is idempotent
            await queue.pause()
            assert await queue.is_paused()
            await queue.resume()
            assert not await queue.is_paused()
            assert await queue.count() == 2
            assert await queue.promote_jobs() == 1
            assert await delayed.get_state() == "waiting"
            assert await queue.drain() == 2
            cron = await queue.upsert_cron(f"{queue_name}-nightly", {"r": 1}, pattern="0 3 * * *")
            assert cron["queue"] == queue_name and cron["nextRun"] > 0
            assert [c["name"] for c in await queue.crons()] == [f"{queue_name}-nightly"]
            assert await queue.remove_cron(f"{queue_name}-nightly")
            assert await queue.get_cron(f"{queue_name}-nightly") is None
            with pytest.raises(ValueError, match="invalid characters"):
                client.queue("no spaces allowed")
            with pytest.raises(trioq.ServerError, match="Unknown command"):
                await client.command("NoSuchCommand")
            await queue.obliterate()
            assert (await queue.counts())["waiting"] == 0

    run(main)
