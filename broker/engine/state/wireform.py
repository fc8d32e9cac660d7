"""A pulled job's wire form, encoded straight to MessagePack from pre-encoded pieces.

A PULL or PULLB reply shows each job as the 48-key map of `protocol.wire.WireJob`. Building
that Struct from the job and encoding it cost about 22k instructions a job (callgrind), most of
it on keys and option values that are the same for every job. Here the reply's bytes are made
as one flat list encoded once: the keys are pre-encoded `Raw` pieces, the options (with their
keys) are pre-encoded once per `Options` object, and only the values that belong to the job
(ids, times, counters, timeline) are encoded per job. A map header before each job's pieces
makes the concatenation the same bytes `WireJob` encodes to (tests/engine/test_wire.py checks
that, value by value).

Options holding a dict (`repeat`, `backoff_config`) are encoded afresh every time: the engine
updates a repeating job's `repeat` in place (`Options.keeps_its_encoding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from broker.engine.state.model import COUNTED_STATES, TIMELINE_ENTRY, Job, Options
from protocol import encode
from protocol.wire import WireJob

Raw = msgspec.Raw
_encode_into = msgspec.msgpack.Encoder().encode_into  # as protocol's encoder: default settings
_KEYS = WireJob.__struct_fields__
_KEY_COUNT = len(_KEYS)


def _key(name: str) -> bytes:
    return encode(name)


def _map_header(size: int) -> bytes:
    """MessagePack's header of a map of `size` pairs (fixmap, map16: a job has 48)."""
    return bytes([0x80 | size]) if size <= 15 else b"\xde" + size.to_bytes(2, "big")


def _array_header(size: int) -> bytes:
    """MessagePack's header of an array of `size` values."""
    if size <= 15:
        return bytes([0x90 | size])
    if size <= 0xFFFF:
        return b"\xdc" + size.to_bytes(2, "big")
    return b"\xdd" + size.to_bytes(4, "big")


def _pairs(names: Sequence[str], values: Sequence[Any]) -> bytes:
    return b"".join(_key(name) + encode(value) for name, value in zip(names, values, strict=True))


JOB_BYTES = 1024
"""Room reserved per job in a PULLB reply besides its data: a job with default options and a
short timeline takes about 750 bytes (a reply that needs more grows its buffer once or twice)."""
JOB_HEADER = Raw(_map_header(_KEY_COUNT))
# A job's map starts with its header and the key "id", the same for every job.
_HEAD = Raw(bytes(JOB_HEADER) + _key("id"))
_TIMELINE_HEADERS = tuple(Raw(_array_header(size)) for size in range(16))


def _entry_head(state: str, with_error: bool) -> Raw:
    """A timeline entry's map header, its state and the key `timestamp`."""
    header = _map_header(3 if with_error else 2)
    return Raw(header + _key("state") + encode(state) + _key("timestamp"))


_ENTRY = {state: _entry_head(state, False) for state in COUNTED_STATES}
_TWO_ENTRIES = 2 * TIMELINE_ENTRY
_ENTRY_WITH_ERROR = {state: _entry_head(state, True) for state in COUNTED_STATES}


def option_pieces(opts: Options) -> tuple[Raw, Raw, Raw]:
    """The options' three runs of the job map, keys included: `backoff`..`tags` (with the
    constant `childrenCompleted`) then the key `progress`; `repeat` and `durable` then the key
    `lastHeartbeat`; `priority`..`debounceTtl` then the key `timeline`."""
    pieces = opts.wire_pieces
    if pieces is None:
        pieces = _option_pieces(opts)
        if opts.keeps_its_encoding():
            object.__setattr__(opts, "wire_pieces", pieces)
    return pieces


def _option_pieces(opts: Options) -> tuple[Raw, Raw, Raw]:
    first = _pairs(
        ("backoff", "backoffConfig", "dependsOn", "childrenIds", "childrenCompleted", "tags"),
        (opts.backoff, opts.backoff_config, opts.depends_on, opts.children_ids, 0, opts.tags),
    )
    second = _pairs(("repeat", "durable"), (opts.repeat, opts.durable))
    third = _pairs(_KEYS[22:47], opts.wire_tail)
    return (
        Raw(first + _key("progress")),
        Raw(second + _key("lastHeartbeat")),
        Raw(third + _key("timeline")),
    )


