"""The codec's error wording at its edges, as the reference (JavaScript) words it, and the
frame-size error a caller may recover from (each case pinned because `make mutation` showed it
unpinned)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from protocol import decode_command
from protocol.codec import Rejected, decode_any, readable_validation_error
from protocol.errors import FrameTooLarge


def rejection(message: dict[str, Any]) -> Rejected:
    result = decode_command(msgspec.msgpack.encode(message))
    assert isinstance(result, Rejected), result
    return result


@pytest.mark.parametrize(
    ("cmd", "error"),
    [
        (math.inf, "Unknown command: Infinity"),
        (-math.inf, "Unknown command: -Infinity"),
        (math.nan, "Invalid command"),  # NaN is falsy in JavaScript: `if (!command.cmd)`
        (-2.5, "Unknown command: -2.5"),
        (2.0, "Unknown command: 2"),  # a whole float prints without a decimal point
        (2**40, "Unknown command: 1099511627776"),
    ],
)
def test_a_numeric_cmd_is_named_as_javascript_prints_it(cmd: Any, error: str) -> None:
    assert rejection({"cmd": cmd, "reqId": "r"}) == Rejected("r", error)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Expected `array | null`, got `int` - at `$.jobs`", "jobs must be an array"),
        ("Expected `object`, got `str` - at `$.jobs[2]`", "jobs[2] must be an object"),
        ("Expected `str | bool`, got `int` - at `$.a.b`", "a.b must be a string or a boolean"),
        ("Expected `int | null`, got `str` - at `$.n`", "n must be int"),
        ("Object missing required field `id`", "Object missing required field `id`"),
    ],
)
def test_a_type_error_reads_as_a_rule_on_the_field(text: str, words: str) -> None:
    assert readable_validation_error(text) == words


def test_a_pushf_node_that_is_not_a_map_is_named_by_index() -> None:
    error = rejection({"cmd": "PUSHF", "jobs": [{"id": "a", "queue": "q", "input": {}}, 5]}).error
    assert error == "jobs[1] must be an object"


def test_frame_too_large_names_both_sizes_and_holds_nothing_by_default() -> None:
    error = FrameTooLarge(70_000_000, 67_108_864)
    assert str(error) == "Frame too large: 70000000 bytes exceeds maximum 67108864"
    assert (error.size, error.limit, error.complete, error.rest) == (
        70_000_000, 67_108_864, [], b"",
    )  # fmt: skip


TOO_LONG = "reqId too long (max 256 characters)"


def test_a_req_id_of_256_characters_is_echoed_on_a_rejection_too() -> None:
    assert rejection({"cmd": "nope", "reqId": "r" * 256}) == Rejected(
        "r" * 256, "Unknown command: nope"
    )
    assert rejection({"cmd": "nope", "reqId": "r" * 257}) == Rejected(None, TOO_LONG)


def test_a_req_id_that_is_not_a_string_may_take_256_bytes() -> None:
    # A bin of 254 bytes takes 256 bytes of MessagePack (2 of header); one byte more is too long,
    # on the fast path (a valid command) and on the slow one (a rejection) alike.
    fits, too_long = b"r" * 254, b"r" * 255
    assert decode_command(msgspec.msgpack.encode({"cmd": "Ping", "reqId": fits})).reqId == fits
    assert rejection({"cmd": "nope", "reqId": fits}) == Rejected(fits, "Unknown command: nope")
    for cmd in ("Ping", "nope"):
        assert rejection({"cmd": cmd, "reqId": too_long}) == Rejected(None, TOO_LONG)


def with_bad_utf8(message: dict[str, Any]) -> bytes:
    """`message` encoded, its "MARK" string replaced by two bytes that are not UTF-8."""
    return msgspec.msgpack.encode(message).replace(msgspec.msgpack.encode("MARK"), b"\xa2\xff\xfe")


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "ACK", "id": "j", "result": "MARK"},
         "result is not valid MessagePack (strings must be UTF-8)"),
        ({"cmd": "ACKB", "ids": ["a", "b"], "results": [1, {"k": "MARK"}]},
         "results[] is not valid MessagePack (strings must be UTF-8)"),
    ],
)  # fmt: skip
def test_a_result_workers_could_not_decode_is_refused(message: dict[str, Any], error: str) -> None:
    assert decode_command(with_bad_utf8({**message, "reqId": "r"})) == Rejected("r", error)


def test_fail_keeps_the_stack_lines_that_are_text_and_at_most_100() -> None:
    fail = decode_command(msgspec.msgpack.encode({"cmd": "FAIL", "id": "j", "stack": [1, "at f"]}))
    assert fail.stack == ["at f"]  # as the reference: a line that is not text is left out
    lines = [f"at {n}" for n in range(150)]
    long = decode_command(msgspec.msgpack.encode({"cmd": "FAIL", "id": "j", "stack": lines}))
    assert long.stack == lines[:100]


def test_decode_any_reads_plain_values_and_js_undefined_as_none() -> None:
    undefined = msgspec.msgpack.Ext(0, b"\x00")
    assert decode_any(msgspec.msgpack.encode({"a": [1, "x"], "u": undefined})) == {
        "a": [1, "x"], "u": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        (float(-(2**31)), -(2**31)),  # whole floats within 32 bits become ints, both ends
        (float(2**32 - 1), 2**32 - 1),
        (float(2**32), float(2**32)),  # beyond 32 bits a whole number stays a float
        (2**32, float(2**32)),  # and an int goes out as one (msgpackr reads int64 as BigInt)
        (-(2**31), -(2**31)),  # an int at the 32-bit edge stays one
        (-(2**31) - 1, float(-(2**31) - 1)),
        (2**53 - 1, float(2**53 - 1)),
        (2**60, 2**60),  # past 2**53 a float would lose digits: the int is kept
    ],
)
def test_numbers_keep_the_type_javascript_can_read(sent: Any, kept: Any) -> None:
    push = decode_command(
        msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": 1, "priority": sent})
    )
    assert push.priority == kept and type(push.priority) is type(kept)


def test_a_job_with_options_but_no_dedup_gets_the_empty_dedup_settings() -> None:
    push = decode_command(
        msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": 1, "priority": 2})
    )
    assert push.dedup == {"ttl": None, "extend": False, "replace": False}
