"""Bookkeeping shared by every TCP connection that keeps hostile clients bounded.

`PartialFrameBudget` caps the bytes held for unfinished frames across all connections, so many
clients that each announce a large frame and never finish it cannot exhaust memory together.
`AuthThrottle` remembers recent failed `Auth` attempts per peer address (a bounded table, oldest
forgotten first) and tells a connection how long to wait before checking that peer's next token.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

PARTIAL_FRAME_BUDGET = 256 * 1024 * 1024
AUTH_FREE_FAILURES = 3  # failures from one peer before its attempts are slowed
AUTH_FIRST_DELAY_S = 0.25
AUTH_MAX_DELAY_S = 8.0
AUTH_FORGET_AFTER_S = 60.0
AUTH_MAX_PEERS = 4096


class PartialFrameBudget:
    """The bytes of unfinished frames held by all connections, against one limit."""

    def __init__(self, limit: int = PARTIAL_FRAME_BUDGET) -> None:
        self.limit = limit
        self.total = 0
        self._held: dict[Any, int] = {}

    def hold(self, owner: Any, size: int) -> bool:
        """Record that `owner` now holds `size` bytes; False if that breaks the budget (the
        owner should then drop its bytes and call `hold(owner, 0)`)."""
        before = self._held.get(owner, 0)
        if size == before:
            return True
        self.total += size - before
        if size:
            self._held[owner] = size
        else:
            self._held.pop(owner, None)
        return size == 0 or self.total <= self.limit


class AuthThrottle:
    """Recent failed Auth attempts per peer, and the pause they earn the next attempt."""

    def __init__(self, max_peers: int = AUTH_MAX_PEERS) -> None:
        self.max_peers = max_peers
        self._failures: OrderedDict[Any, tuple[int, float]] = OrderedDict()

    def delay(self, peer: Any, now: float) -> float:
        """Seconds to wait before checking `peer`'s token: 0 for the first few failures, then
        doubling up to AUTH_MAX_DELAY_S; failures older than a minute are forgotten."""
        count = self._recent(peer, now)
        if count < AUTH_FREE_FAILURES:
            return 0.0
        return min(AUTH_FIRST_DELAY_S * 2 ** (count - AUTH_FREE_FAILURES), AUTH_MAX_DELAY_S)

    def failed(self, peer: Any, now: float) -> None:
        """Count a failed attempt from `peer`."""
        self._failures[peer] = (self._recent(peer, now) + 1, now)
        self._failures.move_to_end(peer)
        while len(self._failures) > self.max_peers:
            self._failures.popitem(last=False)

    def succeeded(self, peer: Any) -> None:
        """`peer` presented a good token: forget its failures."""
        self._failures.pop(peer, None)

    def __len__(self) -> int:
        return len(self._failures)

    def _recent(self, peer: Any, now: float) -> int:
        count, last = self._failures.get(peer, (0, now))
        return count if now - last <= AUTH_FORGET_AFTER_S else 0
