"""A bug in a timer rule costs that timer, not the broker: the failure is logged, the other
timers of the tick still fire, and the broker goes on answering."""

from __future__ import annotations

import logging

import pytest
import trio

from broker.engine import deadlines
from broker.engine.pulls import Pulls
from tests.engine.test_push_pull import push
from tests.support.client import FrameClient


def broken(*args: object) -> None:
    raise RuntimeError("a bug in a timer rule")


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
    assert any("timer failed" in r.getMessage() for r in caplog.records)
