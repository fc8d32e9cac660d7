"""The timer wheel: one deadline structure for delays, leases, retries and long-poll timeouts.

A heap of (deadline, sequence, kind, target, token) with lazy deletion, as Trio keeps its own
deadlines: cancelling is free (the owner changes its token), and a stale entry is skipped when it
reaches the top. The engine owns the wheel and the actor sleeps until `next_deadline()`, so no
second task and no cycle of blocking channels is needed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple


class Timer(NamedTuple):
    """One scheduled wake-up; `kind` says what to do and `token` says whether it still holds."""

    at_ms: float
    seq: int
    kind: str
    target: Any
    token: Any


_new_tuple = tuple.__new__
_make_timer = partial(_new_tuple, Timer)  # a Timer from its fields, with no Python frame
_repeat = itertools.repeat


class TimerWheel:
    """Deadlines in epoch milliseconds; pure (the caller passes `now_ms`)."""

    def __init__(self) -> None:
        # The actor reads the top of the heap on every pass (a method call costs more than the
        # check); only the wheel's methods change it.
        self.heap: list[Timer] = []
        self._seq = itertools.count()
        # Timers known to be stale (their job was removed): see housekeeping.py.
        self.stale = 0

    def __len__(self) -> int:
        return len(self.heap)

    def schedule(self, at_ms: float, kind: str, target: Any, token: Any = None) -> None:
        """Arrange for (kind, target, token) to come out of `pop_due` once `at_ms` has passed."""
        # `tuple.__new__` is the NamedTuple's constructor without its Python-level `__new__`
        # frame (a parked long poll schedules one timer per PULL).
        entry = _new_tuple(Timer, (at_ms, next(self._seq), kind, target, token))
        heapq.heappush(self.heap, entry)

    def schedule_many(
        self, at_ms: float, kind: str, targets: Sequence[Any], tokens: Sequence[Any]
    ) -> None:
        """`schedule(at_ms, kind, target, token)` for each pair of `targets` and `tokens`, in
        order (a PULLB's leases: one deadline for the batch), as one heap operation where the
        heap allows it."""
        count = len(targets)
        if not count:
            return
        # The timers are made in C (no Python frame per timer); `repeat(at_ms, count)` comes
        # first so that zip stops before drawing a sequence number it would not use.
        fields = zip(_repeat(at_ms, count), self._seq, _repeat(kind), targets, tokens, strict=False)
        entries = list(map(_make_timer, fields))
        heap = self.heap
        size = len(heap)
        # The batch is sorted (one deadline, rising sequence numbers), so appended at the end
        # it keeps the heap's order when no old entry that becomes the parent of one of its
        # timers comes later than its first: the usual case for leases of one length.
        parents = heap[(size - 1) // 2 : (size + count) // 2] if size else None
        if not parents or max(parents) <= entries[0]:
            heap.extend(entries)
        elif count > size:  # rebuilding costs less than sifting each one in
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            push = heapq.heappush
            for entry in entries:
                push(heap, entry)

    def drop_done(self, kind: str, over: str = "") -> None:
        """Pop the timers of `kind` at the top of the heap whose target is `done` (lazy
        deletion, done early for the top): a served long poll leaves its timer behind, and
        left there the actor would wake for it when it falls due. A timer of kind `over` at
        the top is looked under (taken off, then put back): one such timer, armed for a
        while, would otherwise keep every poll served meanwhile in the heap."""
        heap = self.heap
        held = heapq.heappop(heap) if over and heap and heap[0].kind == over else None
        while heap and heap[0].kind == kind and heap[0].target.done:
            heapq.heappop(heap)
        if held is not None:
            heapq.heappush(heap, held)

    def compact(self, is_current: Any) -> list[Timer]:
        """Keep only the timers `is_current(timer)` approves (lazy deletion's bulk prune);
        returns the old heap, for the caller to let go of when convenient."""
        old = self.heap
        self.heap = [timer for timer in old if is_current(timer)]
        heapq.heapify(self.heap)
        self.stale = 0
        return old

    def next_deadline(self) -> float:
        """The earliest deadline, or inf when nothing is scheduled."""
        return self.heap[0].at_ms if self.heap else math.inf

    def pop_due(self, now_ms: float) -> Iterator[Timer]:
        """Yield every timer whose deadline is at or before `now_ms`, earliest first."""
        heap = self.heap
        while heap and heap[0].at_ms <= now_ms:
            yield heapq.heappop(heap)
