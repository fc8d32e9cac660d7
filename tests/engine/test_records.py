"""Stored rows: the body a job is written as, field by field, whatever options it holds."""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Callable

import msgspec
import pytest

from broker.engine.core import Engine
from broker.engine.state import records
from broker.engine.state.model import OPTION_FIELDS, WAITING, Job
from broker.engine.state.records import PERSISTED, RowLoader, job_from_row, job_to_row
from protocol import decode_command
from store import JobRow
from tests.support.app import EPOCH_MS


def new_job(job_id: str) -> Job:
    return Job(id=job_id, queue="q", name="n", data=b"\x80", created_at=EPOCH_MS, run_at=EPOCH_MS)


def assert_body_lists_every_field(job: Job, to_row: Callable[[Job], JobRow] = job_to_row) -> None:
    row = to_row(job)
    columns = (row.id, row.queue, row.state, row.priority, row.run_at, row.created_at)
    assert columns == (job.id, job.queue, job.state, job.priority, job.run_at, job.created_at)
    assert row.attempts == job.attempts
    body = msgspec.msgpack.decode(row.body)
    assert body[:2] == [records.FORMAT, job.holder is not None]
    assert len(body) == 2 + len(PERSISTED)
    for index, name in enumerate(PERSISTED, 2):
        value = getattr(job, name)
        assert body[index] == (list(value) if isinstance(value, tuple) else value), name


def test_a_row_holds_every_field_in_order_with_default_and_own_options() -> None:
    plain, own = new_job("plain"), new_job("own")
    own.priority, own.custom_id, own.tags, own.durable = 7, "own", ("a",), True
    own.attempts, own.timeline = 2, ("waiting", EPOCH_MS, None)
    for job in (plain, own, plain, own):  # the second time from the encoded options
        assert_body_lists_every_field(job)


def test_a_changed_option_is_stored_not_the_block_encoded_before() -> None:
    job = new_job("j")
    job_to_row(job)
    job.priority = 9  # gives the job a changed copy of its options
    job.max_attempts = 5
    loaded, _ = job_from_row(job_to_row(job))
    assert (loaded.priority, loaded.max_attempts) == (9, 5)


def test_rows_of_a_fresh_writer_stay_right_past_the_options_cache_size() -> None:
    to_row = records._row_builder()  # compiled afresh, as a new broker process does
    jobs = [new_job(f"j{n}") for n in range(records.OPTIONS_CACHE_SIZE + 10)]
    for n, job in enumerate(jobs):
        job.custom_id = f"j{n}"  # options of its own, one cache entry each
        to_row(job)
    assert len(records._OPTIONS_ENCODED) <= records.OPTIONS_CACHE_SIZE
    for job in (jobs[0], jobs[-1]):
        loaded, _ = job_from_row(to_row(job))
        assert loaded.custom_id == job.custom_id
        assert_body_lists_every_field(job, to_row)


def test_the_row_writer_and_reader_compiled_afresh_store_and_load_every_field() -> None:
    # job_to_row and the reader are generated once, at import; compiling them again (as a new
    # broker process does) must give functions that keep the stored format, field by field.
    to_row, build = records._row_builder(), records._job_builder()
    plain, own = new_job("plain"), new_job("own")
    own.priority, own.custom_id, own.tags, own.depends_on = 7, "own", ("a", "b"), ("dep",)
    own.attempts, own.timeline, own.state = 3, ("waiting", EPOCH_MS, None), "active"
    own.holder, own.progress, own.stall_count = "conn-1", 40, 2  # rare fields set on this one
    for job in (plain, own, own):  # the second time from the encoded options
        assert_body_lists_every_field(job, to_row)
        body = msgspec.msgpack.decode(to_row(job).body)
        loaded = build(body)
        for name in PERSISTED:
            assert getattr(loaded, name) == getattr(job, name), name
        assert type(loaded.tags) is tuple and loaded.queue is records._shared("q")


def test_a_repeat_updated_in_place_is_stored_as_it_is_now() -> None:
    # A repeating job that starts marks its next occurrence made in its own `repeat` dict (the
    # Options object stays the same): the row must say so, or a restart would make it again.
    job = new_job("r")
    job.repeat = {"every": 1000, "count": 0}
    job_to_row(job)  # written when pushed
    job.opts.repeat["nextCreated"] = True  # as Pulls does when the job starts
    loaded, _ = job_from_row(job_to_row(job))
    assert loaded.repeat == {"every": 1000, "count": 0, "nextCreated": True}


OPTIONS = tuple(name for name, _ in OPTION_FIELDS)
OTHERS = tuple(name for name in PERSISTED if name not in OPTIONS)


