"""`repeat.pattern` through the engine across daylight-saving changes: a wall-clock time that
happens twice runs once, one that never happens runs at the first moment after it, and zones
whose offset or shift is 30 minutes (Lord Howe Island: +10:30, +11 in summer) work the same."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import trio

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from tests.support.app import memory_connector

DAY_MS = 24 * 3600 * 1000
POLL_MS = 60_000


async def repeat_across(
    nursery: trio.Nursery, zone: str, start: datetime, pattern: str, days: int
) -> list[str]:
    """Push a repeating job at `start` (MockClock), work every occurrence for `days`, and
    return when each ran, as local ISO times."""
    epoch_ms = start.replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000
    app = App(Config(port=0, http_port=0, memory=True), clock=Clock(epoch_ms))
    await nursery.start(app.run)
    client = await memory_connector(app, nursery)()
    pushed = await client.call("PUSH", queue="q", data={}, repeat={"pattern": pattern, "tz": zone})
    assert pushed["ok"] is True, pushed
    ran = []
    end = epoch_ms + days * DAY_MS
    while app.actor is not None and app.actor.clock.now_ms() < end:
        reply = await client.call("PULL", queue="q", timeout=POLL_MS)
        job = reply["job"]
        if job is None:
            continue
        if job["runAt"] >= end:
            break
        ran.append(datetime.fromtimestamp(job["runAt"] / 1000, ZoneInfo(zone)).isoformat())
        assert (await client.call("ACK", id=job["id"]))["ok"] is True
    app.shutdown()
    return ran


@pytest.mark.parametrize(
    ("zone", "start", "pattern", "expected"),
    [
        pytest.param(
            "Europe/Berlin", datetime(2026, 10, 24, 12), "30 2 * * *",
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
            id="berlin-autumn-repeated-hour-runs-once",
        ),
        pytest.param(
            "Europe/Berlin", datetime(2026, 3, 28, 12), "30 2 * * *",
            ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
            id="berlin-spring-missing-hour-runs-after-it",
        ),
        pytest.param(
            "Australia/Lord_Howe", datetime(2026, 4, 4, 12), "45 1 * * *",
            ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
            id="lord-howe-autumn-repeated-half-hour-runs-once",
        ),
        pytest.param(
            "Australia/Lord_Howe", datetime(2026, 10, 3, 12), "15 2 * * *",
            ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
            id="lord-howe-spring-missing-half-hour-runs-after-it",
        ),
    ],
)  # fmt: skip
async def test_repeat_pattern_across_a_dst_change(
    nursery: trio.Nursery,
    autojump_clock,
    zone: str,
    start: datetime,
    pattern: str,
    expected: list[str],
) -> None:
    assert await repeat_across(nursery, zone, start, pattern, days=2) == expected
