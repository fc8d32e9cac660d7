"""Wall-clock milliseconds derived from Trio's clock.

Job timestamps are epoch milliseconds, but tests control time through Trio's MockClock. The
clock pairs one epoch reading with one Trio-clock reading at start and derives `now_ms` from the
Trio clock afterwards, so delays, leases and long polls all follow MockClock in tests.
"""

from __future__ import annotations

import math
import time

import trio


class Clock:
    """Maps between epoch milliseconds and Trio's clock (must be created inside trio.run)."""

    def __init__(self, epoch_ms: float | None = None) -> None:
        # The run's clock itself: read on every pass, and `trio.current_time()` reaches it
        # through two more Python calls.
        self._trio_clock = trio.lowlevel.current_clock()
        self._trio_start = self._trio_clock.current_time()
        self._epoch_start = time.time() * 1000 if epoch_ms is None else epoch_ms

    def now_ms(self) -> float:
        """The current epoch time in milliseconds (fractional)."""
        return self._epoch_start + (self._trio_clock.current_time() - self._trio_start) * 1000

    def trio_time(self, epoch_ms: float) -> float:
        """The Trio clock reading at which `epoch_ms` arrives (inf stays inf)."""
        if math.isinf(epoch_ms):
            return epoch_ms
        return self._trio_start + (epoch_ms - self._epoch_start) / 1000
