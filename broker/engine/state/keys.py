"""Keys that make a push return an existing job instead of adding one.

Rules (per queue):
- `uniqueKey` is taken from the push until the job completes, fails terminally or is
  removed, retries included. With `dedup.ttl` it is also given up once that many ms have
  passed; `dedup.extend` restarts that window on each duplicate push; `dedup.replace` swaps a
  duplicate for the new job while the old one has not started.
- `debounceId` is taken for `debounceTtl` ms from the push whatever becomes of the job (a
  throttle window); without a ttl, until the job starts or goes away.

An expired entry is dropped when it is looked up, or by its timer, whichever comes first.
"""

from __future__ import annotations

import math

UNIQUE = "unique"
DEBOUNCE = "debounce"

Key = tuple[str, str, str]  # (kind, queue, key)


class KeyRegistry:
    """Which job holds which key, and until when."""

    def __init__(self) -> None:
        self._held: dict[Key, tuple[str, float]] = {}

    def owner(self, key: Key, now: float) -> str | None:
        """The id of the job holding `key`, if the key is held and not expired."""
        entry = self._held.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._held[key]
            return None
        return entry[0]

    def take(self, key: Key, job_id: str, expires_at: float = math.inf) -> None:
        """`job_id` holds `key` until `expires_at` (or until freed)."""
        self._held[key] = (job_id, expires_at)

    def free(self, key: Key, job_id: str, *, only_untimed: bool = False) -> None:
        """Give `key` up if `job_id` holds it (with `only_untimed`, only a hold without ttl)."""
        entry = self._held.get(key)
        if entry is not None and entry[0] == job_id and (not only_untimed or entry[1] == math.inf):
            del self._held[key]

    def expire(self, key: Key, job_id: str, expires_at: float) -> None:
        """A hold's timer fired: drop it if it is still that hold."""
        if self._held.get(key) == (job_id, expires_at):
            del self._held[key]

    def __len__(self) -> int:
        return len(self._held)
