"""Finished jobs are kept up to a count and an age (keep_completed, keep_completed_s and their
failed twins): the oldest go first, exactly when they reach the age, and a job that ran again
is judged by its latest finish, not by the one before."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest
import trio

from broker.clock import Clock
from broker.engine.state import engine_state as state_module
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import Job
from broker.engine.state.retention import Retention, expire_retained, mark_finished
from broker.engine.state.timers import TimerWheel
from broker.node.app import App
from broker.node.config import Config
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.client import FrameClient
from tests.support.engine import push, state_of


@pytest.fixture
async def keeping_app(nursery: trio.Nursery) -> AsyncIterator[App]:
    """A broker keeping 2 completed jobs for 10 s, and 2 failed ones for 20 s."""
    config = Config(port=0, http_port=0, memory=True, keep_completed=2, keep_completed_s=10,
                    keep_failed=2, keep_failed_s=20)  # fmt: skip
    app = App(config, clock=Clock(EPOCH_MS))
    await nursery.start(app.run)
    yield app
    app.shutdown()


@pytest.fixture
async def keeping(keeping_app: App, nursery: trio.Nursery) -> FrameClient:
    """A client of `keeping_app`."""
    return await memory_connector(keeping_app, nursery)()


def engine_state(app: App) -> EngineState:
    assert app.actor is not None
    return app.actor.engine.state


async def run(client: FrameClient, job_id: str, *, ok: bool = True) -> None:
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    if ok:
        await client.call("ACK", id=job_id)
    else:
        await client.call("FAIL", id=job_id, error="boom")


async def states(client: FrameClient, *job_ids: str) -> list[str]:
    return [await state_of(client, job_id) for job_id in job_ids]


async def test_a_finished_job_is_forgotten_exactly_at_its_age(
    keeping: FrameClient, autojump_clock: object
) -> None:
    first, second = await push(keeping), await push(keeping)
    await run(keeping, first)
    await trio.sleep(4)
    await run(keeping, second)
    await trio.sleep(5.999)
    assert await states(keeping, first, second) == ["completed", "completed"]
    await trio.sleep(0.001)  # the first is 10 s old
    assert await states(keeping, first, second) == ["unknown", "completed"]
    await trio.sleep(3.999)
    assert await state_of(keeping, second) == "completed"
    await trio.sleep(0.001)
    assert await state_of(keeping, second) == "unknown"


async def test_past_the_count_the_oldest_finished_job_goes_first(keeping: FrameClient) -> None:
    jobs = [await push(keeping) for _ in range(3)]
    for job_id in jobs[:2]:
        await run(keeping, job_id)
    assert await states(keeping, *jobs[:2]) == ["completed", "completed"]
    await run(keeping, jobs[2])
    assert await states(keeping, *jobs) == ["unknown", "completed", "completed"]


async def test_a_job_finished_again_counts_from_its_latest_finish(
    keeping: FrameClient, autojump_clock: object
) -> None:
    again, other = await push(keeping), await push(keeping)
    await run(keeping, again)
    await trio.sleep(1)
    await run(keeping, other)
    await trio.sleep(5)
    assert (await keeping.call("RetryCompleted", queue="q", id=again))["count"] == 1
    await run(keeping, again)  # finished again at 6 s: its first finish no longer counts
    await trio.sleep(4)
    assert await states(keeping, again, other) == ["completed", "completed"]
    third = await push(keeping)
    await run(keeping, third)  # three: the oldest *finish* goes, which is `other`'s
    assert await states(keeping, again, other, third) == ["completed", "unknown", "completed"]
    await trio.sleep(6)
    assert await states(keeping, again, third) == ["unknown", "completed"]


async def test_failed_jobs_have_their_own_count_and_age(
    keeping: FrameClient, autojump_clock: object
) -> None:
    done = await push(keeping)
    failed = [await push(keeping, maxAttempts=1) for _ in range(3)]
    await run(keeping, done)
    for job_id in failed:
        await run(keeping, job_id, ok=False)
    assert await states(keeping, done, *failed) == ["completed", "unknown", "failed", "failed"]
    await trio.sleep(10)
    assert await states(keeping, done, *failed[1:]) == ["unknown", "failed", "failed"]
    await trio.sleep(10)
    assert await states(keeping, *failed[1:]) == ["unknown", "unknown"]


async def test_a_shorter_dead_letter_age_forgets_at_the_new_time(
    client: FrameClient, autojump_clock: object
) -> None:
    await client.call("SetDlqConfig", queue="q", config={"maxAge": 10_000})
    job_id = await push(client, maxAttempts=1)
    await run(client, job_id, ok=False)
    await trio.sleep(1)
    await client.call("SetDlqConfig", queue="q", config={"maxAge": 4_000})
    await trio.sleep(2.999)
    assert await state_of(client, job_id) == "failed"
    await trio.sleep(0.001)  # 4 s after it failed, not the 10 s of the first setting
    assert await state_of(client, job_id) == "unknown"


async def test_a_dead_letter_age_set_later_counts_from_the_failure(
    client: FrameClient, autojump_clock: object
) -> None:
    job_id = await push(client, maxAttempts=1)
    await run(client, job_id, ok=False)
    await trio.sleep(5)
    await client.call("SetDlqConfig", queue="q", config={"maxAge": 10_000})
    await trio.sleep(4.999)
    assert await state_of(client, job_id) == "failed"
    await trio.sleep(0.001)  # 10 s after it failed, not 10 s after the setting
    assert await state_of(client, job_id) == "unknown"


async def test_jobs_pushed_out_of_retention_still_satisfy_dependencies(
    keeping: FrameClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "KEEP_DONE_IDS", 2)
    ids = [await push(keeping) for _ in range(5)]
    assert len((await keeping.call("PULLB", queue="q", count=5))["jobs"]) == 5
    assert (await keeping.call("ACKB", ids=ids))["ok"] is True
    assert await states(keeping, *ids) == ["unknown"] * 3 + ["completed"] * 2
    # The three forgotten ones are remembered as completed, but only the newest two ids.
    refused = await keeping.call("PUSH", queue="q", data={}, dependsOn=[ids[0]])
    assert refused["error"] == f"Dependency job not found: {ids[0]}"
    after = await push(keeping, dependsOn=ids[1:])
    assert await state_of(keeping, after) == "waiting"


async def test_jobs_of_several_queues_pushed_out_together_leave_each_queue_counted(
    keeping_app: App, keeping: FrameClient
) -> None:
    first_q, first_r = await push(keeping, "q"), await push(keeping, "r")
    last_q, last_r = await push(keeping, "q"), await push(keeping, "r")
    for queue in ("q", "r"):
        assert len((await keeping.call("PULLB", queue=queue, count=2))["jobs"]) == 2
    ids = [first_q, first_r, last_q, last_r]
    assert (await keeping.call("ACKB", ids=ids))["ok"] is True
    assert await states(keeping, *ids) == ["unknown", "unknown", "completed", "completed"]
    for queue in ("q", "r"):
        counts = (await keeping.call("GetJobCounts", queue=queue))["counts"]
        assert (counts["completed"], sum(counts.values())) == (1, 1)
    state = engine_state(keeping_app)  # no store: nothing is kept for one to write
    assert not state.changes.deleted and not state.changes.changed


async def test_a_completed_job_forgotten_leaves_its_ttl_timer_counted_stale(
    keeping_app: App, keeping: FrameClient
) -> None:
    # The count decides when the timer wheel is compacted (housekeeping.py).
    wheel = engine_state(keeping_app).wheel
    ids = [*[await push(keeping, ttl=60_000) for _ in range(2)], await push(keeping)]
    ids += [await push(keeping) for _ in range(3)]
    assert len((await keeping.call("PULLB", queue="q", count=6))["jobs"]) == 6
    assert (await keeping.call("ACKB", ids=ids[:3]))["ok"] is True  # the first ttl one goes
    before = wheel.stale
    assert (await keeping.call("ACKB", ids=ids[3:5]))["ok"] is True  # the second one, and
    assert await states(keeping, *ids[:3]) == ["unknown"] * 3  # the one without a ttl
    assert wheel.stale == before + 1
    assert (await keeping.call("ACKB", ids=ids[5:]))["ok"] is True
    again = [await push(keeping, ttl=60_000) for _ in range(2)]
    assert len((await keeping.call("PULLB", queue="q", count=2))["jobs"]) == 2
    assert (await keeping.call("ACKB", ids=again))["ok"] is True  # two plain ones go
    assert wheel.stale == before + 1
    more = [await push(keeping) for _ in range(2)]
    assert len((await keeping.call("PULLB", queue="q", count=2))["jobs"]) == 2
    assert (await keeping.call("ACKB", ids=more))["ok"] is True  # both ttl ones at once
    assert await states(keeping, *again) == ["unknown", "unknown"]
    assert wheel.stale == before + 3


async def test_failed_jobs_pushed_out_leave_no_entry_counted_stale(
    keeping_app: App, keeping: FrameClient
) -> None:
    # Each forgotten job's entry left the retention with it: counting it stale would make
    # compaction come early, for nothing.
    ids = [await push(keeping, maxAttempts=1) for _ in range(3)]
    for job_id in ids:
        await run(keeping, job_id, ok=False)
    failed = engine_state(keeping_app).failed
    assert await states(keeping, *ids) == ["unknown", "failed", "failed"]
    assert (failed.count, len(failed.entries), failed.stale) == (2, 2, 0)
    counts = (await keeping.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["failed"], sum(counts.values())) == (2, 2)
    refused = await keeping.call("PUSH", queue="q", data={}, dependsOn=[ids[0]])
    assert refused["error"] == f"Dependency job not found: {ids[0]}"  # it did not complete


async def test_wait_job_hears_of_a_completion_that_retention_forgets_at_once(
    nursery: trio.Nursery, autojump_clock: object
) -> None:
    app = App(Config(port=0, http_port=0, memory=True, keep_completed=0), clock=Clock(EPOCH_MS))
    await nursery.start(app.run)
    connect = memory_connector(app, nursery)
    waiter, worker = await connect(), await connect()
    job_id = await push(worker)
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    assert len((await worker.call("PULLB", queue="q", count=1))["jobs"]) == 1
    assert (await worker.call("ACKB", ids=[job_id], results=["sent"]))["ok"] is True
    with trio.fail_after(1):
        reply = await waiter.receive_for("w")
    assert reply == {"ok": True, "completed": True, "result": "sent", "reqId": "w"}
    assert await state_of(worker, job_id) == "unknown"
    app.shutdown()


def completed_retention(limit: float, ids: str) -> tuple[Retention, list[Job]]:
    """A Retention of completed jobs kept up to `limit`, holding one job per letter of `ids`
    (finished in that order, all at EPOCH_MS)."""
    retention = Retention("completed", limit, math.inf)
    jobs = [Job(i, "q", "n", b"\x01", EPOCH_MS, EPOCH_MS) for i in ids]
    for job in jobs:
        job.state = "completed"
        mark_finished(job)
        retention.add(job, EPOCH_MS)
    return retention, jobs


def test_compacting_keeps_the_current_entries_and_counts_none_stale() -> None:
    # `stale` decides when the next compaction comes (housekeeping.py): it must start again
    # from the truth, no entry stale, or a small retention would be compacted for nothing.
    retention, jobs = completed_retention(math.inf, "abc")
    jobs[1].state = "waiting"  # retried: its entry no longer describes it
    retention.stale = 1
    retention.compact()
    assert [job.id for _, _, job in retention.entries] == ["a", "c"]
    stale = sum(not retention.current(entry) for entry in retention.entries)
    assert retention.stale == stale == 0


class Forgets:
    """What `expire_retained` needs of EngineState, keeping the tallies as EngineState does:
    a forgotten job leaves the state (one fewer counted)."""

    def __init__(self, retention: Retention) -> None:
        self.wheel = TimerWheel()
        self.retention = retention
        self.forgotten: list[str] = []

    def forget_expired(self, jobs: list[Job], retention: Retention) -> None:
        """Drop the jobs, as EngineState.forget_expired would."""
        assert retention is self.retention
        for job in jobs:
            job.state = "unknown"
            retention.count -= 1
            self.forgotten.append(job.id)


def test_expiring_counts_the_stale_entries_it_passes_over() -> None:
    retention, jobs = completed_retention(1, "abc")
    jobs[0].state = "waiting"  # retried: its entry is stale, and the job no longer counted
    retention.count, retention.stale = 2, 1
    state = Forgets(retention)
    expire_retained(state, retention, EPOCH_MS)
    assert state.forgotten == ["b"]  # over the count of 1; the stale entry forgets nothing
    assert [job.id for _, _, job in retention.entries] == ["c"]
    assert retention.stale == 0 and retention.count == 1


def test_expiring_uncounts_every_stale_entry_it_drops() -> None:
    retention, jobs = completed_retention(1, "abcd")
    for retried in jobs[:2]:
        retried.state = "waiting"
    retention.count, retention.stale = 2, 2
    state = Forgets(retention)
    expire_retained(state, retention, EPOCH_MS)
    assert state.forgotten == ["c"]
    assert [job.id for _, _, job in retention.entries] == ["d"]
    assert retention.stale == 0 and retention.count == 1


def test_expiring_keeps_counting_the_stale_entries_it_leaves_behind() -> None:
    # `stale` must stay the number of entries that are not current, or compaction comes late.
    retention, jobs = completed_retention(1, "abcd")
    for retried in (jobs[0], jobs[3]):
        retried.state = "waiting"
    retention.count, retention.stale = 2, 2
    expire_retained(Forgets(retention), retention, EPOCH_MS)
    assert [job.id for _, _, job in retention.entries] == ["c", "d"]
    stale = sum(not retention.current(entry) for entry in retention.entries)
    assert retention.stale == stale == 1


async def test_a_job_finished_twice_at_once_ages_out_once(
    client: FrameClient, app, autojump_clock
) -> None:
    job_id = await push(client)
    await client.call("Discard", id=job_id)
    await client.call("RetryDlq", queue="q")
    await client.call("Discard", id=job_id)  # same instant: two retention entries
    await trio.sleep(8 * 86_400)  # past the 7-day age: the broker must not crash
    assert await state_of(client, job_id) == "unknown"
    assert app.actor.engine.state.failed.count == 0
