"""Command fields hold their declared types once decoded (protocol/fields.py): a job that sets
no option is recognised without its values being compared loosely, and the fields only the
checks set cannot be set by a client."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol import decode_command
from protocol.codec import Rejected


def decode(message: dict[str, Any]) -> Any:
    return decode_command(msgspec.msgpack.encode(message))


@pytest.mark.parametrize(
    ("field", "sent", "kept"),
    [("priority", 0.0, 0), ("delay", 0.0, 0), ("maxAttempts", 3.0, 3), ("backoff", 1000.0, 1000),
     ("stackTraceLimit", 10.0, 10)],
)  # fmt: skip
def test_a_default_sent_as_a_float_is_normalised_like_any_number(
    field: str, sent: float, kept: int
) -> None:
    push = decode({"cmd": "PUSH", "queue": "q", "data": 1, field: sent})
    assert getattr(push, field) == kept and type(getattr(push, field)) is int


@pytest.mark.parametrize("field", ["priority", "delay"])
def test_false_is_no_zero(field: str) -> None:
    rejected = decode({"cmd": "PUSH", "queue": "q", "data": 1, field: False})
    assert isinstance(rejected, Rejected) and rejected.error == f"{field} must be a number"


def test_a_client_cannot_set_what_only_the_checks_set() -> None:
    push = decode(
        {"cmd": "PUSH", "queue": "q", "data": 1, "optionsGiven": True, "backoffConfig": {"a": 1}}
    )
    assert (push.optionsGiven, push.backoffConfig) == (False, None)
    batch = decode({"cmd": "PUSHB", "queue": "q", "jobs": [{"data": 1}], "@checked/jobs": 5})
    assert [job.data for job in batch.jobs] == [msgspec.msgpack.encode(1)]
    acks = decode({"cmd": "ACKB", "ids": ["a"], "@checked/tokens": ["t"]})
    assert (acks.ids, acks.tokens) == (["a"], None)



def checked_values(command: Any) -> Any:
    """The command as the checks left it, but for `optionsGiven` (which path was taken)."""
    return msgspec.structs.replace(command, optionsGiven=None)


@pytest.mark.parametrize(
    "sent",
    [{"@checked/optionsGiven": True}, {"@checked/backoffConfig": {"type": "fixed", "delay": "x"}},
     {"@checked/optionsGiven": True, "@checked/backoffConfig": {"delay": None}}],
)  # fmt: skip
def test_a_plain_job_cannot_carry_what_only_the_checks_set_under_their_wire_names(
    sent: dict[str, Any],
) -> None:
    plain = decode({"cmd": "PUSH", "queue": "q", "data": 1})
    push = decode({"cmd": "PUSH", "queue": "q", "data": 1, **sent})
    assert push.backoffConfig is None
    assert checked_values(push) == checked_values(plain)
    batch = decode({"cmd": "PUSHB", "queue": "q", "jobs": [{"data": 1, **sent}]})
    plain_batch = decode({"cmd": "PUSHB", "queue": "q", "jobs": [{"data": 1}]})
    assert [job.backoffConfig for job in batch.jobs] == [None]
    assert [checked_values(job) for job in batch.jobs] == [
        checked_values(job) for job in plain_batch.jobs
    ]
