"""Jobs to store rows and back: what survives a restart.

Every field of a Job is persisted except the engine's in-memory bookkeeping (heap position,
timer generation, the connection that holds it), which is rebuilt on load; instead of the
holding connection a row records whether the job was connection-bound (`held`).

The body is a MessagePack array: a format number, `held`, then the persisted fields in
`PERSISTED` order. Positional is three times smaller and faster than a map keyed by name;
the price is a rule: fields are only ever appended to `PERSISTED` (with defaults), so an
older, shorter row still loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from broker.engine.state.model import (
    COUNTED_STATES,
    FIELD_NAMES,
    OPTION_FIELDS,
    OPTION_NAMES,
    RARE,
    TIMELINE_ENTRY,
    UNKNOWN,
    Job,
    Options,
    find_shared,
    options_for,
    options_shared,
    shared,
)
from store import JobRow

FORMAT = 1
TRANSIENT = frozenset({"ready_seq", "timer_token", "holder", "activation", "retained_seq"})
PERSISTED = tuple(name for name in FIELD_NAMES if name not in TRANSIENT)


def _row_builder(persisted: tuple[str, ...] = PERSISTED) -> Callable[[Job], JobRow]:
    """`job_to_row`, compiled once from `persisted`: one generated function that loads the
    fields, encodes the body and builds the row, with no other Python call per row.

    Plain attribute loads in one generated function are specialised by the interpreter: measured
    1.6 us a row against 2.4 us for `operator.attrgetter` over the same 59 fields (the encoding
    of every changed job is on the commit path). The row is made with `tuple.__new__`, skipping
    the Python-level `__new__` of the NamedTuple. The names come from the Job class itself.

    The 32 options, one block of `PERSISTED`, are encoded once per Options object (most jobs
    share one: model.py) and spliced in as one `msgspec.Raw`; the array's length, which then
    counts that block as one item, is patched in the header. Measured with callgrind: 20.2k
    against 16.9k instructions a row, the same bytes. Options holding a dict the engine updates
    in place (a repeat) are encoded afresh for every row (`Options.keeps_its_encoding`).
    """
    options = [name for name in persisted if name in OPTION_NAMES]
    first = persisted.index(options[0])
    after = first + len(options)
    if persisted[first:after] != tuple(options):
        raise RuntimeError("the options are no longer one block of PERSISTED: see records.py")
    head = ", ".join(f"job.{n}" for n in persisted[:first])
    tail = ", ".join(f"job.{n}" for n in persisted[after:])
    items = 2 + first + 1 + len(persisted) - after  # with the options as one Raw item
    if min(items, len(options)) < 16 or len(persisted) + 2 >= 2**16:
        # the three arrays (the row as encoded, the options, the row) must have 3-byte headers
        raise RuntimeError("the row's array header is no longer 3 bytes: see records.py")
    source = (
        "def job_to_row(job):\n"
        "    o = job.opts\n"
        "    known = _encoded_options(id(o))\n"
        "    if known is None:\n"
        "        known = _encode_options(o)\n"
        f"    body = _encode(({FORMAT}, job.holder is not None, {head}, known[1], {tail}))\n"
        "    return _new(JobRow, (job.id, job.queue, job.state, _HEADER + body[3:], o.priority,\n"
        "                         job.run_at, job.created_at, job.attempts))\n"
    )
    namespace: dict[str, Any] = {
        "_encode": _encode, "_new": tuple.__new__, "JobRow": JobRow,
        "_encoded_options": _OPTIONS_ENCODED.get, "_encode_options": _options_encoder(options),
        "_HEADER": b"\xdc" + (len(persisted) + 2).to_bytes(2, "big"),
    }  # fmt: skip
    exec(compile(source, "<trioq job row>", "exec"), namespace)
    return namespace["job_to_row"]


_OPTIONS_ENCODED: dict[int, tuple[Options, msgspec.Raw]] = {}
"""Options object id -> (that object, its encoded block). Holding the object keeps its id from
being reused by another object while the entry exists, so the id alone identifies it."""
OPTIONS_CACHE_SIZE = 4096
"""Cleared when full: jobs with their own Options (a jobId, a uniqueKey) each take an entry."""


def _options_encoder(names: list[str]) -> Callable[[Options], tuple[Options, msgspec.Raw]]:
    """The function encoding an Options block (the options in `names` order, no array header)
    and caching it, unless the engine may update the options in place (a repeat)."""
    fields = ", ".join(f"o.{n}" for n in names)
    source = (
        "def encode_options(o):\n"
        f"    known = (o, _Raw(_encode(({fields},))[3:]))\n"
        "    if o.keeps_its_encoding():\n"
        "        if len(_cache) >= _SIZE:\n"
        "            _cache.clear()\n"
        "        _cache[id(o)] = known\n"
        "    return known\n"
    )
    namespace: dict[str, Any] = {
        "_encode": _encode, "_Raw": msgspec.Raw, "_cache": _OPTIONS_ENCODED,
        "_SIZE": OPTIONS_CACHE_SIZE,
    }  # fmt: skip
    exec(compile(source, "<trioq options block>", "exec"), namespace)
    return namespace["encode_options"]


SEQUENCES = ("depends_on", "children_ids", "tags", "timeline")
NAMES = ("queue", "name")

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[Any]).decode

job_to_row: Callable[[Job], JobRow] = _row_builder()
"""The row that stores a job as it is now (with the columns SQL stores keep for queries)."""


HEAD = ("format", "held", *PERSISTED[: PERSISTED.index(OPTION_FIELDS[0][0])])
"""The items a row starts with that differ between jobs pushed together (their ids, data and
times); what follows (options, state, the rest) is mostly the same bytes for those jobs."""
_HEADER = b"\xdc" + (len(PERSISTED) + 2).to_bytes(2, "big")
_HEAD_ARRAY = bytes([0x90 + len(HEAD)])  # a fixarray of the head's items


class RowLoader:
    """Reads stored rows back into jobs (a start-up reads a million rows through one).

    Most rows of a large store are waiting or delayed jobs pushed in batches: the jobs of one
    PUSHB share their options, state, times and timeline, so their rows end with the same
    bytes (the `tail`, everything after the `HEAD` items) and are stored next to each other.
    A row whose tail is the previous template's decodes only its head, and its job takes the
    template's options, state, heartbeat and timeline objects (immutable ones only: the
    template is made from a job with shared options and every rare field at its default).

    Why this is exact: the row starts with the current layout's array header and its head
    bytes decode as exactly `len(HEAD)` complete items, so (MessagePack being a prefix code)
    they are the row's first items, and the rest of the row is, byte for byte, the template's
    tail, which decodes to the template's values. Anything else takes the full path
    (`job_from_row`), which may make its job the next template.

    Measured with callgrind, the row of a waiting job loaded 40,000 times: 12.6k against
    32.1k instructions a row on the full path (decode 10.8k, build 21.3k).
    """

    def __init__(self) -> None:
        self._tail: bytes | None = None
        self._template: tuple[Any, ...] = ()

    def load(self, raw: bytes) -> tuple[Job, bool]:
        """The Job a row's body stores, and whether it was held by a connection when written."""
        tail = self._tail
        if tail is not None and raw.endswith(tail) and raw.startswith(_HEADER):
            try:
                head = _decode(_HEAD_ARRAY + raw[3 : len(raw) - len(tail)])
            except msgspec.DecodeError:
                head = None
            if head is not None and head[0] == FORMAT:
                _, held, job_id, queue, name, data, created_at, run_at = head
                options, state, heartbeat, timeline = self._template
                # The times, names and states of jobs pushed together are one object each.
                # (Zero passes as it is: -0.0 == 0.0, and a time of zero shares nothing.)
                if created_at == heartbeat and type(created_at) is type(heartbeat) and created_at:
                    created_at = heartbeat
                else:
                    created_at = _time(created_at)
                if run_at == created_at and type(run_at) is type(created_at) and run_at:
                    run_at = created_at
                else:
                    run_at = _time(run_at)
                job = Job(job_id, _names_get(queue) or _shared(queue),
                          _names_get(name) or _shared(name), data, created_at, run_at,
                          heartbeat, options)  # fmt: skip
                job.state = state
                job.timeline = timeline
                return job, held
        body = _decode(raw)
        job, held = _job_of_body(body)
        if len(body) == len(PERSISTED) + 2 and _may_be_template(body, job):
            self._remember(raw, body, job)
        return job, held

    def _remember(self, raw: bytes, body: list[Any], job: Job) -> None:
        """Make `job` (just loaded from `raw`, decoded as `body`) the template of the rows
        that follow, if its head encodes to the very bytes stored (msgspec wrote them)."""
        head = _encode(body[: len(HEAD)])
        cut = 3 + len(head) - 1
        if raw[3:cut] == head[1:]:
            self._tail = raw[cut:]
            self._template = (job.opts, job.state, job.last_heartbeat, job.timeline)


