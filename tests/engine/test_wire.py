"""The job as replies show it: every wire key carries the right field of the job model."""

from __future__ import annotations

import itertools

import msgspec

from broker.engine.state import wireform
from broker.engine.state.model import FIELD_NAMES, TIMELINE_ENTRY, Job
from broker.engine.state.wireform import wire_job, wire_jobs
from tests.support.jobs import REFERENCE_JOB_KEYS

WIRE_TO_MODEL = {
    "id": "id", "queue": "queue", "name": "name", "createdAt": "created_at",
    "runAt": "run_at", "startedAt": "started_at", "completedAt": "completed_at",
    "attempts": "attempts", "backoff": "backoff", "backoffConfig": "backoff_config",
    "dependsOn": "depends_on", "childrenIds": "children_ids", "tags": "tags",
    "progress": "progress", "progressMessage": "progress_message", "stacktrace": "stacktrace",
    "repeat": "repeat", "durable": "durable", "lastHeartbeat": "last_heartbeat",
    "stallCount": "stall_count", "priority": "priority", "lifo": "lifo",
    "maxAttempts": "max_attempts", "removeOnComplete": "remove_on_complete",
    "removeOnFail": "remove_on_fail", "ttl": "ttl", "timeout": "timeout",
    "uniqueKey": "unique_key", "customId": "custom_id", "parentId": "parent_id",
    "groupId": "group_id", "groupMaxSize": "group_max_size", "stallTimeout": "stall_timeout",
    "stackTraceLimit": "stack_trace_limit", "keepLogs": "keep_logs", "sizeLimit": "size_limit",
    "failParentOnFailure": "fail_parent_on_failure",
    "removeDependencyOnFailure": "remove_dependency_on_failure",
    "continueParentOnFailure": "continue_parent_on_failure",
    "ignoreDependencyOnFailure": "ignore_dependency_on_failure",
    "deduplicationTtl": "dedup_ttl", "deduplicationExtend": "dedup_extend",
    "deduplicationReplace": "dedup_replace", "debounceId": "debounce_id",
    "debounceTtl": "debounce_ttl", "state": "state", "failedReason": "failed_reason",
}  # fmt: skip


def job_with_distinct_values() -> Job:
    """A job whose every field holds a value no other field holds."""
    numbers = itertools.count(1)
    values = {}
    for name in FIELD_NAMES:
        if name in ("data", "result"):
            values[name] = msgspec.msgpack.encode(name)
        elif name == "timeline":
            values[name] = ("waiting", 1.0, None, "failed", 2.0, "boom")
        else:
            values[name] = f"{name}-{next(numbers)}"
    return Job(**values)


def test_every_wire_key_shows_its_own_field_in_the_reference_order() -> None:
    job = job_with_distinct_values()
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(job.to_wire_with_state()))
    for key, field in WIRE_TO_MODEL.items():
        assert wire[key] == getattr(job, field), key
    assert (wire["data"], wire["returnvalue"]) == ("data", "result")
    assert wire["childrenCompleted"] == 0
    assert wire["timeline"] == [
        {"state": "waiting", "timestamp": 1.0},
        {"state": "failed", "timestamp": 2.0, "error": "boom"},
    ]
    assert [key for key in wire if key in REFERENCE_JOB_KEYS] == REFERENCE_JOB_KEYS
    assert set(wire) == {*WIRE_TO_MODEL, *REFERENCE_JOB_KEYS, "returnvalue"}


def jobs_of_every_shape() -> list[Job]:
    """Jobs whose wire forms differ in every way a pulled job's can: distinct values, options
    holding dicts, an error in the timeline (in either of two entries), a pulled job's usual
    two entries, a timeline longer than a fixmap's 15 entries."""
    data = msgspec.msgpack.encode({"body": "x" * 80})
    long_timeline = tuple(value for at in range(20) for value in ("waiting", at, None))
    return [
        job_with_distinct_values(),
        Job("a", "q", "n", data, 1.5, 2, 3.25),
        Job("b", "q", "n", data, 1, 2, 3, attempts=2, started_at=5.5, stacktrace=["at x"],
            priority=3, repeat={"every": 5}, backoff_config={"type": "fixed"},
            timeline=("waiting", 1, None, "active", 2.5, None, "failed", 3, "boom")),
        Job("c", "q", "n", data, 1, 2, 3, timeline=long_timeline, tags=["t"], custom_id="c"),
        Job("d", "q", "n", data, 1, 2, 3, timeline=("prioritized", 1, None, "active", 2, None)),
        Job("e", "q", "n", data, 1, 2, 3, timeline=("failed", 1, "boom", "waiting", 2, None)),
        Job("f", "q", "n", data, 1, 2, 3, timeline=long_timeline[: 16 * TIMELINE_ENTRY]),
        # States no pre-encoded entry holds (a record stored by another version of the broker).
        Job("g", "q", "n", data, 1, 2, 3, timeline=("stalled", 1, None, "paused", 2, "why")),
    ]  # fmt: skip


