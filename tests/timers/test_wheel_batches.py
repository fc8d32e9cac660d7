"""TimerWheel.schedule_many: a batch of timers comes out of `pop_due` exactly as the same
timers scheduled one at a time would, whatever the heap held before."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.state.timers import TimerWheel


def fired(wheel: TimerWheel) -> list[tuple[float, str, Any, Any]]:
    """Every timer of the wheel, in the order `pop_due` gives them out."""
    return [(t.at_ms, t.kind, t.target, t.token) for t in wheel.pop_due(float("inf"))]


def filled(deadlines: list[float]) -> tuple[TimerWheel, TimerWheel]:
    """Two wheels holding the same timers, one at each of `deadlines`."""
    wheels = TimerWheel(), TimerWheel()
    for wheel in wheels:
        for index, at_ms in enumerate(deadlines):
            wheel.schedule(at_ms, "old", f"old-{index}", index)
    return wheels


# What the heap holds before the batch comes: nothing; only earlier deadlines (the batch
# goes at the end as it is); later ones too (each timer sifted in); few, all later (rebuilt).
BEFORE = {
    "empty": [],
    "earlier": [float(at) for at in range(100, 131)],
    "mixed": [float(at) for at in (900, 50, 700, 300, 1200, 20, 650, 5000, 1000, 10, 999, 80)],
    "few later": [2000.0, 3000.0],
}


@pytest.mark.parametrize("before", BEFORE.values(), ids=list(BEFORE))
def test_a_batch_fires_as_the_same_timers_one_at_a_time(before: list[float]) -> None:
    batched, single = filled(before)
    targets = [f"job-{index}" for index in range(9)]
    tokens = [f"token-{index}" for index in range(9)]
    batched.schedule_many(1000.0, "lease", targets, tokens)
    for target, token in zip(targets, tokens, strict=True):
        single.schedule(1000.0, "lease", target, token)
    expected = fired(single)
    assert fired(batched) == expected
    assert [entry[2] for entry in expected if entry[1] == "lease"] == targets  # in batch order


def test_a_batch_is_due_at_its_deadline_and_not_before() -> None:
    wheel = TimerWheel()
    wheel.schedule(5000.0, "other", "later")
    wheel.schedule_many(1000.0, "lease", ["a", "b"], ["ta", "tb"])
    assert wheel.next_deadline() == 1000.0
    assert list(wheel.pop_due(999.0)) == []
    assert [(t.target, t.token) for t in wheel.pop_due(1000.0)] == [("a", "ta"), ("b", "tb")]
    assert wheel.next_deadline() == 5000.0


def test_an_empty_batch_schedules_nothing_and_later_timers_keep_their_order() -> None:
    wheel = TimerWheel()
    wheel.schedule_many(1000.0, "lease", [], [])
    assert len(wheel) == 0
    wheel.schedule(7.0, "x", "first")
    wheel.schedule(7.0, "x", "second")
    assert [t.target for t in wheel.pop_due(7.0)] == ["first", "second"]