_RARE_AT = tuple((index + 2, RARE[name]) for index, name in enumerate(PERSISTED) if name in RARE)


def _may_be_template(body: list[Any], job: Job) -> bool:
    """Whether a job may lend its objects to the next rows: options shared by every job
    holding them, and every rare field at its default (what lists and dicts a job owns, such
    as logs, are rare fields; a job that ran has some)."""
    for index, default in _RARE_AT:
        if body[index] is not default:
            return False
    key = _encode(body[len(HEAD) : len(HEAD) + len(OPTION_FIELDS)])
    return _OPTIONS_BY_ENCODING.get(key) is job.opts


def job_from_row(row: JobRow) -> tuple[Job, bool]:
    """The Job a row stores, and whether it was held by a connection when written."""
    return _job_of_body(_decode(row.body))


def _job_of_body(body: list[Any]) -> tuple[Job, bool]:
    """The Job of a decoded row body."""
    if body[0] != FORMAT:
        job_id = body[2] if len(body) > 2 else "?"  # every format so far puts the id there
        raise ValueError(f"job {job_id}: unknown row format {body[0]}")
    if len(body) == len(PERSISTED) + 2:  # a row of this version: the compiled path
        return _job_of(body), bool(body[1])
    values = dict(zip(PERSISTED, body[2:], strict=False))  # an older, shorter row
    # Stored as MessagePack arrays, these load as lists; a live job holds tuples (the empty
    # one shared). Measured: 140 against 101 MiB for 100,000 jobs before the two steps below.
    for name in SEQUENCES:
        value = values.get(name)
        if value is not None and type(value) is list:
            values[name] = tuple(value)
    for name in NAMES:  # one string per queue or job name, as pushes share them
        value = values.get(name)
        if value is not None:
            values[name] = _shared(value)
    return Job(**values), bool(body[1])


