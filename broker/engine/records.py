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

import attrs
import msgspec

from store import JobRow

from .model import Job

FORMAT = 1
TRANSIENT = frozenset({"ready_seq", "timer_token", "holder", "activation", "retained_seq"})
PERSISTED = tuple(f.name for f in attrs.fields(Job) if f.name not in TRANSIENT)


def _body_builder() -> Callable[[Job], tuple[Any, ...]]:
    """A function returning a job's stored body as a tuple, compiled once from `PERSISTED`.

    Plain attribute loads in one generated function are specialised by the interpreter: measured
    1.6 us a row against 2.4 us for `operator.attrgetter` over the same 59 fields (the encoding
    of every changed job is on the commit path). The names come from the Job class itself.
    """
    fields = ", ".join(f"job.{name}" for name in PERSISTED)
    source = f"def body(job):\n    return ({FORMAT}, job.holder is not None, {fields})\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<trioq job row>", "exec"), namespace)
    return namespace["body"]  # type: ignore[no-any-return]


_body = _body_builder()
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[Any]).decode


def job_to_row(job: Job) -> JobRow:
    """The row that stores `job` as it is now."""
    return JobRow(job.id, job.queue, job.state, _encode(_body(job)))


def job_from_row(row: JobRow) -> tuple[Job, bool]:
    """The Job a row stores, and whether it was held by a connection when written."""
    body = _decode(row.body)
    if body[0] != FORMAT:
        raise ValueError(f"job {row.id}: unknown row format {body[0]}")
    values = dict(zip(PERSISTED, body[2:], strict=False))
    return Job(**values), bool(body[1])
