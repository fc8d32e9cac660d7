"""Crons: named schedules that push jobs, persisted across restarts."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import trio
import trio.testing

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from tests.support.app import Broker, memory_connector
from tests.support.client import FrameClient
from tests.support.stores import StoreFactory


async def count(client: FrameClient, queue: str = "cq") -> int:
    counts = (await client.call("GetJobCounts", queue=queue))["counts"]
    return sum(v for k, v in counts.items() if k != "paused")


async def test_cron_pushes_on_its_interval_until_max_limit(
    client: FrameClient, autojump_clock
) -> None:
    reply = await client.call(
        "Cron", name="tick", queue="cq", data={"n": 1}, repeatEvery=1000, maxLimit=2,
        preventOverlap=False,
    )  # fmt: skip
    assert reply["cron"]["nextRun"] - (await client.call("Ping"))["data"]["time"] == 1000
    await trio.sleep(1.001)
    job = (await client.call("PULL", queue="cq"))["job"]
    assert (job["name"], job["data"]) == ("tick", {"n": 1})
    await trio.sleep(5)
    assert await count(client) == 2
    assert (await client.call("CronGet", name="tick"))["error"] == "Cron job not found"


async def test_prevent_overlap_skips_while_the_last_run_is_queued(
    client: FrameClient, autojump_clock
) -> None:
    await client.call("Cron", name="c", queue="cq", data=1, repeatEvery=1000)
    await trio.sleep(3.5)
    assert await count(client) == 1
    got = await client.call("CronGet", name="c")
    assert got["cron"]["executions"] == 1
    job = (await client.call("PULL", queue="cq"))["job"]
    await client.call("ACK", id=job["id"])
    await trio.sleep(1)
    assert (await client.call("CronGet", name="c"))["cron"]["executions"] == 2


async def test_an_upsert_retires_the_queued_run_of_the_old_definition(
    client: FrameClient, autojump_clock
) -> None:
    await client.call("Cron", name="c", queue="cq", data="old", repeatEvery=1000)
    await trio.sleep(1.5)
    stale = (await client.call("GetJobs", queue="cq"))["jobs"][0]["id"]
    await client.call("Cron", name="c", queue="cq", data="new", repeatEvery=1000)
    assert (await client.call("GetState", id=stale))["state"] == "unknown"
    await trio.sleep(1)
    job = (await client.call("PULL", queue="cq"))["job"]
    assert job["data"] == "new"  # the new definition's first run was not blocked

    await client.call("Cron", name="c", queue="cq", data="newer", repeatEvery=1000)
    assert (await client.call("GetState", id=job["id"]))["state"] == "active"  # runs on
    assert (await client.call("ACK", id=job["id"]))["ok"] is True


async def test_cron_commands(client: FrameClient) -> None:
    bad = await client.call("Cron", name="x", queue="cq", data=1)
    assert bad["error"] == "Cron job must have either schedule or repeatEvery"
    bad = await client.call("Cron", name="x", queue="cq", data=1, schedule="whenever")
    assert bad["error"] == "Invalid cron expression: whenever"
    ok = await client.call("Cron", name="a", queue="cq", data=1, schedule="0 * * * *")
    assert ok["cron"]["schedule"] == "0 * * * *"
    await client.call("Cron", name="b", queue="cq", data=1, repeatEvery=60_000)
    names = [cron["name"] for cron in (await client.call("CronList"))["crons"]]
    assert names == ["a", "b"]
    assert (await client.call("CronDelete", name="a"))["ok"] is True
    assert (await client.call("CronDelete", name="a"))["error"] == "Cron job not found"


async def test_crons_survive_a_restart_and_skip_missed_runs(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call("Cron", name="c", queue="cq", data=1, repeatEvery=10_000)
    await trio.sleep(35)  # three runs missed while down
    async with broker.running() as connect:
        client = await connect()
        cron = (await client.call("CronGet", name="c"))["cron"]
        now = (await client.call("Ping"))["data"]["time"]
        assert 0 < cron["nextRun"] - now <= 10_000
        assert await count(client) == 0
        await trio.sleep(10)
        assert await count(client) == 1


async def run_cron_across(epoch_ms: float, hours: int, nursery) -> list[float]:
    """Run a daily 02:30 Berlin cron from `epoch_ms` for `hours` (MockClock); its jobs' times."""
    app = App(Config(port=0, http_port=0, memory=True), clock=Clock(epoch_ms))
    await nursery.start(app.run)
    client = await memory_connector(app, nursery)()
    await client.call(
        "Cron", name="nightly", queue="dst", data=1, schedule="30 2 * * *",
        timezone="Europe/Berlin", preventOverlap=False,
    )  # fmt: skip
    await trio.sleep(hours * 3600)
    jobs = (await client.call("PULLB", queue="dst", count=100))["jobs"]
    app.shutdown()
    return [job["createdAt"] for job in jobs]


