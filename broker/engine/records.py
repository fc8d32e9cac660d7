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

from store import JobRow

from .model import (
    FIELD_NAMES,
    OPTION_FIELDS,
    OPTION_NAMES,
    RARE,
    Job,
    Options,
    options_for,
    shared,
)

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
    return namespace["job_to_row"]  # type: ignore[no-any-return]


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
    return namespace["encode_options"]  # type: ignore[no-any-return]


SEQUENCES = ("depends_on", "children_ids", "tags", "timeline")
NAMES = ("queue", "name")

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[Any]).decode

job_to_row: Callable[[Job], JobRow] = _row_builder()
"""The row that stores a job as it is now (with the columns SQL stores keep for queries)."""


def job_from_row(row: JobRow) -> tuple[Job, bool]:
    """The Job a row stores, and whether it was held by a connection when written."""
    body = _decode(row.body)
    if body[0] != FORMAT:
        raise ValueError(f"job {row.id}: unknown row format {body[0]}")
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
    general path of `job_from_row`, options shared as a push shares them, and rare fields
    left at their class defaults unless the row holds another value (see model.py)."""
    at = {name: f"body[{index + 2}]" for index, name in enumerate(PERSISTED)}
    for name in SEQUENCES:
        at[name] = f"_tuple({at[name]})"
    for name in NAMES:
        at[name] = f"_shared({at[name]})"
    options = ", ".join(at[name] for name, _ in OPTION_FIELDS)
    given = ("id", "queue", "name", "data", "created_at", "run_at", "last_heartbeat")  # Job()'s
    lines = [
        "def build(body):",
        f"    job = Job({', '.join(at[name] for name in given)}, _options(({options},)))",
    ]
    for name in PERSISTED:
        if name in OPTION_NAMES or name in given:
            continue
        if name in RARE:
            lines.append(f"    value = {at[name]}")
            lines.append(f"    if not (value is _rare[{name!r}] or (type(value) is "
                         f"type(_rare[{name!r}]) and value == _rare[{name!r}])):")
            lines.append(f"        job.{name} = value")
        else:
            lines.append(f"    job.{name} = {at[name]}")
    lines.append("    return job")
    namespace: dict[str, Any] = {
        "Job": Job, "_tuple": _tuple, "_shared": _shared, "_options": options_for, "_rare": RARE,
    }  # fmt: skip
    exec(compile("\n".join(lines) + "\n", "<trioq job from row>", "exec"), namespace)
    return namespace["build"]  # type: ignore[no-any-return]


def _tuple(value: Any) -> Any:
    return tuple(value) if type(value) is list else value


_shared = shared


_job_of = _job_builder()