def test_a_pulled_jobs_bytes_are_those_of_its_wire_struct() -> None:
    encode = msgspec.msgpack.encode
    jobs = jobs_of_every_shape()
    for job in jobs:
        for _ in range(2):  # the second time from the pieces kept on its Options
            assert encode(wire_job(job)) == encode(job.to_wire()), job
    for count in (0, 1, 4, 16):
        shown = (jobs * 4)[:count]
        assert encode(wire_jobs(shown)) == encode([job.to_wire() for job in shown])


def job_with_entries(job_id: str, entries: int) -> Job:
    timeline = tuple(value for at in range(entries) for value in ("waiting", at, None))
    return Job(job_id, "q", "n", b"\xc0", 1, 2, 3, timeline=timeline)


def test_a_long_pulled_list_has_the_bytes_of_its_wire_structs() -> None:
    # A PULLB reply is spliced from a list of pieces (30 a job, 2 a timeline entry, plus one
    # header) encoded at once and cut of its own header: 65535 pieces is the last count
    # MessagePack heads in 3 bytes, past it in 5 (1000 jobs with full timelines reach that).
    encode = msgspec.msgpack.encode
    at_the_edge = [job_with_entries(str(n), 1) for n in range(2047)] + [job_with_entries("x", 0)]
    past_it = [job_with_entries(str(n), 20) for n in range(1000)]
    for jobs in (at_the_edge, past_it):
        assert encode(wire_jobs(jobs)) == encode([job.to_wire() for job in jobs])


def test_options_the_engine_changes_in_place_are_encoded_as_they_are_now() -> None:
    job = jobs_of_every_shape()[2]
    wire_job(job)
    job.repeat["nextCreated"] = True  # as a repeating job's first start does (pulls.py)
    assert msgspec.msgpack.decode(wire_job(job))["repeat"] == {"every": 5, "nextCreated": True}


def test_the_pre_encoded_headers_are_messagepack_s_own() -> None:
    # The pieces a pulled job is spliced from are made once, at import; made again they must
    # still be the headers msgspec writes for maps, arrays and timeline entries of every size.
    from broker.engine.state import wireform

    encode = msgspec.msgpack.encode
    for size in (0, 1, 15, 16, 48, 0xFFFF):
        pairs = {f"k{n}": None for n in range(size)}
        first_key = encode("k0") if size else b""
        assert encode(pairs).startswith(wireform._map_header(size) + first_key)
    for size in (0, 1, 15, 16, 0xFFFF, 0x10000):
        values = [None] * size
        assert encode(values) == wireform._array_header(size) + b"\xc0" * size
    for state, error in itertools.product(("waiting", "failed"), (None, "boom")):
        entry = {"state": state, "timestamp": 5, **({"error": error} if error else {})}
        head = bytes(wireform._entry_head(state, error is not None))
        assert encode(entry).startswith(head) and encode(entry)[len(head)] == 5
    job_map = encode({"id": "x", **{f"k{n}": 0 for n in range(47)}})
    assert job_map.startswith(bytes(wireform._HEAD)) and len(wireform._HEAD) == 6


def test_a_list_is_encoded_without_its_header_at_every_header_size() -> None:
    # A MessagePack array header is 1, 3 or 5 bytes (up to 15, up to 65535, more items): the
    # one cut off must be the one written, at each edge.
    for size in (1, 15, 16, 0xFFFF, 0x10000):
        assert bytes(wireform._encoded([1] * size)) == b"\x01" * size, size