def test_a_row_writer_for_another_layout_encodes_that_layout() -> None:
    # The smallest layout whose row still has a 3-byte array header: 16 items with the options
    # counted as one (the format, `held`, one field, the options, 12 fields).
    layout = (OTHERS[0], *OPTIONS, *OTHERS[1:13])
    job = new_job("j")
    job.priority, job.attempts = 3, 2
    body = msgspec.msgpack.decode(records._row_builder(layout)(job).body)
    values = [list(v) if isinstance(v, tuple) else v for v in map(job.__getattribute__, layout)]
    assert body == [records.FORMAT, False, *values]


@pytest.mark.parametrize(
    ("layout", "error"),
    [
        ((OTHERS[0], *OPTIONS, *OTHERS[1:12]), "the row's array header is no longer 3 bytes"),
        (
            (*OTHERS[:4], *OPTIONS[:5], OTHERS[4], *OPTIONS[5:], *OTHERS[5:]),
            "the options are no longer one block of PERSISTED",
        ),
    ],
)
def test_a_layout_the_row_writer_cannot_encode_is_refused_when_it_is_built(
    layout: tuple[str, ...], error: str
) -> None:
    with pytest.raises(RuntimeError, match=f"^{re.escape(error)}: see records.py$"):
        records._row_builder(layout)


def test_jobs_loaded_with_the_same_options_share_them_as_pushed_jobs_do() -> None:
    build = records._job_builder()
    one, other = new_job("one"), new_job("other")
    one.priority = other.priority = 4
    loaded = [build(msgspec.msgpack.decode(job_to_row(job).body)) for job in (one, other)]
    assert loaded[0].opts is loaded[1].opts
    assert loaded[0].priority == 4 and vars(loaded[0]) == {}


def test_a_row_of_an_unknown_format_is_refused_naming_the_job() -> None:
    body = msgspec.msgpack.decode(job_to_row(new_job("j")).body)
    row = JobRow("j", "q", "waiting", msgspec.msgpack.encode([records.FORMAT + 1, *body[1:]]))
    with pytest.raises(ValueError, match=f"^job j: unknown row format {records.FORMAT + 1}$"):
        job_from_row(row)


def test_a_failure_inside_the_compiled_row_code_names_which_function_it_was() -> None:
    compiled = [
        (records._row_builder(), "<trioq job row>"),
        (records._job_builder(), "<trioq job from row>"),
        (records._options_encoder(["priority"]), "<trioq options block>"),
    ]
    for function, filename in compiled:
        with pytest.raises((AttributeError, TypeError)) as failure:
            function(None)
        assert failure.traceback[-1].frame.code.raw.co_filename == filename


def test_a_layout_too_long_for_a_3_byte_array_header_is_refused() -> None:
    # An array of up to 65535 items has a 3-byte header: the row (the format, `held`, then
    # every field) may hold 65535 items, not one more. Made-up fields: nothing is loaded.
    made_up = (f"field{n}" for n in range(2**16 - 1 - 2 - 1 - len(OPTIONS)))
    longest = (OTHERS[0], *OPTIONS, *made_up)
    assert len(longest) + 2 == 2**16 - 1
    records._row_builder(longest)
    with pytest.raises(RuntimeError, match=r"^the row's array header is no longer 3 bytes"):
        records._row_builder((*longest, "one_more"))


def test_rows_read_back_share_their_options_as_pushed_jobs_do() -> None:
    one, other = new_job("one"), new_job("other")
    one.priority = other.priority = 4
    loaded = [job_from_row(job_to_row(job))[0] for job in (one, other)]
    assert loaded[0].opts is loaded[1].opts


def test_a_row_of_an_older_shorter_layout_loads_with_defaults_for_the_missing_fields() -> None:
    job = new_job("old")
    job.queue, job.name = "-".join(["old", "queue"]), "-".join(["old", "name"])  # not interned
    job.tags, job.depends_on, job.timeline = ("a",), ("dep",), ("waiting", EPOCH_MS, None)
    job.attempts, job.stall_count, job.holder = 2, 1, "conn-1"
    body = msgspec.msgpack.decode(job_to_row(job).body)
    missing = PERSISTED[-1]  # a field added after the row was written
    row = JobRow("old", "q", "waiting", msgspec.msgpack.encode(body[:-1]))
    loaded, held = job_from_row(row)
    assert held is True
    for name in PERSISTED[:-1]:
        assert getattr(loaded, name) == getattr(job, name), name
    assert getattr(loaded, missing) == getattr(new_job("fresh"), missing)
    assert [type(getattr(loaded, name)) for name in records.SEQUENCES] == [tuple] * 4
    # One string per queue and job name, shared with the live jobs of the same names.
    assert loaded.queue is records._shared("-".join(["old", "queue"]))
    assert loaded.name is records._shared("-".join(["old", "name"]))


# -- loading a large store: the memory of live jobs, and the rows of one PUSHB (issue 29) ------