def berlin(epoch_ms: float) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, ZoneInfo("Europe/Berlin")).isoformat()


async def test_autumn_change_fires_a_daily_cron_once(nursery, autojump_clock) -> None:
    start = datetime(2026, 10, 24, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp() * 1000
    fired = await run_cron_across(start, 48, nursery)
    assert [berlin(t) for t in fired] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


async def test_spring_change_still_fires_a_daily_cron(nursery, autojump_clock) -> None:
    start = datetime(2026, 3, 28, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp() * 1000
    fired = await run_cron_across(start, 48, nursery)
    assert [berlin(t) for t in fired] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


async def test_a_bad_timezone_is_refused_for_both_kinds_of_cron(client: FrameClient) -> None:
    for timing in ({"schedule": "0 * * * *"}, {"repeatEvery": 1000}):
        bad = await client.call(
            "Cron", name="x", queue="cq", data=1, timezone="Mars/Base", **timing
        )
        assert bad["error"] == "Invalid timezone: Mars/Base"
    assert (await client.call("CronList"))["crons"] == []


async def test_a_schedule_with_no_future_run_is_refused(client: FrameClient) -> None:
    past = await client.call("Cron", name="x", queue="cq", data=1, schedule="0 0 1 1 * 0 2020")
    assert past["error"] == "Cron schedule has no future run"
    assert (await client.call("CronGet", name="x"))["error"] == "Cron job not found"


async def test_immediately_fires_a_new_cron_at_once_but_not_a_replaced_one(
    client: FrameClient, autojump_clock
) -> None:
    now = (await client.call("Ping"))["data"]["time"]
    new = await client.call(
        "Cron", name="c", queue="cq", data=1, repeatEvery=60_000, immediately=True,
        preventOverlap=False,
    )  # fmt: skip
    assert new["cron"]["nextRun"] == now
    await trio.sleep(0.001)
    assert await count(client) == 1
    again = await client.call(
        "Cron", name="c", queue="cq", data=1, repeatEvery=60_000, immediately=True,
        preventOverlap=False,
    )  # fmt: skip
    assert again["cron"]["nextRun"] == now + 1 + 60_000
    await trio.sleep(1)
    assert await count(client) == 1


async def test_executions_and_the_limit_carry_over_an_upsert(
    client: FrameClient, autojump_clock
) -> None:
    spec = {"name": "c", "queue": "cq", "data": 1, "repeatEvery": 1000, "maxLimit": 3,
            "preventOverlap": False}  # fmt: skip
    await client.call("Cron", **spec)
    await trio.sleep(2.5)
    await client.call("Cron", **spec)
    got = await client.call("CronGet", name="c")
    assert got["ok"] is True
    assert (got["cron"]["executions"], got["cron"]["maxLimit"]) == (2, 3)
    await trio.sleep(10)
    assert await count(client) == 3  # one more run, not three
    listed = await client.call("CronList")
    assert (listed["ok"], listed["crons"]) == (True, [])


async def test_a_cron_with_its_own_unique_key_does_not_overlap(
    client: FrameClient, autojump_clock
) -> None:
    await client.call(
        "Cron", name="c", queue="cq", data=1, repeatEvery=1000, uniqueKey="nightly",
        preventOverlap=False,
    )  # fmt: skip
    await trio.sleep(3.5)
    assert await count(client) == 1
    job = (await client.call("GetJobs", queue="cq"))["jobs"][0]
    assert job["lastHeartbeat"] == job["createdAt"]  # as for a pushed job
    dup = await client.call("PUSH", queue="cq", data=2, uniqueKey="nightly")
    assert dup["id"] == job["id"]


async def test_crons_deleted_or_ended_stay_gone_after_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)  # starts at 08:00 UTC
    hour = 3_600_000
    async with broker.running() as connect:
        client = await connect()
        await client.call("Pause", queue="other")  # a stored record of another kind first
        await client.call(
            "Cron", name="done-while-down", queue="dq", data=1, schedule="0 12 15 1 * 0 2027"
        )  # fmt: skip
        await client.call("Cron", name="kept", queue="cq", data=1, repeatEvery=24 * hour)
        await client.call("Cron", name="deleted", queue="cq", data=1, repeatEvery=hour)
        await client.call("CronDelete", name="deleted")
        await client.call(
            "Cron", name="limited", queue="lq", data=1, repeatEvery=hour, maxLimit=1,
            preventOverlap=False,
        )  # fmt: skip
        await client.call(
            "Cron", name="ending", queue="eq", data=1, schedule="0 9 15 1 * 0 2027",
            skipMissedOnRestart=False, preventOverlap=False,
        )  # fmt: skip
        await trio.sleep(2.5 * 3600)  # `limited` and `ending` have run their course
        assert [await count(client, q) for q in ("lq", "eq")] == [1, 1]
    await trio.sleep(2 * 3600)  # `done-while-down` missed its only run
    async with broker.running() as connect:
        client = await connect()
        await trio.sleep(1)
        assert [cron["name"] for cron in (await client.call("CronList"))["crons"]] == ["kept"]
        assert [await count(client, q) for q in ("lq", "eq", "dq")] == [1, 1, 0]
    store = store_factory()
    try:
        assert [r.key for r in store.load_records() if r.kind == "cron"] == ["kept"]
    finally:
        store.close()


async def test_without_skip_missed_a_missed_run_fires_once_at_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        await client.call(
            "Cron", name="c", queue="cq", data=1, repeatEvery=10_000, skipMissedOnRestart=False,
            preventOverlap=False,
        )  # fmt: skip
    await trio.sleep(35)  # three runs missed while down
    async with broker.running() as connect:
        client = await connect()
        await trio.sleep(0.001)
        assert await count(client) == 1
        cron = (await client.call("CronGet", name="c"))["cron"]
        now = (await client.call("Ping"))["data"]["time"]
        assert 0 < cron["nextRun"] - now <= 10_000


async def test_a_run_due_just_as_the_broker_restarts_is_not_skipped(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        reply = await client.call("Cron", name="c", queue="cq", data=1, repeatEvery=10_000)
    await trio.sleep((reply["cron"]["nextRun"] - broker.clock.now_ms()) / 1000)
    async with broker.running() as connect:
        client = await connect()
        await trio.sleep(0.001)
        assert await count(client) == 1  # it ran at restart, not 10 s later


async def test_a_deleted_cron_stays_deleted_after_a_restart(
    store_factory: StoreFactory, autojump_clock
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        for name in ("kept", "dropped"):
            await client.call("Cron", name=name, queue="cq", data=1, repeatEvery=10_000)
    async with broker.running() as connect:
        assert (await (await connect()).call("CronDelete", name="dropped"))["ok"] is True
    async with broker.running() as connect:
        crons = (await (await connect()).call("CronList"))["crons"]
        assert [cron["name"] for cron in crons] == ["kept"]


async def test_a_v3_cron_names_its_jobs_with_job_name_outside_data(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    hello = await client.call("Hello", protocolVersion=3, capabilities=["separate-job-name"])
    assert "separate-job-name" in hello["capabilities"]
    data = {"to": "ada", "name": "kept"}  # a v3 client's data is left as it is
    reply = await client.call(
        "Cron", name="nightly", jobName="report", queue="c", data=data, repeatEvery=60_000,
        immediately=True,
    )  # fmt: skip
    assert reply["cron"]["jobName"] == "report"
    job = (await client.call("PULL", queue="c"))["job"]
    assert (job["name"], job["data"]) == ("report", data)
    assert (await client.call("CronGet", name="nightly"))["cron"]["jobName"] == "report"


async def test_an_older_clients_cron_name_in_data_is_moved_out_as_push_does(
    client: FrameClient,
) -> None:
    legacy = {"name": "legacy", "v": 1}
    cron = {"queue": "c", "data": legacy, "repeatEvery": 60_000, "immediately": True}
    await client.call("Cron", name="old", **cron)
    job = (await client.call("PULL", queue="c"))["job"]
    assert (job["name"], job["data"]) == ("legacy", {"v": 1})
    await client.call("Cron", name="plain", queue="p", data=1, repeatEvery=60_000, immediately=True)
    assert (await client.call("PULL", queue="p"))["job"]["name"] == "plain"  # the cron's name
    bad = await client.call("Cron", name="bad", jobName=5, queue="c", data=1, repeatEvery=1000)
    assert bad["error"] == "Job name must be a non-empty string of at most 256 characters"
