"""ACKB's lists checked in one pass when they are what they should be, and item by item
otherwise: the values a handler reads, and every error's exact text, whichever way they go."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol import Rejected, commands, decode_command

encode = msgspec.msgpack.encode
UNDEFINED = b"\xd4\x00\x00"  # msgpackr's JS `undefined` (fixext 1, type 0)
NOT_UTF8 = b"\xa1\xff"  # a one-byte string that is not UTF-8
UTF8_ERROR = "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
BAD_RESULT = "results[] is not valid MessagePack (strings must be UTF-8)"


def frame(ids: bytes, results: bytes | None = None, tokens: bytes | None = None) -> bytes:
    """An ACKB frame whose lists are the MessagePack given (which may be malformed)."""
    fields = {"ids": ids, "results": results, "tokens": tokens}
    sent = [(name, value) for name, value in fields.items() if value is not None]
    body = encode("cmd") + encode("ACKB") + encode("reqId") + encode("r")
    for name, value in sent:
        body += encode(name) + value
    return bytes([0x80 | (len(sent) + 2)]) + body


def decoded(payload: bytes) -> Any:
    """The command, or the error text it was rejected with."""
    command = decode_command(payload)
    return command.error if isinstance(command, Rejected) else command


def test_lists_as_sent_are_read_as_sent() -> None:
    command = decoded(
        frame(encode(["a", "b"]), encode([None, {"x": 1}]), encode(["t", None]))
    )
    assert command.ids == ["a", "b"]
    assert command.results == [b"\xc0", encode({"x": 1})]
    assert command.tokens == ["t", None]


def test_an_empty_token_and_an_undefined_result_are_none() -> None:
    command = decoded(frame(encode(["a", "b"]), b"\x92" + UNDEFINED + b"\x01", encode(["", "t"])))
    assert command.results == [None, b"\x01"]
    assert command.tokens == [None, "t"]


@pytest.mark.parametrize(
    ("ids", "results", "tokens", "error"),
    [
        pytest.param(encode(["a", 1]), None, None, "ids must be an array of strings", id="id-int"),
        pytest.param(b"\x91" + UNDEFINED, None, None, "ids must be an array of strings", id="ext"),
        pytest.param(b"\x92\x01" + NOT_UTF8, None, None, UTF8_ERROR, id="id-int-then-not-utf8"),
        pytest.param(b"\x92\xa1a" + NOT_UTF8, None, None, UTF8_ERROR, id="id-not-utf8"),
        pytest.param(encode(["a"]), None, b"\x91" + NOT_UTF8, UTF8_ERROR, id="token-not-utf8"),
        pytest.param(
            encode(["a", "b"]), None, encode(["t", 5]), "tokens[] must be a string", id="token-int"
        ),
        pytest.param(
            encode(["a", "b"]), None, encode("tt"),
            "ACKB tokens length must match ids length", id="tokens-a-string",
        ),
        pytest.param(
            encode(["a", "b"]), None, encode([5]),
            "ACKB tokens length must match ids length", id="tokens-short-and-bad",
        ),
        pytest.param(
            encode(["a", "b"]), b"\x92\x01" + NOT_UTF8, None, BAD_RESULT, id="result-not-utf8"
        ),
        pytest.param(encode(["a"]), b"\x91\xd4\xff\x00", None, BAD_RESULT, id="result-bad-ext"),
        pytest.param(
            encode(["a"]), b"\x91" + NOT_UTF8, encode([3]), BAD_RESULT, id="results-first"
        ),
    ],
)  # fmt: skip
def test_a_bad_list_is_refused_with_its_text(
    ids: bytes, results: bytes | None, tokens: bytes | None, error: str
) -> None:
    assert decoded(frame(ids, results, tokens)) == error


def test_results_nested_near_the_limit_get_the_item_by_item_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # How deep a result may nest depends on how deep the check runs (and on whether the calls
    # on the way are specialised yet: each path runs once first): the one-pass check must
    # never accept what the item-by-item check (the rule) refuses, nor refuse what it accepts.
    ids = encode(["a"])
    frames = [frame(ids, b"\x91" + b"\x91" * depth + b"\x01") for depth in range(900, 1000)]
    with monkeypatch.context() as patched:
        patched.setattr(commands, "_decodes", lambda raw: False)  # item by item only
        for payload in frames:
            decoded(payload)
    verdicts = [decoded(payload) for payload in frames]
    monkeypatch.setattr(commands, "_decodes", lambda raw: False)
    expected = [decoded(payload) for payload in frames]
    assert [summary(v) for v in verdicts] == [summary(v) for v in expected]
    assert {summary(v) for v in expected} >= {"accepted", BAD_RESULT}  # both sides of the limit


def summary(verdict: Any) -> Any:
    """A decoded ACKB as `accepted` (its results checked: each item as sent), else its error."""
    if isinstance(verdict, str):
        return verdict
    assert verdict.results[0].endswith(b"\x01")
    return "accepted"
