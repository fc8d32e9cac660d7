"""Jobs to store rows and back: what survives a restart.

Every field of a Job is persisted except the engine's in-memory bookkeeping (heap position,
timer generation, the connection that holds it), which is rebuilt on load; instead of the
holding connection a row records whether the job was connection-bound (`held`). The body is a
MessagePack map keyed by field name, so a later version can add fields with defaults.
"""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from store import JobRow

from .model import Job

TRANSIENT = frozenset({"ready_seq", "timer_token", "holder"})
PERSISTED = tuple(f.name for f in attrs.fields(Job) if f.name not in TRANSIENT)
_KNOWN = frozenset(PERSISTED)

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(dict[str, Any]).decode


def job_to_row(job: Job) -> JobRow:
    """The row that stores `job` as it is now."""
    body = {name: getattr(job, name) for name in PERSISTED}
    body["held"] = job.holder is not None
    return JobRow(job.id, job.queue, job.state, _encode(body))


def job_from_row(row: JobRow) -> tuple[Job, bool]:
    """The Job a row stores, and whether it was held by a connection when written."""
    body = _decode(row.body)
    held = bool(body.pop("held", False))
    fields = {name: value for name, value in body.items() if name in _KNOWN}
    return Job(**fields), held
