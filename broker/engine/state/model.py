"""The domain model: a job and its states, with the conversion to the wire shape.

Field names are Python's; `to_wire` produces the reference server's job object (its keys and
their order), so clients written against bunqueue read our jobs unchanged.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import msgspec

from broker.engine.sink import ReplySink
from protocol.jobspec import JobFields
from protocol.wire import WireJob, WireJobWithState

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

# Memory layout (issue 14: RSS per million waiting jobs). A job is split three ways so that a
# waiting job with default options holds 144 bytes instead of 568:
# * `SLOTS`: what every job holds, or what is written for every job before it starts;
# * `Options` (the 32 push options): one immutable object, shared by every job pushed with
#   the defaults (and interned for identical option sets that name nothing of one job's own);
#   `job.priority` and the others are properties reading it (hot paths read `job.opts.x`,
#   a property costs a call), and a write gives the job a changed copy;
# * `RARE` fields (life-cycle, lease, failure and flow bookkeeping): class-level defaults,
#   stored in the instance's lazily created `__dict__` once a job's value is set (a waiting
#   job has no dict; one that ran has one).
# A field is read and written as `job.x` whichever part holds it. Job has no `__weakref__`
# slot (8 bytes a job).

OPTION_FIELDS: tuple[tuple[str, Any], ...] = (
    ("priority", 0), ("lifo", False), ("max_attempts", 3), ("backoff", 1000),
    ("backoff_config", None), ("ttl", None), ("timeout", None), ("unique_key", None),
    ("custom_id", None), ("depends_on", ()), ("parent_id", None), ("children_ids", ()),
    ("tags", ()), ("group_id", None), ("group_max_size", None), ("remove_on_complete", False),
    ("remove_on_fail", False), ("durable", False), ("repeat", None), ("stall_timeout", None),
    ("stack_trace_limit", 10), ("keep_logs", None), ("size_limit", None),
    ("fail_parent_on_failure", False), ("remove_dependency_on_failure", False),
    ("continue_parent_on_failure", False), ("ignore_dependency_on_failure", False),
    ("dedup_ttl", None), ("dedup_extend", False), ("dedup_replace", False),
    ("debounce_id", None), ("debounce_ttl", None),
)  # fmt: skip
OPTION_NAMES = frozenset(name for name, _ in OPTION_FIELDS)
# The options a WireJob lists one after another (protocol/wire.py), from `priority` on.
WIRE_TAIL = (
    "priority", "lifo", "max_attempts", "remove_on_complete", "remove_on_fail", "ttl", "timeout",
    "unique_key", "custom_id", "parent_id", "group_id", "group_max_size", "stall_timeout",
    "stack_trace_limit", "keep_logs", "size_limit", "fail_parent_on_failure",
    "remove_dependency_on_failure", "continue_parent_on_failure",
    "ignore_dependency_on_failure", "dedup_ttl", "dedup_extend", "dedup_replace", "debounce_id",
    "debounce_ttl",
)  # fmt: skip


@attrs.frozen(slots=True, eq=False)
class Options:
    """The options a job was pushed with (immutable: jobs share one object per option set).

    Empty tuples, not lists, by default: an empty tuple is one shared object that the cyclic
    GC never visits (the engine replaces these sequences, never mutates them)."""

    priority: float = 0
    lifo: bool = False
    max_attempts: int = 3
    backoff: float = 1000
    backoff_config: dict[str, Any] | None = None
    ttl: float | None = None
    timeout: float | None = None
    unique_key: str | None = None
    custom_id: str | None = None
    depends_on: Sequence[str] = ()
    parent_id: str | None = None
    children_ids: Sequence[str] = ()
    tags: Sequence[str] = ()
    group_id: str | None = None
    group_max_size: float | None = None  # whole; a float beyond 32 bits
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
    # The WireJob values from `priority` to `debounce_ttl`, made once per option set (a PULL's
    # reply then copies one tuple instead of loading 25 attributes).
    wire_tail: tuple[Any, ...] = attrs.field(init=False)
    # The options' runs of a pulled job's encoded map (wireform.py), made on the first pull.
    wire_pieces: tuple[Any, ...] | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "wire_tail", tuple(getattr(self, n) for n in WIRE_TAIL))

    def keeps_its_encoding(self) -> bool:
        """Whether an encoding of these options stays right while they live, so that it may be
        kept (wireform.py, records.py): not when they hold a dict (`repeat`, `backoff_config`),
        which the engine updates in place (a repeating job that starts marks `nextCreated`)."""
        return self.repeat is None and self.backoff_config is None


DEFAULT_OPTIONS = Options()
_WITH_ID = dict(OPTION_FIELDS[:8])  # the defaults of the fields before custom_id
MAX_INTERNED = 10_000
_interned_options: dict[tuple[tuple[Any, ...], tuple[type, ...]], Options] = {}


def options_of(values: tuple[Any, ...]) -> Options:
    """The Options with these values (in `OPTION_FIELDS` order): one shared object per set of
    hashable values (the cache forgets everything past MAX_INTERNED sets), else a new one."""
    # The types are part of the key: 1 == 1.0 == True, but a job pushed with priority 1 must
    # show 1, not the 1.0 of an earlier job.
    key = (values, tuple(map(type, values)))
    try:
        found = _interned_options.get(key)
    except TypeError:  # a dict or list among the values: not shared
        return Options(*values)
    if found is None:
        if len(_interned_options) >= MAX_INTERNED:
            _interned_options.clear()
        found = _interned_options[key] = Options(*values)
    return found


# Options naming one job (ids, keys, flow links, its repeat count): a set holding any of them
# is that job's own, not worth looking up among the shared ones.
_OWN = tuple(
    index for index, (name, _) in enumerate(OPTION_FIELDS)
    if name in ("unique_key", "custom_id", "depends_on", "parent_id", "children_ids", "repeat",
                "debounce_id")
)  # fmt: skip


def options_with_id(custom_id: str) -> Options:
    """The Options of a job pushed with only a jobId."""
    return Options(**_WITH_ID, custom_id=custom_id)


def options_for(values: tuple[Any, ...]) -> Options:
    """The Options of one job from its values in `OPTION_FIELDS` order (shared when they
    name nothing of the job's own, see `options_of`)."""
    for index in _OWN:
        if values[index]:
            return Options(*values)
    return options_of(values)


def options_shared(values: tuple[Any, ...]) -> bool:
    """Whether `options_for(values)` is one object shared by every job with these values
    (nothing of one job's own among them, and every value hashable), not a job's own."""
    if any(values[index] for index in _OWN):
        return False
    try:
        hash(values)
    except TypeError:  # a dict (backoffConfig): the engine may change it in place
        return False
    return True


# Held by every job, or written for most jobs before they start: slots.
SLOTS = (
    "id", "queue", "name", "data", "created_at", "run_at", "state", "timeline", "ready_seq",
    "timer_token", "last_heartbeat", "opts",
)  # fmt: skip
# Set on few jobs, or only once a job runs (a waiting job has none of them): class-level
# defaults, in the instance's `__dict__` once set.
RARE: dict[str, Any] = {
    "started_at": None, "completed_at": None, "holder": None, "lock_token": None,
    "activation": 0, "result": None, "progress": 0, "retained_seq": 0,
    "attempts": 0, "stall_count": 0, "progress_message": None, "failed_reason": None,
    "stacktrace": None, "pending_deps": 0, "lock_owner": None, "lock_ttl": 0,
    "lock_expires_at": 0, "logs": None, "late_open": False, "late_token": None,
    "child_failures": None, "ignored_failures": None, "dlq_retries": 0,
}  # fmt: skip
_SLOT_DEFAULTS: dict[str, Any] = {
    "state": WAITING, "timeline": (), "ready_seq": -1, "timer_token": 0,
}  # fmt: skip

# Every field in the order of the former single-class Job (stored rows are positional:
# records.py; fields added later go at the end).
FIELD_NAMES = (
    "id", "queue", "name", "data", "created_at", "run_at",
    *(name for name, _ in OPTION_FIELDS),
    "state", "started_at", "completed_at", "attempts", "stall_count", "progress",
    "progress_message", "last_heartbeat", "result", "failed_reason", "stacktrace",
    "pending_deps", "ready_seq", "timer_token", "lock_token", "lock_owner", "lock_ttl",
    "lock_expires_at", "holder", "logs", "late_open", "late_token", "activation",
    "child_failures", "ignored_failures", "retained_seq", "dlq_retries", "timeline",
)  # fmt: skip


class Job:
    """One job and everything the broker knows about it (see the memory layout above: every
    field reads and writes as a plain attribute)."""

    __slots__ = (*SLOTS, "__dict__")

    id: str
    queue: str
    name: str
    data: bytes
    created_at: float
    run_at: float
    state: str
    last_heartbeat: float
    # Engine bookkeeping: the ready-heap entry and the delay timer that are current.
    ready_seq: int
    timer_token: int
    # The states the job went through, oldest first, the latest MAX_TIMELINE kept: one flat
    # tuple of (state, epoch ms, error or None) triples. Flat and of plain values, so each
    # transition costs one allocation and the cyclic GC does not walk it.
    timeline: tuple[Any, ...]
    opts: Options

    # RARE fields (class defaults). Life-cycle and lease fields: set once the job runs.
    started_at: float | None = None
    completed_at: float | None = None
    progress: float = 0
    result: bytes | None = None
    holder: ReplySink | None = None
    lock_token: str | None = None
    activation: int = 0  # which claim a timeout timer belongs to (transient)
    retained_seq: int = 0  # which retention entry is current (transient)
    attempts: int = 0
    stall_count: int = 0
    progress_message: str | None = None
    failed_reason: str | None = None
    stacktrace: list[str] | None = None
    pending_deps: int = 0
    lock_owner: str | None = None
    lock_ttl: float = 0
    lock_expires_at: float = 0
    logs: list[dict[str, Any]] | None = None
    # After a processing timeout finalised an activation: a late ACK/FAIL from it is a no-op.
    late_open: bool = False
    late_token: str | None = None
    # A flow parent's record of children that failed under continue/ignore policies.
    child_failures: dict[str, str] | None = None
    ignored_failures: dict[str, str] | None = None
    dlq_retries: int = 0  # auto retries out of the dead-letter queue so far (dlq.py)

    if TYPE_CHECKING:  # properties over `opts` at run time (installed below the class)
        priority: float
        lifo: bool
        max_attempts: int
        backoff: float
        backoff_config: dict[str, Any] | None
        ttl: float | None
        timeout: float | None
        unique_key: str | None
        custom_id: str | None
        depends_on: Sequence[str]
        parent_id: str | None
        children_ids: Sequence[str]
        tags: Sequence[str]
        group_id: str | None
        group_max_size: int | None
        remove_on_complete: bool
        remove_on_fail: bool
        durable: bool
        repeat: dict[str, Any] | None
        stall_timeout: float | None
        stack_trace_limit: float
        keep_logs: float | None
        size_limit: float | None
        fail_parent_on_failure: bool
        remove_dependency_on_failure: bool
        continue_parent_on_failure: bool
        ignore_dependency_on_failure: bool
        dedup_ttl: float | None
        dedup_extend: bool
        dedup_replace: bool
        debounce_id: str | None
        debounce_ttl: float | None

    def __init__(
        self,
        id: str,
        queue: str,
        name: str,
        data: bytes,
        created_at: float,
        run_at: float,
        last_heartbeat: float = 0,
        opts: Options = DEFAULT_OPTIONS,
        **fields: Any,
    ) -> None:
        self.id = id
        self.queue = queue
        self.name = name
        self.data = data
        self.created_at = created_at
        self.run_at = run_at
        self.state = WAITING
        self.timeline = ()
        self.ready_seq = -1
        self.timer_token = 0
        self.last_heartbeat = last_heartbeat
        self.opts = opts
        if fields:
            self._set_fields(fields)

    def _set_fields(self, fields: dict[str, Any]) -> None:
        """Any other fields by name (a stored row, a test): options make one Options object,
        rare fields at their default stay out of the instance's dict."""
        options = {name: fields.pop(name) for name in OPTION_NAMES.intersection(fields)}
        if options:
            self.opts = attrs.evolve(self.opts, **options)
        for name, value in fields.items():
            if name in RARE:
                default = RARE[name]
                if value is default or (type(value) is type(default) and value == default):
                    continue
            elif name not in _SLOT_DEFAULTS:
                raise TypeError(f"Job has no field {name!r}")
            setattr(self, name, value)

    def __repr__(self) -> str:
        shown = f"id={self.id!r}, queue={self.queue!r}, name={self.name!r}, state={self.state!r}"
        return f"Job({shown})"

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
        o = self.opts
        return (
            self.id, self.queue, self.name, msgspec.Raw(self.data), self.created_at,
            self.run_at, self.started_at, self.completed_at, self.attempts, o.backoff,
            o.backoff_config, o.depends_on, o.children_ids, 0, o.tags,
            self.progress, self.progress_message, self.stacktrace, o.repeat, o.durable,
            self.last_heartbeat, self.stall_count, *o.wire_tail, self._wire_timeline(),
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


def _option_property(name: str) -> property:
    """`job.<name>` reads the job's Options; a write gives the job a changed copy."""
    getter = operator.attrgetter(f"opts.{name}")

    def setter(job: Job, value: Any) -> None:
        job.opts = attrs.evolve(job.opts, **{name: value})

    return property(getter, setter, doc=f"The job's `{name}` option (see Options).")


for _name, _ in OPTION_FIELDS:
    setattr(Job, _name, _option_property(_name))
del _name


# Options a repeating job's next occurrence inherits (not its ids, keys or flow links).
INHERITED_OPTIONS = (
    "priority", "lifo", "max_attempts", "backoff", "backoff_config", "ttl", "timeout", "tags",
    "group_id", "group_max_size", "remove_on_complete", "remove_on_fail", "durable",
    "stall_timeout", "stack_trace_limit", "keep_logs", "size_limit",
)  # fmt: skip


def next_occurrence_of(job: Job, job_id: str, run_at: float, now: float) -> Job:
    """The next occurrence of a repeating job: same name, data and options, count + 1.

    Only for a job that has just started (pulls.py): its `repeat` holds a `count` (a pushed
    repeat is normalised so: protocol/jobspec.py) and the `nextCreated` mark of that start."""
    current = job.repeat or {}
    repeat = {**current, "count": current["count"] + 1, "prevMillis": job.run_at}
    del repeat["nextCreated"]  # the next occurrence has not started yet
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


MAX_SHARED = 10_000
_names: dict[str, str] = {}


find_shared = _names.get
"""The one copy of a name `shared` holds, or None (a lookup without the call of `shared`)."""


def shared(text: str) -> str:
    """One copy of a repeated queue or job name: each push decodes its own string, and a
    million jobs of one name would otherwise hold a million copies (the cache forgets
    everything past MAX_SHARED names)."""
    found = _names.get(text)
    if found is not None:
        return found
    if len(_names) >= MAX_SHARED:
        _names.clear()
    _names[text] = text
    return text


def job_from_push(
    fields: JobFields, queue: str, job_id: str, custom_id: str | None, now: float
) -> Job:
    """Build a Job from validated PUSH/PUSHB fields (protocol.jobspec.JobFields)."""
    queue = _names.get(queue) or shared(queue)
    name = _names.get(fields.name) or shared(fields.name)
    if not fields.optionsGiven:  # every option at its default: the Job's defaults are the same
        opts = DEFAULT_OPTIONS if custom_id is None else options_with_id(custom_id)
        return Job(job_id, queue, name, fields.data, now, now, now, opts)
    created = fields.timestamp if fields.timestamp is not None else now
    dedup = fields.dedup
    values = (
        fields.priority,
        fields.lifo is True,
        fields.maxAttempts,
        fields.backoff,
        fields.backoffConfig,
        fields.ttl,
        fields.timeout,
        fields.uniqueKey,
        custom_id,
        fields.dependsOn or (),
        fields.parentId,
        fields.childrenIds or (),
        fields.tags or (),
        fields.groupId,
        fields.groupMaxSize,
        fields.removeOnComplete is True,
        fields.removeOnFail is True,
        fields.durable is True,
        fields.repeat,
        fields.stallTimeout,
        fields.stackTraceLimit,
        fields.keepLogs,
        fields.sizeLimit,
        fields.failParentOnFailure is True,
        fields.removeDependencyOnFailure is True,
        fields.continueParentOnFailure is True,
        fields.ignoreDependencyOnFailure is True,
        dedup["ttl"],
        dedup["extend"],
        dedup["replace"],
        fields.debounceId,
        fields.debounceTtl,
    )  # fmt: skip
    run_at = created + fields.delay
    return Job(job_id, queue, name, fields.data, created, run_at, created, options_for(values))
