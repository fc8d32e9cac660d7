"""The real-time limit every Trio test runs under (tests/conftest.py applies it)."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import pytest
import trio
import trio.testing

TRIO_TEST_TIMEOUT_S = 60.0
"""Real seconds a Trio test may run. pytest-timeout's limit (pyproject.toml) is the backstop for
everything else: its signal method breaks a Trio run, so it ends the whole run instead."""

MUTANT_TEST_TIMEOUT_S = 30.0
"""The limit while mutmut tests a mutant (`make mutation`): a mutant that leaves a test waiting
for ever (a poll never answered) is killed in 30 s, not 60. The slowest test but the model test
takes about 5 s there; the model test (tests/model) keeps the full limit."""


def real_time_limit_s(item: pytest.Item) -> float:
    """TRIO_TEST_TIMEOUT_S, or MUTANT_TEST_TIMEOUT_S while mutmut runs a mutant's tests (it
    names the mutant in MUTANT_UNDER_TEST; its clean and statistics runs keep the full limit)."""
    testing_a_mutant = "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")
    if testing_a_mutant and not item.nodeid.startswith("tests/model/"):
        return MUTANT_TEST_TIMEOUT_S
    return TRIO_TEST_TIMEOUT_S


def with_real_time_limit(test: Any, limit_s: float) -> Any:
    """The async test `test`, failed (its fixtures torn down as usual) after `limit_s` seconds
    of wall-clock time. The wait runs in a thread, so MockClock tests are timed in real time."""

    @functools.wraps(test)
    async def limited(*args: Any, **kwargs: Any) -> None:
        finished = threading.Event()

        async def watchdog() -> None:
            wait = functools.partial(finished.wait, limit_s)
            if not await trio.to_thread.run_sync(wait, abandon_on_cancel=True):
                pytest.fail(f"{test.__name__} still running after {limit_s:.0f} s (real time)")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog)
            try:
                await test(*args, **kwargs)
            finally:
                finished.set()
                nursery.cancel_scope.cancel()

    return limited