def _job_builder() -> Callable[[list[Any]], Job]:
    """A function making the Job of a full-length body, compiled once from `PERSISTED` (as
    `_row_builder`): no dict of keyword arguments per row, the same conversions as the
    general path of `job_from_row`, and the job laid out in memory as a pushed one is
    (issue 29: a restart took half again the memory of the same jobs pushed live):

    * options shared as a push shares them, found by their encoding (`_options_of`);
    * one string per queue, job name and state, and one float per time that recurs (the
      jobs of one PUSHB share theirs, `_time`), and one timeline tuple for jobs that entered
      their first state at the same time, as the engine shares it (`_timeline`);
    * rare fields left at their class defaults unless the row holds another value, tested
      by identity first (a stored default decodes to the very same None, 0 or False).

    Measured with callgrind on 4,000 restored waiting jobs (SQLite scan, decode, build and
    the engine's restore): 68.7k instructions a job before these steps and RowLoader, 23.8k
    after (with the restore's own steps, EngineState.restore).
    """
    at = {name: f"body[{index + 2}]" for index, name in enumerate(PERSISTED)}
    for name in SEQUENCES:
        at[name] = f"_tuple({at[name]})"
    at["timeline"] = f"_timeline({at['timeline']})"
    for name in NAMES:
        at[name] = f"_shared({at[name]})"
    for name in TIMES:
        at[name] = f"_time({at[name]})"
    at["state"] = f"_state({at['state']}, {at['state']})"
    first = PERSISTED.index(OPTION_FIELDS[0][0]) + 2
    options = f"_options_of(body[{first}:{first + len(OPTION_FIELDS)}])"
    given = ("id", "queue", "name", "data", "created_at", "run_at", "last_heartbeat")  # Job()'s
    lines = [
        "def build(body):",
        f"    job = Job({', '.join(at[name] for name in given)}, {options})",
    ]
    for name in PERSISTED:
        if name in OPTION_NAMES or name in given:
            continue
        if name in RARE:
            lines.append(f"    value = {at[name]}")
            if RARE[name] is None:
                lines.append("    if value is not None:")
            else:  # the same value of another type (0.0 for 0) is kept: clients see the type
                lines.append(
                    f"    if value is not _rare[{name!r}] and not (type(value) is "
                    f"type(_rare[{name!r}]) and value == _rare[{name!r}]):"
                )
            lines.append(f"        job.{name} = value")
        else:
            lines.append(f"    job.{name} = {at[name]}")
    lines.append("    return job")
    namespace: dict[str, Any] = {
        "Job": Job, "_tuple": _tuple, "_shared": _shared, "_options_of": _options_of,
        "_rare": RARE, "_time": _time, "_timeline": _timeline, "_state": _STATES.get,
    }  # fmt: skip
    exec(compile("\n".join(lines) + "\n", "<trioq job from row>", "exec"), namespace)
    return namespace["build"]


