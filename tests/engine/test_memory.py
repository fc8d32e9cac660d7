"""Memory per waiting job (issue 14): what a million queued jobs cost the broker.

Measured with tracemalloc over an engine's own allocations (exact and repeatable, unlike RSS),
for jobs of about 90 bytes of data pushed as benchmarks/memory.py pushes them. The bound sits
between the layout of one slotted class of ~70 fields (about 1,050 bytes a job: 1,057 MiB per
million in RSS) and the split layout of model.py (about 500).
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import msgspec

from broker.engine.core import Engine
from broker.engine.state import model, queues
from protocol import decode_command

JOBS = 3000
BOUND = 600  # bytes a waiting job may take, everything the engine keeps for it included
PAYLOAD = {"kind": "benchmark", "body": "x" * 64}
EPOCH_MS = 1_700_000_000_000.0


class Sink:
    """Replies are not looked at."""

    closed = False
    full = False  # never holds its commands back (ReplySink.full)

    def stage_reply(self, reply: Any, req_id: Any) -> None:
        pass

    def send_staged(self) -> None:
        pass


def pushes(jobs: int, **fields: Any) -> list[bytes]:
    """PUSHB frames of 500 jobs each."""
    item = {"name": "bench", "data": PAYLOAD, **fields}
    body = {"cmd": "PUSHB", "queue": "waiting", "jobs": [item] * 500}
    return [msgspec.msgpack.encode(body) for _ in range(jobs // 500)]


def bytes_per_job(frames: list[bytes]) -> float:
    """What the engine holds per job after the frames were executed (one per pass)."""
    engine = Engine()
    sink = Sink()
    commands = [decode_command(frame) for frame in frames]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, command in enumerate(commands):
            engine.tick(EPOCH_MS + n)
            engine.execute(sink, command, EPOCH_MS + n)
        del commands  # the decoded commands were the client's, not the broker's
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(engine.state.jobs) == JOBS
    return held / JOBS


def test_a_waiting_job_with_default_options_takes_under_600_bytes() -> None:
    assert bytes_per_job(pushes(JOBS)) < BOUND


def test_jobs_pushed_with_the_same_options_share_them() -> None:
    options = {"priority": 5, "attempts": 5, "backoff": 2000, "removeOnComplete": True}
    assert bytes_per_job(pushes(JOBS, **options)) < BOUND


def test_the_caches_of_shared_names_and_options_stay_bounded() -> None:
    # Each job of a client that names every job differently and gives each a priority of its
    # own adds an entry to the caches that share names, option sets and heap keys: they must
    # forget, not grow with the jobs, and ordering must not suffer from it.
    jobs = max(model.MAX_INTERNED, model.MAX_SHARED, queues.MAX_PREFIXES) + 10
    engine, sink = Engine(), Sink()
    largest = [0, 0, 0]
    for i in range(jobs):
        push = {"cmd": "PUSH", "queue": "q", "name": f"n{i}", "data": 1, "priority": i}
        engine.execute(sink, decode_command(msgspec.msgpack.encode(push)), EPOCH_MS)
        sizes = (len(queues._prefixes), len(model._interned_options), len(model._names))
        largest = [max(pair) for pair in zip(largest, sizes, strict=True)]
    assert largest == [queues.MAX_PREFIXES, model.MAX_INTERNED, model.MAX_SHARED]
    pulled = Replies()
    engine.execute(pulled, decode_command(msgspec.msgpack.encode(
        {"cmd": "PULLB", "queue": "q", "count": 3})), EPOCH_MS)  # fmt: skip
    names = [job["name"] for job in pulled.jobs()]
    assert names == [f"n{jobs - 1}", f"n{jobs - 2}", f"n{jobs - 3}"]  # highest priority first


class Replies(Sink):
    """Keeps the replies."""

    def __init__(self) -> None:
        self.replies: list[Any] = []

    def stage_reply(self, reply: Any, req_id: Any) -> None:
        self.replies.append(reply)

    def jobs(self) -> list[dict[str, Any]]:
        """The jobs of the first reply (a PULLB's), as a client reads them off the wire."""
        return msgspec.msgpack.decode(msgspec.msgpack.encode(self.replies[0]))["jobs"]


def test_jobs_with_the_same_priority_share_one_heap_key_from_the_first() -> None:
    # The first job of a new priority meets an empty cache (as after a reset): it must get a
    # heap key like any other, and the jobs after it must share that one key object.
    queues._prefixes.clear()
    queues._prefixes[queues.FIFO] = queues.FIFO
    engine, sink = Engine(), Sink()
    for priority in (7, 0, 7, -2):
        push = {"cmd": "PUSH", "queue": "q", "data": 1, "priority": priority}
        engine.execute(sink, decode_command(msgspec.msgpack.encode(push)), EPOCH_MS)
    queue = engine.state.queues["q"]
    entries = [*queue.ready, *queue.lane]
    keys = {entry[queues.JOB].priority: [] for entry in entries}
    for entry in entries:
        keys[entry[queues.JOB].priority].append(entry[0])
    assert keys[7][0] is keys[7][1] and keys[0] == [queues.FIFO]
    pulled = Replies()
    engine.execute(pulled, decode_command(msgspec.msgpack.encode(
        {"cmd": "PULLB", "queue": "q", "count": 4})), EPOCH_MS)  # fmt: skip
    assert [job["priority"] for job in pulled.jobs()] == [7, 7, 0, -2]


def test_an_option_property_made_afresh_reads_the_options_and_writes_a_changed_copy() -> None:
    # The properties are installed on Job at import; making one again (as a new broker
    # process does) must give the same reading and copy-on-write behaviour.
    priority = model._option_property("priority")
    one, other = (model.Job(i, "q", "n", b"\x01", EPOCH_MS, EPOCH_MS) for i in ("a", "b"))
    assert priority.__get__(one) == 0 and one.opts is other.opts
    priority.__set__(one, 4)
    assert (priority.__get__(one), priority.__get__(other)) == (4, 0)
    assert one.opts.max_attempts == other.opts.max_attempts == 3  # the rest of the set is kept
    assert other.opts is model.DEFAULT_OPTIONS
    assert priority.__doc__ == "The job's `priority` option (see Options)."


def test_rare_fields_given_at_their_default_take_no_room_in_the_job() -> None:
    # A stored row names every field: loading a job that never ran must not give it the
    # per-instance dict that only jobs with a rare field of their own pay for.
    fields = {"attempts": 0, "progress": 0, "logs": None, "late_open": False, "lock_ttl": 0}
    fresh = model.Job("a", "q", "n", b"\x01", EPOCH_MS, EPOCH_MS, **fields)
    assert vars(fresh) == {}
    ran = model.Job("b", "q", "n", b"\x01", EPOCH_MS, EPOCH_MS, **{**fields, "attempts": 2})
    assert vars(ran) == {"attempts": 2}


def test_a_job_shows_its_id_queue_name_and_state_and_not_its_data() -> None:
    job = model.Job("b", "q", "n", b"\x01", EPOCH_MS, EPOCH_MS)
    assert repr(job) == "Job(id='b', queue='q', name='n', state='waiting')"


def test_jobs_that_start_their_timelines_alike_share_the_first_entry() -> None:
    # A timeline entry is three values; jobs pushed in the same millisecond into the same
    # state hold one tuple between them, and a job pushed later or elsewhere gets its own.
    engine, sink = Engine(), Sink()

    def push_at(now: float, **fields: object) -> str:
        before = set(engine.state.jobs)
        message = {"cmd": "PUSH", "queue": "q", "data": 1, **fields}
        engine.tick(now)  # a pass starts with a tick, which sets the engine's time
        engine.execute(sink, decode_command(msgspec.msgpack.encode(message)), now)
        [job_id] = set(engine.state.jobs) - before
        return job_id

    first, second = push_at(EPOCH_MS), push_at(EPOCH_MS)
    later, delayed = push_at(EPOCH_MS + 1), push_at(EPOCH_MS + 1, delay=1000)
    jobs = engine.state.jobs
    assert jobs[first].timeline is jobs[second].timeline
    assert jobs[later].timeline == ("waiting", EPOCH_MS + 1, None)
    assert jobs[later].timeline is not jobs[first].timeline
    assert jobs[delayed].timeline == ("delayed", EPOCH_MS + 1, None)


def test_no_events_are_collected_before_anyone_listens() -> None:
    # An engine starts with nobody subscribed: a pass's events would only pile up.
    engine, sink = Engine(), Sink()
    push = {"cmd": "PUSH", "queue": "q", "data": 1}
    engine.execute(sink, decode_command(msgspec.msgpack.encode(push)), EPOCH_MS)
    assert engine.state.observers.events == []


def test_a_name_decoded_again_is_the_first_copy() -> None:
    first = "".join(["a-name-only-this-test-uses-", "1"])  # built: not an interned constant
    again = "".join(["a-name-only-this-test-uses-", "1"])
    assert first is not again
    assert model.shared(first) is first
    assert model.shared(again) is first