def _add_job(parts: list[Any], job: Job) -> None:
    """Append the pieces of one job's map to `parts`."""
    opts = job.opts
    first, second, third = opts.wire_pieces or option_pieces(opts)
    # A key is a plain str here: msgspec encodes a str faster than it copies a small Raw.
    parts += (
        _HEAD, job.id, "queue", job.queue, "name", job.name, "data", Raw(job.data),
        "createdAt", job.created_at, "runAt", job.run_at, "startedAt", job.started_at,
        "completedAt", job.completed_at, "attempts", job.attempts, first, job.progress,
        "progressMessage", job.progress_message, "stacktrace", job.stacktrace, second,
        job.last_heartbeat, "stallCount", job.stall_count, third,
    )  # fmt: skip
    timeline = job.timeline
    if len(timeline) == _TWO_ENTRIES and timeline[2] is None and timeline[5] is None:
        # A pulled job's usual timeline (ready, then active), without the loop below.
        parts += (_TIMELINE_HEADERS[2], _ENTRY[timeline[0]], timeline[1],
                  _ENTRY[timeline[3]], timeline[4])  # fmt: skip
        return
    entries = len(timeline) // TIMELINE_ENTRY
    parts.append(_TIMELINE_HEADERS[entries] if entries < 16 else Raw(_array_header(entries)))
    values = iter(timeline)
    # No strict=: its keyword is parsed on every call (~1.5k instructions a job), and a
    # timeline's length is a multiple of TIMELINE_ENTRY by construction (model.py).
    for state, timestamp, error in zip(values, values, values):  # noqa: B905
        if error is None:
            parts += (_ENTRY.get(state) or _entry_head(state, False), timestamp)
        else:
            head = _ENTRY_WITH_ERROR.get(state) or _entry_head(state, True)
            parts += (head, timestamp, "error", error)


def _encoded(parts: list[Any], size_hint: int = 0) -> Raw:
    """The concatenated encodings of `parts` (their list's own header cut off). `size_hint`:
    bytes to reserve up front, so that a long reply is not copied each time it outgrows its
    buffer (msgspec trims the reserve off without a copy)."""
    buffer = bytearray(size_hint)
    _encode_into(parts, buffer)
    size = len(parts)  # the list's header: 1, 3 or 5 bytes (see _array_header)
    del buffer[: 1 if size <= 15 else 3 if size <= 0xFFFF else 5]  # at the front: no copy
    return Raw(buffer)


def wire_job(job: Job) -> Raw:
    """One job's wire form: the bytes its `to_wire()` encodes to."""
    parts: list[Any] = []
    _add_job(parts, job)
    return _encoded(parts)


def wire_jobs(jobs: Sequence[Job]) -> Raw:
    """A list of jobs' wire forms: the bytes `[job.to_wire() for job in jobs]` encodes to."""
    parts: list[Any] = [Raw(_array_header(len(jobs)))]
    size = 0
    for job in jobs:
        _add_job(parts, job)
        size += len(job.data)
    return _encoded(parts, size + JOB_BYTES * len(jobs))


_JOB_PREFIX = bytes(_HEAD)
_read_job = msgspec.msgpack.Decoder(dict[str, Raw]).decode
_read_list = msgspec.msgpack.Decoder(list[Raw]).decode


def wire_parts(raw: Raw) -> dict[str, Raw] | list[Raw] | None:
    """A `wire_job` (or `wire_jobs`) result split one level into raw parts: the job's values
    (or the jobs), so a reader that fails on one value (the job's data) can still read the
    others; None for bytes that are not a pulled job's wire form."""
    encoded = bytes(raw)
    if encoded.startswith(_JOB_PREFIX):
        return _read_job(encoded)
    try:
        parts = _read_list(encoded)
    except msgspec.DecodeError:
        return None  # no list
    # A pulled list holds only jobs (an empty one is always readable: it never gets here).
    return parts if all(bytes(part).startswith(_JOB_PREFIX) for part in parts) else None