TIMES = ("created_at", "run_at", "last_heartbeat")
_STATES = {state: state for state in (*COUNTED_STATES, UNKNOWN)}
"""The one string of each state (a decoded row holds its own copy)."""
_SEQUENCE_OPTIONS = tuple(
    index for index, (name, _) in enumerate(OPTION_FIELDS) if name in SEQUENCES
)
_OPTIONS_BY_ENCODING: dict[bytes, Options] = {}
"""The encoded values of an option set shared by jobs -> those Options (see `_options_of`)."""


def _options_of(values: list[Any]) -> Options:
    """The Options of a stored job's option values, shared as `options_for` shares them.

    Found by the values' encoding: it tells 1 from 1.0 and True as the Options must (a job
    pushed with priority 1 shows 1), and a lookup by it cost a fifth of building the
    `options_for` key (a tuple of the 32 values and a tuple of their types) every row.
    Options of one job's own are not kept (each row would add an entry)."""
    key = _encode(values)
    found = _OPTIONS_BY_ENCODING.get(key)
    if found is not None:
        return found
    for index in _SEQUENCE_OPTIONS:
        values[index] = _tuple(values[index])
    shared_values = tuple(values)
    found = options_for(shared_values)
    if options_shared(shared_values):
        if len(_OPTIONS_BY_ENCODING) >= OPTIONS_CACHE_SIZE:
            _OPTIONS_BY_ENCODING.clear()
        _OPTIONS_BY_ENCODING[key] = found
    return found


MAX_TIMES = 4096
_TIMES: dict[float, float] = {}


def _time(value: Any) -> Any:
    """One float object for a time many rows hold (a live PUSHB gives its jobs one `now`;
    decoded, each row would hold its own 24 bytes). Zero and other types pass unchanged
    (-0.0 == 0.0, and an int time must stay an int)."""
    if type(value) is float and value:
        found = _TIMES.get(value)
        if found is not None:
            return found
        if len(_TIMES) >= MAX_TIMES:
            _TIMES.clear()
        _TIMES[value] = value
    return value


_last_first_entry: list[tuple[Any, ...]] = [("", None, None)]


def _timeline(value: Any) -> Any:
    """A stored timeline as the engine holds it: a tuple, its states and times shared; a
    one-entry timeline equal to the previous row's is that very tuple (the engine gives the
    jobs entering their first state together one tuple: EngineState._record)."""
    if type(value) is not list:
        return value
    if len(value) == TIMELINE_ENTRY and value[2] is None:
        state, at = value[0], value[1]
        last = _last_first_entry[0]
        if last[1] == at and type(last[1]) is type(at) and last[0] == state:
            return last
        entry = _last_first_entry[0] = (_STATES.get(state, state), _time(at), None)
        return entry
    if len(value) % TIMELINE_ENTRY:
        return tuple(value)
    items: list[Any] = []
    for at in range(0, len(value), TIMELINE_ENTRY):
        state = value[at]
        items += (_STATES.get(state, state), _time(value[at + 1]), value[at + 2])
    return tuple(items)


def _tuple(value: Any) -> Any:
    return tuple(value) if type(value) is list else value


_shared = shared
_names_get = find_shared


_job_of = _job_builder()
