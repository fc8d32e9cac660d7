"""A bug in a timer rule costs that timer, not the broker: the failure is logged, the other
timers of the tick still fire, and the broker goes on answering."""

from __future__ import annotations

import logging

import pytest
import trio

from broker.engine.components.jobs import JobCommands
from broker.engine.components.lifecycle import Lifecycle
from broker.engine.components.pulls import Pulls
from broker.engine.rules import deadlines
from tests.support.client import FrameClient
from tests.support.engine import push


def broken(*args: object) -> None:
    raise RuntimeError("a bug in a timer rule")


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The error messages logged, each with its traceback."""
    return [r.getMessage() for r in caplog.records if r.exc_info is not None]


async def test_a_failing_timer_rule_is_logged_and_the_rest_still_fire(
    client: FrameClient, autojump_clock, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setattr(deadlines, "time_out", broken)
    first = await push(client, timeout=100)
    await push(client, delay=150)  # its promotion fires after the broken timeout timer
    pulled = (await client.call("PULL", queue="q", timeout=0))["job"]
    assert pulled["id"] == first
    with caplog.at_level(logging.ERROR):
        await trio.sleep(0.3)
        delayed = (await client.call("PULL", queue="q", timeout=0))["job"]
    assert delayed is not None  # the delayed job was promoted: the tick went on
    assert (await client.call("Ping"))["ok"] is True
    # The operator learns which kind of timer failed.
    assert "a timeout timer failed; dropped" in [r.getMessage() for r in caplog.records]


async def test_a_failing_engine_timer_is_logged_and_the_broker_goes_on(
    client: FrameClient, autojump_clock, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setattr(Pulls, "poll_timed_out", broken)
    with caplog.at_level(logging.ERROR):
        await client.send({"cmd": "PULL", "queue": "q", "timeout": 100, "reqId": "parked"})
        await trio.sleep(0.3)  # the poll's timeout timer fires and fails
    assert (await client.call("Ping"))["ok"] is True
    job_id = await push(client)
    # The poll whose timeout failed is still parked, and the next job is its answer.
    assert (await client.receive_for("parked"))["job"]["id"] == job_id
    assert "a poll timer failed; dropped" in logged(caplog)


async def test_a_failing_command_answers_an_internal_error_and_is_logged(
    client: FrameClient, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setattr(JobCommands, "counts_of", broken)
    with caplog.at_level(logging.ERROR):
        reply = await client.call("GetJobCounts", queue="q")
    assert (reply["ok"], reply["error"]) == (False, "Internal server error")
    assert logged(caplog) == ["command GetJobCounts failed"]
    assert (await client.call("Count", queue="q"))["count"] == 0  # the broker goes on


async def test_failing_to_serve_a_queues_polls_is_logged_with_its_name(
    connect, autojump_clock, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    worker, producer = await connect(), await connect()
    await worker.send({"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "parked"})
    await trio.sleep(0.1)
    monkeypatch.setattr(Pulls, "serve_waiters", broken)
    with caplog.at_level(logging.ERROR):
        job_id = await push(producer)
        assert (await worker.receive_for("parked"))["job"] is None  # its timeout still answers
    assert logged(caplog) == ["serving the long polls of queue q failed"]
    assert (await worker.call("PULL", queue="q", timeout=0))["job"]["id"] == job_id


async def test_failing_to_answer_wait_job_is_logged_and_the_broker_goes_on(
    client: FrameClient, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setattr(Lifecycle, "answer_job_waiters", broken)
    job_id = await push(client)
    await client.call("PULL", queue="q", timeout=0)
    # Someone waits on the job: with nobody waiting the answers are never tried.
    await client.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    with caplog.at_level(logging.ERROR):
        assert (await client.call("ACK", id=job_id))["ok"] is True
    assert logged(caplog) == ["answering WaitJob failed"]
    assert (await client.call("GetState", id=job_id))["state"] == "completed"
