"""The domain model: a job and its states, with the conversion to the wire shape.

Field names are Python's; `to_wire` produces the reference server's job object (its keys and
their order), so clients written against bunqueue read our jobs unchanged.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Any

import attrs
import msgspec

from protocol.wire import WireJob, WireJobWithState

from .sink import ReplySink

# Internal states. WAITING and PRIORITIZED are both "ready"; which one a ready job reports is
# decided by its priority when it becomes ready.
WAITING = "waiting"
PRIORITIZED = "prioritized"
DELAYED = "delayed"
ACTIVE = "active"
COMPLETED = "completed"
FAILED = "failed"
WAITING_CHILDREN = "waiting-children"
UNKNOWN = "unknown"

READY_STATES = frozenset({WAITING, PRIORITIZED})
QUEUED_STATES = frozenset({WAITING, PRIORITIZED, DELAYED})
COUNTED_STATES = (WAITING, PRIORITIZED, DELAYED, ACTIVE, COMPLETED, FAILED, WAITING_CHILDREN)
MAX_TIMELINE = 20  # entries a job's timeline keeps (the reference's cap)
TIMELINE_ENTRY = 3  # values per entry in Job.timeline: state, epoch ms, error (or None)

_last_uuid_ms = 0
_uuid_counter = 0
# Ids need uniqueness, not secrecy from the id's holder: a generator seeded once from the OS is
# enough, and saves a system call per id. (Lease tokens use the same ids: a token is only
# useful to whoever already holds the job's id and a connection to the broker.)
_random = random.Random(os.urandom(32))


_uuid_prefix = ""
_HEX3 = [f"{i:03x}" for i in range(4096)]


def uuid7s(count: int) -> list[str]:
    """`count` UUIDv7 strings: 48-bit ms, version 7, a 12-bit counter (so ids made in one ms
    still sort), variant 0b10, then random bits.

    Made in bulk because a PUSHB needs many: the text up to the version digit changes once a
    millisecond, the counter digits come from a table, and the random part of every id is cut
    from one hex string.
    """
    global _uuid_counter
    ids: list[str] = []
    while len(ids) < count:
        prefix = _uuid_time_prefix()
        counter = _uuid_counter
        take = min(count - len(ids), 0x1000 - counter)
        rand = f"{_random.getrandbits(60 * take):0{15 * take}x}"
        ids += [
            f"{prefix}{_HEX3[counter + i]}-8{rand[j : j + 3]}-{rand[j + 3 : j + 15]}"
            for i, j in zip(range(take), range(0, 15 * take, 15), strict=True)
        ]
        _uuid_counter = counter + take
    return ids


def _uuid_time_prefix() -> str:
    """The id text up to the counter; moves to the next millisecond when the clock does, or
    early when this millisecond's 4096 counter values are used up (ids keep sorting)."""
    global _last_uuid_ms, _uuid_counter, _uuid_prefix
    ms = max(time.time_ns() // 1_000_000, _last_uuid_ms + (_uuid_counter >= 0x1000))
    if ms > _last_uuid_ms:
        _last_uuid_ms = ms
        _uuid_counter = _random.getrandbits(10)
        _uuid_prefix = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7"
    return _uuid_prefix


def uuid7() -> str:
    """One UUIDv7 string (see `uuid7s`)."""
    global _uuid_counter
    prefix = _uuid_time_prefix()
    counter = _uuid_counter
    _uuid_counter = counter + 1
    rand = _random.getrandbits(60)
    return f"{prefix}{_HEX3[counter]}-{0x8000 | rand >> 48:04x}-{rand & 0xFFFFFFFFFFFF:012x}"


@attrs.define(slots=True, eq=False)
class Job:
    """One job and everything the broker knows about it."""

    id: str
    queue: str
    name: str
    data: bytes
    created_at: float
    run_at: float
    priority: float = 0
    lifo: bool = False
    max_attempts: int = 3
    backoff: float = 1000
    backoff_config: dict[str, Any] | None = None
    ttl: float | None = None
    timeout: float | None = None
    unique_key: str | None = None
    custom_id: str | None = None
    # Empty tuples, not lists, by default: an empty tuple is one shared object that the
    # cyclic GC never visits, where three lists per job tripled what it walks (the engine
    # replaces these sequences, never mutates them).
    depends_on: Sequence[str] = ()
    parent_id: str | None = None
    children_ids: Sequence[str] = ()
    tags: Sequence[str] = ()
    group_id: str | None = None
    group_max_size: int | None = None
    remove_on_complete: bool = False
    remove_on_fail: bool = False
    durable: bool = False
    repeat: dict[str, Any] | None = None
    stall_timeout: float | None = None
    stack_trace_limit: float = 10
    keep_logs: float | None = None
    size_limit: float | None = None
    fail_parent_on_failure: bool = False
    remove_dependency_on_failure: bool = False
    continue_parent_on_failure: bool = False
    ignore_dependency_on_failure: bool = False
    dedup_ttl: float | None = None
    dedup_extend: bool = False
    dedup_replace: bool = False
    debounce_id: str | None = None
    debounce_ttl: float | None = None

    # Life-cycle fields.
    state: str = WAITING
    started_at: float | None = None
    completed_at: float | None = None
    attempts: int = 0
    stall_count: int = 0
    progress: float = 0
    progress_message: str | None = None
    last_heartbeat: float = 0
    result: bytes | None = None
    failed_reason: str | None = None
    stacktrace: list[str] | None = None
    pending_deps: int = 0

    # Engine bookkeeping: the ready-heap entry and timer that are current, the lease, the holder.
    ready_seq: int = -1
    timer_token: int = 0
    lock_token: str | None = None
    lock_owner: str | None = None
    lock_ttl: float = 0
    lock_expires_at: float = 0
    holder: ReplySink | None = None

    # Fields added later go here, at the end: stored rows are positional (records.py).
    logs: list[dict[str, Any]] | None = None
    # After a processing timeout finalised an activation: a late ACK/FAIL from it is a no-op.
    late_open: bool = False
    late_token: str | None = None
    activation: int = 0  # which claim a timeout timer belongs to (transient)
    # A flow parent's record of children that failed under continue/ignore policies.
    child_failures: dict[str, str] | None = None
    ignored_failures: dict[str, str] | None = None
    retained_seq: int = 0  # which retention entry is current (transient)
    dlq_retries: int = 0  # auto retries out of the dead-letter queue so far (dlq.py)
    # The states the job went through, oldest first, the latest MAX_TIMELINE kept: one flat
    # tuple of (state, epoch ms, error or None) triples. Flat and of plain values, so each
    # transition costs one allocation and the cyclic GC does not walk it.
    timeline: Sequence[Any] = ()

    def to_wire(self) -> WireJob:
        """The job object as the reference server sends it (keys in its order)."""
        return WireJob(*self._wire_values())

    def to_wire_with_state(self) -> WireJobWithState:
        """The job as GetJob returns it: with `state`, `returnvalue` and `failedReason`."""
        result = None if self.result is None else msgspec.Raw(self.result)
        values = (*self._wire_values(), self.state, result, self.failed_reason)
        return WireJobWithState(*values)

    def _wire_values(self) -> tuple[Any, ...]:
        """The values of a WireJob, in the order of its fields (protocol/wire.py)."""
        return (
            self.id, self.queue, self.name, msgspec.Raw(self.data), self.created_at,
            self.run_at, self.started_at, self.completed_at, self.attempts, self.backoff,
            self.backoff_config, self.depends_on, self.children_ids, 0, self.tags,
            self.progress, self.progress_message, self.stacktrace, self.repeat, self.durable,
            self.last_heartbeat, self.stall_count, self.priority, self.lifo, self.max_attempts,
            self.remove_on_complete, self.remove_on_fail, self.ttl, self.timeout,
            self.unique_key, self.custom_id, self.parent_id, self.group_id,
            self.group_max_size, self.stall_timeout, self.stack_trace_limit, self.keep_logs,
            self.size_limit, self.fail_parent_on_failure, self.remove_dependency_on_failure,
            self.continue_parent_on_failure, self.ignore_dependency_on_failure,
            self.dedup_ttl, self.dedup_extend, self.dedup_replace, self.debounce_id,
            self.debounce_ttl, self._wire_timeline(),
        )  # fmt: skip

    def _wire_timeline(self) -> list[dict[str, Any]]:
        """The timeline as the reference shows it: {state, timestamp, error?} entries."""
        entries = []
        values = self.timeline
        for at in range(0, len(values), TIMELINE_ENTRY):
            state, timestamp, error = values[at : at + TIMELINE_ENTRY]
            shown = {"state": state, "timestamp": timestamp}
            if error is not None:
                shown["error"] = error
            entries.append(shown)
        return entries


# Options a repeating job's next occurrence inherits (not its ids, keys or flow links).
INHERITED_OPTIONS = (
    "priority", "lifo", "max_attempts", "backoff", "backoff_config", "ttl", "timeout", "tags",
    "group_id", "group_max_size", "remove_on_complete", "remove_on_fail", "durable",
    "stall_timeout", "stack_trace_limit", "keep_logs", "size_limit",
)  # fmt: skip


def next_occurrence_of(job: Job, job_id: str, run_at: float, now: float) -> Job:
    """The next occurrence of a repeating job: same name, data and options, count + 1."""
    repeat = dict(job.repeat or {}, count=(job.repeat or {}).get("count", 0) + 1)
    repeat["prevMillis"] = job.run_at
    repeat.pop("nextCreated", None)
    options = {name: getattr(job, name) for name in INHERITED_OPTIONS}
    return Job(
        job_id,
        job.queue,
        job.name,
        job.data,
        now,
        run_at,
        repeat=repeat,
        last_heartbeat=now,
        **options,
    )


def job_from_push(fields: Any, queue: str, job_id: str, custom_id: str | None, now: float) -> Job:
    """Build a Job from validated PUSH/PUSHB fields (protocol.jobspec.JobFields)."""
    if not fields.optionsGiven:  # every option at its default: the Job's defaults are the same
        name, data = fields.name, fields.data
        return Job(job_id, queue, name, data, now, now, custom_id=custom_id, last_heartbeat=now)
    created = fields.timestamp if fields.timestamp is not None else now
    dedup = fields.dedup
    return Job(
        id=job_id,
        queue=queue,
        name=fields.name,
        data=fields.data,
        created_at=created,
        run_at=created + fields.delay,
        priority=fields.priority,
        lifo=fields.lifo is True,
        max_attempts=fields.maxAttempts,
        backoff=fields.backoff,
        backoff_config=fields.backoffConfig,
        ttl=fields.ttl,
        timeout=fields.timeout,
        unique_key=fields.uniqueKey,
        custom_id=custom_id,
        depends_on=fields.dependsOn or (),
        parent_id=fields.parentId,
        children_ids=fields.childrenIds or (),
        tags=fields.tags or (),
        group_id=fields.groupId,
        group_max_size=fields.groupMaxSize,
        remove_on_complete=fields.removeOnComplete is True,
        remove_on_fail=fields.removeOnFail is True,
        durable=fields.durable is True,
        repeat=fields.repeat,
        stall_timeout=fields.stallTimeout,
        stack_trace_limit=fields.stackTraceLimit,
        keep_logs=fields.keepLogs,
        size_limit=fields.sizeLimit,
        fail_parent_on_failure=fields.failParentOnFailure is True,
        remove_dependency_on_failure=fields.removeDependencyOnFailure is True,
        continue_parent_on_failure=fields.continueParentOnFailure is True,
        ignore_dependency_on_failure=fields.ignoreDependencyOnFailure is True,
        dedup_ttl=dedup["ttl"],
        dedup_extend=dedup["extend"],
        dedup_replace=dedup["replace"],
        debounce_id=fields.debounceId,
        debounce_ttl=fields.debounceTtl,
        last_heartbeat=created,
    )
