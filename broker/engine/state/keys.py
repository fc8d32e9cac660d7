"""Keys that make a push return an existing job instead of adding one.

Rules (per queue):
- `uniqueKey` is taken from the push until the job completes, fails terminally or is
  removed, retries included. With `dedup.ttl` it is also given up once that many ms have
  passed; `dedup.extend` restarts that window on each duplicate push; `dedup.replace` swaps a
  duplicate for the new job while the old one has not started.
- `debounceId` is taken for `debounceTtl` ms from the push whatever becomes of the job (a
  throttle window); without a ttl, until the job starts or goes away.

An expired entry is dropped when it is looked up, or by its timer, whichever comes first.
KeyRegistry owns the holds: components and EngineState take, free and look keys up through
its methods (a job's own keys with `take_job_keys` and `free_job_keys`).
"""

from __future__ import annotations

import math

from broker.engine.state.model import Job
from broker.engine.state.timers import TimerWheel

UNIQUE = "unique"
DEBOUNCE = "debounce"

Key = tuple[str, str, str]  # (kind, queue, key)


class KeyRegistry:
    """Which job holds which key, and until when; a timed hold arms its expiry timer on
    `wheel` (without a wheel, a hold expires only when it is looked up)."""

    def __init__(self, wheel: TimerWheel | None = None, expiry_timer: str = "") -> None:
        self._held: dict[Key, tuple[str, float]] = {}
        self._wheel = wheel
        self._expiry_timer = expiry_timer  # the timer kind whose firing calls `expire`

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
        """`job_id` holds `key` until `expires_at` (or until freed); taken again, the hold's
        window restarts (dedup `extend`) and the earlier timer is stale."""
        self._held[key] = (job_id, expires_at)
        if expires_at != math.inf and self._wheel is not None:
            self._wheel.schedule(expires_at, self._expiry_timer, (key, job_id, expires_at))

    def take_job_keys(self, job: Job, since: float) -> None:
        """Take the unique and debounce keys of `job`, their windows from `since`."""
        opts = job.opts
        if opts.unique_key is not None:
            ttl = opts.dedup_ttl
            until = since + ttl if ttl else math.inf
            self.take((UNIQUE, job.queue, opts.unique_key), job.id, until)
        if opts.debounce_id is not None:
            ttl = opts.debounce_ttl
            until = since + ttl if ttl else math.inf
            self.take((DEBOUNCE, job.queue, opts.debounce_id), job.id, until)

    def free_job_keys(self, job: Job) -> None:
        """`job` completes, fails for good or goes: its unique key is given up, and its
        debounce key unless that is a timed window (which outlives the job)."""
        opts = job.opts
        if opts.unique_key is not None:
            self.free((UNIQUE, job.queue, opts.unique_key), job.id)
        if opts.debounce_id is not None:
            self.free((DEBOUNCE, job.queue, opts.debounce_id), job.id, only_untimed=True)

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
