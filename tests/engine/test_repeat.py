"""Repeating jobs: the next occurrence is scheduled from the schedule, on the timer wheel."""

from __future__ import annotations

import trio

from tests.support.app import EPOCH_MS
from tests.support.client import FrameClient
from tests.support.engine import get_job, push, state_of


async def pull_job(client: FrameClient, queue: str = "q", wait_ms: int = 60_000) -> dict:
    reply = await client.call("PULL", queue=queue, timeout=wait_ms)
    assert reply["job"] is not None
    return reply["job"]


async def test_every_runs_on_its_schedule_up_to_the_limit(
    client: FrameClient, autojump_clock
) -> None:
    await push(client, data={"report": 1}, repeat={"every": 1000, "limit": 3})
    start = trio.current_time()
    seen = []
    for _ in range(3):
        job = await pull_job(client)
        seen.append((round(trio.current_time() - start, 3), job["repeat"]["count"], job["data"]))
        await client.call("ACK", id=job["id"])
    assert seen == [(0.0, 0, {"report": 1}), (1.0, 1, {"report": 1}), (2.0, 2, {"report": 1})]
    assert (await client.call("PULL", queue="q", timeout=5000))["job"] is None


async def test_a_slow_occurrence_does_not_delay_the_schedule(
    client: FrameClient, autojump_clock
) -> None:
    await push(client, repeat={"every": 1000})
    first = await pull_job(client)
    await trio.sleep(2.5)  # the worker is slow: the 1 s and 2 s runs were missed
    await client.call("ACK", id=first["id"])
    second = await pull_job(client)
    assert second["runAt"] - first["runAt"] == 1000  # made when the first one started
    third = await pull_job(client)
    assert third["runAt"] - first["runAt"] == 3000  # missed times are skipped, phase kept


async def test_pattern_with_time_zone(client: FrameClient, autojump_clock) -> None:
    # EPOCH_MS is 2027-01-15 08:00 UTC; 10:00 in Helsinki is 08:00 UTC (+2 in winter).
    await push(client, repeat={"pattern": "0 10 * * *", "tz": "Europe/Helsinki"})
    job = await pull_job(client, wait_ms=60_000)
    assert job["runAt"] == EPOCH_MS
    second = (await client.call("GetJobCounts", queue="q"))["counts"]["delayed"]
    assert second == 1


async def test_bad_patterns_are_refused(client: FrameClient) -> None:
    reply = await client.call("PUSH", queue="q", data={}, repeat={"pattern": "every day"})
    assert reply["error"] == "Invalid repeat pattern: every day"
    reply = await client.call(
        "PUSH", queue="q", data={}, repeat={"pattern": "* * * * *", "tz": "Nowhere/City"}
    )
    assert reply["error"] == "Invalid timezone: Nowhere/City"
    reply = await client.call(
        "PUSH", queue="q", data={}, repeat={"every": 1000, "tz": "Nowhere/City"}
    )
    assert reply["error"] == "Invalid timezone: Nowhere/City"  # checked without a pattern too
    reply = await client.call(
        "PUSH", queue="q", data={}, repeat={"every": 1000, "endDate": 1000, "immediately": True}
    )
    assert reply["error"] == "repeat has no future occurrence"


async def test_a_tiny_positive_interval_neither_stops_the_broker_nor_spins(
    connect, autojump_clock
) -> None:
    # A worker parked on the queue when the delayed first occurrence came due: its claim made
    # the next occurrence, whose time overflowed and stopped the broker.
    worker, producer = await connect(), await connect()
    await worker.send({"cmd": "PULL", "queue": "q", "timeout": 3000, "reqId": "parked"})
    await push(producer, delay=50, repeat={"every": 5e-324, "limit": 3})
    first = (await worker.receive_for("parked"))["job"]
    assert first is not None
    await worker.call("ACK", id=first["id"])
    second = await pull_job(worker)
    assert second["runAt"] - first["runAt"] >= 1  # at most one occurrence a millisecond


