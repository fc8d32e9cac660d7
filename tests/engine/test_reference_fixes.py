"""The reference's fixes since 2.9.5 (its changelog, 2.9.6-2.9.11), checked against trioq
(issue 34, item 4): WaitJob holds per connection, backoff.maxDelay on every push, a timeout of
0, orphaned active jobs, a closing connection's deliveries, waits past 24.8 days, protocol v3
job names. (An empty auth token: tests/test_config.py and tests/server/test_frontdoor.py.)"""

from __future__ import annotations

import trio
import trio.testing

from broker.engine.lifecycle import MAX_WAITS_PER_CONNECTION, TOO_MANY_WAITS
from broker.node.app import App
from tests.conftest import Connect
from tests.engine.test_push_pull import push
from tests.support.client import FrameClient

DAY_S = 86_400
JS_TIMER_LIMIT_S = 2**31 / 1000  # about 24.8 days: JavaScript timers overflow past it


async def state_of(client: FrameClient, job_id: str) -> str:
    return str((await client.call("GetState", id=job_id))["state"])


# -- WaitJob -------------------------------------------------------------------------------------


async def test_a_connection_holds_at_most_40_waitjobs(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    waiter, worker = await connect(), await connect()
    job_id = await push(worker)
    waits = [{"cmd": "WaitJob", "id": job_id, "timeout": 60_000, "reqId": f"w{n}"}
             for n in range(MAX_WAITS_PER_CONNECTION)]  # fmt: skip
    await waiter.send(*waits)
    assert (await waiter.call("WaitJob", id=job_id))["error"] == TOO_MANY_WAITS
    assert (await waiter.call("Ping"))["ok"] is True  # the connection still answers
    other = await connect()
    await other.send({"cmd": "WaitJob", "id": job_id, "timeout": 60_000, "reqId": "o"})
    await worker.call("PULL", queue="q")
    await worker.call("ACK", id=job_id, result=1)
    answers = [await waiter.receive_for(f"w{n}") for n in range(MAX_WAITS_PER_CONNECTION)]
    assert all(answer["completed"] is True for answer in answers)
    assert (await other.receive_for("o"))["completed"] is True
    later = await push(worker)  # the waits were answered: room again
    assert (await waiter.call("WaitJob", id=later, timeout=1000))["completed"] is False


async def test_waitjobs_that_time_out_give_their_room_back(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    job_id = await push(client)
    for _ in range(3):  # more than the cap in all, never more than it at once
        waits = [{"cmd": "WaitJob", "id": job_id, "timeout": 1000, "reqId": f"t{n}"}
                 for n in range(MAX_WAITS_PER_CONNECTION)]  # fmt: skip
        await client.send(*waits)
        for n in range(MAX_WAITS_PER_CONNECTION):
            assert (await client.receive_for(f"t{n}"))["completed"] is False


# -- backoff.maxDelay, a null backoff, a timeout of 0 ------------------------------------------


async def test_backoff_max_delay_is_checked_on_push_pushb_and_pushf(client: FrameClient) -> None:
    for bad, error in (
        (-1, "backoff.maxDelay must be at least 0"),
        (86_400_001, "backoff.maxDelay must be at most 86400000"),
        ("x", "backoff.maxDelay must be a number"),
        (float("nan"), "backoff.maxDelay must be a finite number"),
    ):
        backoff = {"type": "fixed", "delay": 5, "maxDelay": bad}
        assert (await client.call("PUSH", queue="q", data=1, backoff=backoff))["error"] == error
        batch = await client.call("PUSHB", queue="q", jobs=[{"data": 1, "backoff": backoff}])
        assert batch["error"] == f"jobs[0]: {error}"
        flow = [{"id": "f", "queue": "q", "input": {"name": "f", "data": 1, "backoff": backoff}}]
        assert (await client.call("PUSHF", jobs=flow))["error"] == f"jobs[0]: {error}"
    assert (await client.call("Count", queue="q"))["count"] == 0
    edge = {"type": "fixed", "delay": 5, "maxDelay": 86_400_000}
    assert (await client.call("PUSH", queue="q", data=1, backoff=edge))["ok"] is True


async def test_a_null_backoff_is_the_default_one(client: FrameClient) -> None:
    job_id = (await client.call("PUSH", queue="q", data=1, backoff=None))["id"]
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["backoff"], job["backoffConfig"]) == (1000, None)


async def test_a_timeout_of_0_is_no_timeout(
    client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    job_id = await push(client, timeout=0)
    await client.call("PULL", queue="q")
    await trio.sleep(DAY_S)
    assert await state_of(client, job_id) == "active"
    assert (await client.call("ACK", id=job_id))["ok"] is True


# -- orphaned active jobs, a closing connection's deliveries ------------------------------------


async def test_an_orphaned_active_job_is_recovered_through_the_stall_path(
    app: App, client: FrameClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert app.actor is not None
    stalls = app.actor.bus.subscribe(["job:stalled"])
    await client.call("SetStallConfig", queue="q", config={"stallInterval": 30_000})
    job_id = await push(client, maxAttempts=5, uniqueKey="once")
    await client.call("PULL", queue="q", detach=True)  # nobody will settle it: an orphan
    await trio.sleep(31)
    job = (await client.call("GetJob", id=job_id))["job"]
    assert (job["state"], job["attempts"], job["stallCount"]) == ("waiting", 1, 1)
    assert stalls.receive.receive_nowait()["data"] == {"queue": "q", "jobId": job_id,
                                                       "stallCount": 1}  # fmt: skip
    # what it held is free: its unique key is still its own (it is not finished)
    assert (await client.call("PUSH", queue="q", data=1, uniqueKey="once"))["id"] == job_id


async def test_a_closing_connection_releases_only_the_deliveries_it_owns(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    first, second = await connect(), await connect()
    await first.call("SetStallConfig", queue="q", config={"stallInterval": 5_000})
    job_id = await push(first, maxAttempts=5)
    await first.call("PULL", queue="q")  # first goes silent with it
    await trio.sleep(6)  # recovered as a stall
    assert (await second.call("PULL", queue="q"))["job"]["id"] == job_id
    await first.aclose()  # its old delivery is gone: the second one must stay
    await trio.sleep(1)
    assert await state_of(second, job_id) == "active"
    assert (await second.call("ACK", id=job_id))["ok"] is True


# -- waits longer than 24.8 days -----------------------------------------------------------------


async def test_waits_longer_than_24_8_days_last_their_whole_time(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    client, waiter = await connect(), await connect()
    thirty_days_ms = 30 * DAY_S * 1000
    delayed = await push(client, "d", delay=thirty_days_ms)
    expiring = await push(client, "t", ttl=thirty_days_ms)
    keyed = await push(client, "k", uniqueKey="u", dedup={"ttl": thirty_days_ms})
    leased = await push(client, "l", timeout=thirty_days_ms)
    token = (await client.call("PULL", queue="l", owner="w", lockTtl=thirty_days_ms))["token"]
    await waiter.send({"cmd": "WaitJob", "id": leased, "timeout": thirty_days_ms, "reqId": "w"})
    await trio.sleep(JS_TIMER_LIMIT_S + DAY_S)  # past where a JavaScript timer fires at once
    assert await state_of(client, delayed) == "delayed"
    assert await state_of(client, expiring) == "waiting"
    assert (await client.call("PUSH", queue="k", data=2, uniqueKey="u"))["id"] == keyed
    assert await state_of(client, leased) == "active"
    assert (await client.call("ACK", id=leased, token=token))["ok"] is True
    assert (await waiter.receive_for("w"))["completed"] is True
    await trio.sleep(6 * DAY_S)  # and then they end
    assert await state_of(client, delayed) == "waiting"
    assert await state_of(client, expiring) == "failed"


# -- protocol v3: the job name outside `data` ------------------------------------------------------


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
