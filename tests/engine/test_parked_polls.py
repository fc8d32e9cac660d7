"""Leased and parked polls (PULL and PULLB with a timeout): their exact replies, and parked polls
answered by a timeout, a push, an Obliterate or a closed connection (in-memory connections,
MockClock)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from broker.node.app import App
from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import push, state_of, without_req_id


async def test_a_leased_poll_that_times_out(client: FrameClient, autojump_clock) -> None:
    reply = await client.call("PULL", queue="q", owner="w", timeout=1000)
    assert without_req_id(reply) == {"ok": True, "job": None, "token": None}
    reply = await client.call("PULLB", queue="q", count=3, owner="w", timeout=1000)
    assert without_req_id(reply) == {"ok": True, "jobs": [], "tokens": []}
    reply = await client.call("PULLB", queue="q", count=3, timeout=1000)
    assert without_req_id(reply) == {"ok": True, "jobs": []}


async def test_a_parked_leased_pullb_gets_a_working_token(connect: Connect, autojump_clock) -> None:
    worker = await connect()
    producer = await connect()
    await worker.send(
        {"cmd": "PULLB", "queue": "q", "count": 2, "owner": "w", "timeout": 9000, "reqId": "p"}
    )
    await trio.sleep(1)
    job_id = await push(producer)
    reply = await worker.receive_for("p")
    assert [job["id"] for job in reply["jobs"]] == [job_id] and len(reply["tokens"]) == 1
    assert (await worker.call("ACK", id=job_id, token=reply["tokens"][0]))["ok"] is True


async def test_polls_behind_a_timed_out_one_are_still_served(
    connect: Connect, autojump_clock, caplog: pytest.LogCaptureFixture
) -> None:
    worker = await connect()
    producer = await connect()
    with caplog.at_level(logging.ERROR):
        await worker.send({"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "short"})
        await worker.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "long"})
        assert (await worker.receive_for("short"))["job"] is None
        await trio.sleep(5)
        job_id = await push(producer)
        assert (await worker.receive_for("long"))["job"]["id"] == job_id
    assert errors_logged(caplog) == []


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def next_req_id(client: FrameClient) -> object:
    """The reqId of the next reply this connection gets, after a Ping to be sure of one."""
    await client.send({"cmd": "Ping", "reqId": "ping"})
    return (await client.receive())["reqId"]


async def test_obliterate_answers_the_parked_polls(connect: Connect, autojump_clock) -> None:
    worker = await connect()
    admin = await connect()
    await worker.send(
        {"cmd": "PULLB", "queue": "q", "count": 2, "owner": "w", "timeout": 60_000, "reqId": "p"}
    )
    await trio.sleep(1)
    assert (await admin.call("Obliterate", queue="q"))["ok"] is True
    reply = await worker.receive_for("p")
    assert without_req_id(reply) == {"ok": True, "jobs": [], "tokens": []}


async def test_obliterate_answers_a_parked_poll_at_once_and_only_once(
    connect: Connect, autojump_clock
) -> None:
    worker = await connect()
    admin = await connect()
    await worker.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "p"})
    await trio.sleep(1)
    asked = trio.current_time()
    assert (await admin.call("Obliterate", queue="q"))["ok"] is True
    assert (await worker.receive_for("p"))["job"] is None
    assert trio.current_time() == asked  # answered by the Obliterate, not by its timeout
    await trio.sleep(120)  # past the poll's timeout: its timer must not answer it again
    assert await next_req_id(worker) == "ping"


async def test_parked_polls_answered_by_their_timeout_are_passed_over(
    connect: Connect, autojump_clock, caplog: pytest.LogCaptureFixture
) -> None:
    worker, producer = await connect(), await connect()
    await worker.send(
        {"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "a"},
        {"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "b"},
        {"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "c"},
    )
    assert (await worker.receive_for("b"))["job"] is None  # still parked behind "a"
    with caplog.at_level(logging.ERROR):
        pushed = trio.current_time()
        reply = await producer.call("PUSHB", queue="q", jobs=[{"data": n} for n in range(3)])
        ids = reply["ids"]
        assert (await worker.receive_for("a"))["job"]["id"] == ids[0]
        assert (await worker.receive_for("c"))["job"]["id"] == ids[1]
        assert trio.current_time() == pushed
        await trio.sleep(120)  # past every poll's timeout: none is answered twice
        assert await next_req_id(worker) == "ping"
    assert await state_of(producer, ids[2]) == "waiting"
    assert errors_logged(caplog) == []


async def test_a_job_a_parked_poll_took_returns_when_its_connection_closes(
    connect: Connect, autojump_clock
) -> None:
    worker, producer = await connect(), await connect()
    await worker.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "p"})
    await trio.sleep(1)
    job_id = await push(producer)
    assert (await worker.receive_for("p"))["job"]["id"] == job_id
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert await state_of(producer, job_id) == "waiting"  # no lease: it was the connection's


async def test_a_poll_parked_behind_a_full_group_keeps_its_place(
    client: FrameClient, autojump_clock
) -> None:
    one_at_a_time = {"concurrency": 1}
    first = await push(client, groupId="g")
    await client.call("PULL", queue="q", group=one_at_a_time)
    await client.send(
        {"cmd": "PULL", "queue": "q", "timeout": 30_000, "group": one_at_a_time, "reqId": "p"}
    )
    second = await push(client, groupId="g")  # ready, but its group is at its limit
    acked = trio.current_time()
    await client.call("ACK", id=first)
    assert (await client.receive_for("p"))["job"]["id"] == second
    assert trio.current_time() == acked


async def test_a_queue_keeps_no_poll_it_has_answered(
    app: App, connect: Connect, autojump_clock
) -> None:
    # Polled forever, an idle queue must not hold every poll it ever answered.
    worker, producer = await connect(), await connect()
    await worker.send(
        {"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "long"},
        {"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "short"},
    )
    assert (await worker.receive_for("short"))["job"] is None  # answered, behind "long"
    job_id = await push(producer)
    assert (await worker.receive_for("long"))["job"]["id"] == job_id
    assert app.actor is not None
    assert list(app.actor.engine.state.queues["q"].waiters) == []


async def test_a_served_poll_leaves_no_timer_to_wake_the_broker(
    connect: Connect, app, autojump_clock
) -> None:
    # Under a steady stream of long polls each served one's timer would come due and wake
    # the actor for nothing; the poll still parked keeps its timer and times out on it.
    first, second, producer = await connect(), await connect(), await connect()
    await first.send({"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": "a"})
    await trio.sleep(1)
    await second.send({"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": "b"})
    await trio.sleep(1)
    job_id = await push(producer)
    assert (await first.receive_for("a"))["job"]["id"] == job_id
    wheel = app.actor.engine.state.wheel
    assert [timer.target.req_id for timer in wheel.heap] == ["b"]
    assert (await second.receive_for("b"))["job"] is None
    assert len(wheel) == 0


async def test_serving_a_poll_leaves_an_earlier_job_timer_alone(
    connect: Connect, autojump_clock, caplog
) -> None:
    # The delayed job's promotion is the wheel's first timer when the poll is served: it is no
    # poll's, so it stays (and nothing fails on the way).
    worker, producer = await connect(), await connect()
    delayed = await push(producer, delay=3000)
    await worker.send({"cmd": "PULL", "queue": "q", "timeout": 9000, "reqId": "a"})
    await trio.sleep(1)
    now_id = await push(producer)
    assert (await worker.receive_for("a"))["job"]["id"] == now_id
    reply = await worker.call("PULL", queue="q", timeout=9000)
    assert reply["job"]["id"] == delayed
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


async def test_obliterate_does_not_answer_a_poll_its_timeout_answered_again(
    connect: Connect, autojump_clock
) -> None:
    worker, admin = await connect(), await connect()
    await worker.send(
        {"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "a"},
        {"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "b"},
    )
    assert (await worker.receive_for("b"))["job"] is None  # answered, still parked behind "a"
    assert (await admin.call("Obliterate", queue="q"))["ok"] is True
    assert (await worker.receive_for("a"))["job"] is None
    assert await next_req_id(worker) == "ping"  # no second reply to "b"


@pytest.mark.parametrize(
    ("setup", "options"),
    [
        (("SetConcurrency", {"limit": 5}), {}),  # a limited queue: claimed one by one
        (None, {"groupId": "g"}),  # a grouped job
        (None, {"timeout": 60_000}),  # a job with a processing timeout
    ],
    ids=["limited-queue", "grouped", "processing-timeout"],
)
async def test_every_job_a_connection_pulled_returns_when_it_closes(
    connect: Connect, setup: tuple[str, dict] | None, options: dict
) -> None:
    worker, producer = await connect(), await connect()
    if setup is not None:
        await producer.call(setup[0], queue="q", **setup[1])
    ids = [await push(producer, **options) for _ in range(2)]
    pulled = [(await worker.call("PULL", queue="q"))["job"]["id"] for _ in ids]
    assert pulled == ids
    other = await push(producer, "other")
    await producer.call("PULL", queue="other")  # held by the connection that stays
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert [await state_of(producer, job_id) for job_id in ids] == ["waiting", "waiting"]
    assert await state_of(producer, other) == "active"