def pushed_rows(count: int, batches: int = 1) -> list[JobRow]:
    """Rows of `count` jobs pushed live by PUSHB (`batches` of them, each its own time), as a
    broker stores them."""
    engine = Engine()
    state = engine.state
    state.changes.tracking = True
    per_batch = count // batches
    for batch in range(batches):
        now = EPOCH_MS + batch * 1000.5
        state.now = now
        jobs = [{"name": "welcome", "data": {"n": batch * per_batch + n}} for n in range(per_batch)]
        engine.execute(Sink(), decode_command(msgspec.msgpack.encode(
            {"cmd": "PUSHB", "queue": "emails", "jobs": jobs})), now)  # fmt: skip
    changed, _, _ = state.changes.take_changes()
    return sorted((job_to_row(job) for job in changed), key=lambda row: row.id)


class Sink:
    """A ReplySink that drops what it is given."""

    closed = False

    def stage_reply(self, reply: object, req_id: object) -> None:
        """Drop the reply."""

    def send_staged(self) -> None:
        """Nothing to send."""

    def take_staged(self) -> Callable[[], None]:
        """Nothing to release."""
        return lambda: None


def held_bytes(jobs: list[Job]) -> int:
    """Bytes the jobs hold, each object counted once however many jobs share it (the job, its
    strings, data, times, timeline and options)."""
    seen: dict[int, int] = {}
    for job in jobs:
        parts = [job, job.id, job.queue, job.name, job.data, job.created_at, job.run_at,
                 job.last_heartbeat, job.state, job.timeline, *job.timeline, job.opts]  # fmt: skip
        for part in parts:
            seen.setdefault(id(part), sys.getsizeof(part))
    return sum(seen.values())


def test_jobs_loaded_from_the_rows_of_pushes_hold_no_more_memory_than_pushed_ones() -> None:
    # Issue 29: a restart on a million jobs took half again the memory they took live (each
    # row decoded its own times, timeline and state; a PUSHB's jobs share theirs).
    rows = pushed_rows(2000, batches=4)
    live = [job_from_row(row)[0] for row in rows]  # for the shape only (ids, data...)
    for job in live:
        job.created_at = job.run_at = job.last_heartbeat = EPOCH_MS  # as a live push: one now
        job.timeline = live[0].timeline
    load = RowLoader().load
    loaded = [load(row.body)[0] for row in rows]
    assert held_bytes(loaded) <= held_bytes(live) * 1.02
    first, last = loaded[0], loaded[499]  # one PUSHB's first and last job
    assert first.timeline is last.timeline and first.opts is last.opts
    assert first.created_at is last.created_at is last.run_at is last.last_heartbeat
    assert first.state is WAITING and first.queue is records._shared("emails")


def test_every_row_loads_as_the_full_decoding_would_whatever_came_before_it() -> None:
    # The loader takes what follows a row's ids and times from the row before when its bytes
    # are the same: for any mix of rows it must give exactly the jobs of the full decoding.
    rng = random.Random(29)
    rows = pushed_rows(300, batches=3)
    variants = []
    for n, row in enumerate(rows):
        job = job_from_row(row)[0]
        kind = rng.randrange(9)
        if kind == 0:
            job.priority = 2  # options of another shared set
        elif kind == 1:
            job.logs = [{"message": "same", "level": "info", "timestamp": EPOCH_MS}]
        elif kind == 2:
            job.repeat = {"every": 1000, "count": 0}  # options of the job's own (a dict)
        elif kind == 3:
            job.created_at = int(EPOCH_MS)  # an int time: it must stay an int
        elif kind == 4:
            job.progress = 0.0  # the default's value, another type
        elif kind == 5:
            job.state, job.attempts, job.lock_token = "active", 1, f"token-{n}"
        elif kind == 6:
            job.holder = "connection"
        variants.append(job_to_row(job))
    load = RowLoader().load
    for row in [*rows, *variants, *variants[::-1], *rows]:
        expected, expected_held = job_from_row(row)
        loaded, held = load(row.body)
        assert held is expected_held
        for name in PERSISTED:
            value = getattr(loaded, name)
            assert value == getattr(expected, name), name
            assert type(value) is type(getattr(expected, name)), name
    one, other = load(variants[1].body), load(variants[1].body)  # no list or dict is shared
    for name in ("logs", "repeat"):
        if getattr(one[0], name) is not None:
            assert getattr(one[0], name) is not getattr(other[0], name)


def test_a_job_owning_a_list_never_lends_it_to_the_next_row() -> None:
    first, second = new_job("a"), new_job("b")
    for job in (first, second):
        job.logs = [{"message": "m", "level": "info", "timestamp": EPOCH_MS}]
        job.timeline = ("waiting", EPOCH_MS, None)
    load = RowLoader().load
    loaded = [load(job_to_row(job).body)[0] for job in (first, second, first)]
    assert loaded[0].logs == loaded[1].logs and loaded[0].logs is not loaded[1].logs
    assert loaded[1].logs is not loaded[2].logs
