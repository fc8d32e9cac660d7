"""One queue's structures directly: the rate limit's token times, the lane surviving the
prefix cache's reset, and compaction dropping closed connections' parked polls."""

from __future__ import annotations

import attrs
import pytest

from broker.engine.state import queues
from broker.engine.state.model import DEFAULT_OPTIONS, Job, Options
from broker.engine.state.queues import QueueState, Waiter


def job(job_id: str, opts: Options = DEFAULT_OPTIONS, run_at: float = 0.0) -> Job:
    """A waiting job of queue `q`."""
    made = Job(job_id, "q", "default", b"", run_at, run_at, run_at, opts)
    made.state = "waiting"
    return made


def test_a_rate_limited_queue_names_when_its_next_start_is_allowed() -> None:
    state = QueueState("q", rate_limit=2)  # two starts a second: one token per 500 ms
    assert state.take_token(0.0) == 500.0  # an empty bucket: the first token comes in 500 ms
    # Half a token has accrued by 250 ms: the rest comes at 500 ms, not a whole token later.
    assert state.take_token(250.0) == 500.0
    assert state.take_token(500.0) is None  # a whole token by now: the start is allowed
    assert state.take_token(500.0) == 1000.0


def test_a_queue_without_a_rate_limit_never_waits_for_a_token() -> None:
    state = QueueState("q")
    assert [state.take_token(0.0) for _ in range(5)] == [None] * 5


def test_default_jobs_keep_the_fast_lane_after_the_prefix_cache_resets() -> None:
    state = QueueState("q")
    # Jobs with many priorities fill the shared-prefix cache past its size, so it resets.
    for seq in range(queues.MAX_PREFIXES + 5):
        state.push_ready(job(f"p{seq}", Options(priority=seq + 1)), seq)
    assert len(queues._prefixes) < queues.MAX_PREFIXES
    first = job("default-1")
    state.push_ready(first, queues.MAX_PREFIXES + 10)
    # A default job goes to the lane (no heap push), whatever the cache forgot.
    assert [entry[queues.JOB] for entry in state.lane] == [first]


@attrs.define
class Connection:
    """What a parked poll knows of its connection: whether it closed."""

    closed: bool = False


def test_compaction_drops_polls_of_closed_connections_and_answered_polls() -> None:
    state = QueueState("q")
    open_poll = Waiter(Connection(), 1, None, 1, False)
    closed_poll = Waiter(Connection(closed=True), 2, None, 1, False)
    answered_poll = Waiter(Connection(), 3, None, 1, False, done=True)
    state.waiters.extend([open_poll, closed_poll, answered_poll])
    state.compact()
    assert list(state.waiters) == [open_poll]


def test_a_job_built_from_stored_fields_keeps_each_one_and_refuses_unknown_ones() -> None:
    # A stored row gives every field by name: one at its default must not stop the rest, and
    # a value of another type than the default (progress 0.0, not 0) is kept as given.
    made = Job("j", "q", "default", b"", 0.0, 0.0, 0.0, DEFAULT_OPTIONS,
               attempts=0, stall_count=2, progress=0.0, failed_reason="boom")  # fmt: skip
    assert (made.stall_count, made.failed_reason) == (2, "boom")
    assert type(made.progress) is float
    assert "attempts" not in made.__dict__  # at its default: no room taken in the instance
    with pytest.raises(TypeError, match="Job has no field 'colour'"):
        Job("j", "q", "default", b"", 0.0, 0.0, 0.0, DEFAULT_OPTIONS, colour="red")


def test_a_queue_counts_the_entries_of_its_heap_and_its_lane() -> None:
    # The count bounds compaction: stale entries are dropped once they are over half of it.
    state = QueueState("q")
    state.push_ready(job("lane-1"), 1)
    state.push_ready(job("lane-2"), 2)
    state.push_ready(job("urgent", Options(priority=5)), 3)
    assert (len(state.lane), len(state.ready), state.entries()) == (2, 1, 3)
