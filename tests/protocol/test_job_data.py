"""A job's data at its edges: exactly 10 MiB encoded is accepted, one byte more is not, and data
that is not valid MessagePack inside is named; and a refusal keeps the request's id (each pinned
because `make mutation` showed it unpinned)."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol import Rejected, decode_command
from protocol.values import MAX_DATA_BYTES

STR32_HEADER = 5  # MessagePack's header of a string longer than 65,535 bytes


def push(data: Any) -> Any:
    return decode_command(msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": data}))


def test_data_of_exactly_10_mib_is_accepted_and_one_byte_more_is_not() -> None:
    largest = push("x" * (MAX_DATA_BYTES - STR32_HEADER))
    assert not isinstance(largest, Rejected), largest
    too_large = push("x" * (MAX_DATA_BYTES - STR32_HEADER + 1))
    assert isinstance(too_large, Rejected)
    assert too_large.error == "Job data too large (max 10MB)"


def test_data_holding_a_string_that_is_not_utf8_is_refused_by_name() -> None:
    refused = push(msgspec.Raw(b"\xa2\xff\xfe"))  # a 2-byte string of invalid UTF-8
    assert isinstance(refused, Rejected)
    assert refused.error == "data is not valid MessagePack (strings must be UTF-8)"


def test_a_field_of_the_wrong_type_is_refused_under_the_request_s_id() -> None:
    # The client matches the error to its request by reqId (pipelined requests).
    request = {"cmd": "PUSHB", "queue": "q", "jobs": "not a list", "reqId": "r-17"}
    refused = decode_command(msgspec.msgpack.encode(request))
    assert refused == Rejected("r-17", "jobs must be an array")