async def test_the_next_occurrence_keeps_the_jobs_options_but_not_its_ids(
    client: FrameClient, autojump_clock
) -> None:
    options = {
        "priority": 5, "maxAttempts": 7, "backoff": 2500, "tags": ["nightly"], "ttl": 99_000,
        "timeout": 30_000, "groupId": "g", "removeOnComplete": True, "durable": True,
        "stallTimeout": 4000, "stackTraceLimit": 3, "keepLogs": 5, "lifo": True,
        "removeOnFail": True, "groupMaxSize": 9, "sizeLimit": 4096,
    }  # fmt: skip
    await push(client, name="report", data={"n": 1}, jobId="first", uniqueKey="u",
               repeat={"every": 1000}, **options)  # fmt: skip
    await trio.sleep(0.3)  # started late: the next occurrence still counts from the run time
    first = await pull_job(client)
    await client.call("ACK", id=first["id"])
    second = await pull_job(client)
    assert second["id"] != "first" and second["customId"] is None
    assert second["uniqueKey"] is None
    assert (second["name"], second["data"]) == ("report", {"n": 1})
    assert second["repeat"]["count"] == 1 and second["repeat"]["every"] == 1000
    assert second["repeat"]["prevMillis"] == first["runAt"]
    for key in ("priority", "maxAttempts", "backoff", "tags", "ttl", "timeout", "groupId",
                "removeOnComplete", "durable", "stallTimeout", "stackTraceLimit", "keepLogs",
                "lifo", "removeOnFail", "groupMaxSize", "sizeLimit"):  # fmt: skip
        assert (key, second[key]) == (key, first[key])
    assert (second["priority"], second["tags"]) == (5, ["nightly"])


async def test_the_next_occurrence_is_made_when_the_job_starts_and_says_so(
    client: FrameClient, autojump_clock
) -> None:
    await push(client, repeat={"every": 60_000})
    await trio.sleep(0.25)
    first = await pull_job(client)
    (next_one,) = (await client.call("GetJobs", queue="q", state="delayed"))["jobs"]
    made = first["startedAt"]
    assert (next_one["createdAt"], next_one["lastHeartbeat"]) == (made, made)
    assert next_one["runAt"] == first["runAt"] + 60_000


async def test_a_retried_occurrence_does_not_schedule_its_successor_twice(
    client: FrameClient, autojump_clock
) -> None:
    job_id = await push(client, repeat={"every": 60_000}, maxAttempts=2, backoff=100)
    first = await pull_job(client)
    await client.call("FAIL", id=first["id"], error="flaky")
    retried = await pull_job(client)  # the same occurrence, its second attempt
    assert (retried["id"], retried["attempts"]) == (job_id, 1)
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["active"], counts["delayed"]) == (1, 1)  # one successor, not one per start
    await client.call("ACK", id=job_id)
    assert (await pull_job(client))["repeat"]["count"] == 1
    assert (await client.call("PULL", queue="q", timeout=0))["job"] is None


async def test_a_schedule_that_ends_stops_cleanly(client: FrameClient, autojump_clock) -> None:
    # 2030 only: one more run, then croniter has no next date.
    once = "0 0 1 1 * 0 2030"
    assert (await client.call("Cron", name="once", queue="cq", data=1, schedule=once))["ok"]
    job = await client.call("PUSH", queue="rq", data=1, repeat={"pattern": once})
    assert (await client.call("PULL", queue="rq"))["job"] is None  # not before 2030
    await trio.sleep(4 * 365 * 86_400)
    assert (await client.call("CronGet", name="once"))["error"] == "Cron job not found"
    assert (await client.call("Count", queue="cq"))["count"] == 1
    assert (await client.call("PULL", queue="rq"))["job"]["id"] == job["id"]  # no next one
    assert (await client.call("Count", queue="rq"))["count"] == 0
    late = await client.call("PUSH", queue="rq", data=1, repeat={"pattern": once})
    assert late["error"] == "repeat has no future occurrence"


async def test_a_repeating_job_waits_for_its_start_date(client: FrameClient) -> None:
    later = await push(client, repeat={"every": 1000, "startDate": EPOCH_MS + 5000})
    assert await state_of(client, later) == "delayed"
    assert (await get_job(client, later))["runAt"] == EPOCH_MS + 5000
    # A delay past the end date: no occurrence of the rule is left, the delay stands.
    past_end = await push(client, delay=10_000, repeat={"every": 1000, "endDate": EPOCH_MS + 5000})
    job = await get_job(client, past_end)
    assert job["runAt"] == job["createdAt"] + 10_000
    only_starting = await push(client, repeat={"limit": 2, "startDate": EPOCH_MS + 5000})
    assert await state_of(client, only_starting) == "waiting"  # no rule: not a schedule
