"""decode_command: one struct per command, msgpackr compatibility, and the rejection texts, worded
as the reference (JavaScript) words them, with the frame-size error a caller may recover from."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

import protocol
from protocol import FrameDecoder, Rejected, append_frame, decode_command
from protocol.codec import decode_any, readable_validation_error
from protocol.commands import (
    Ack,
    AckBatch,
    Auth,
    Count,
    Fail,
    GetJob,
    GetJobCounts,
    GetResult,
    GetState,
    Heartbeat,
    Hello,
    JobHeartbeat,
    JobHeartbeatB,
    ListWorkers,
    Ping,
    Pull,
    PullBatch,
    Push,
    PushBatch,
    RegisterWorker,
    UnregisterWorker,
)
from protocol.errors import FrameTooLarge

encode = msgspec.msgpack.encode
UNDEFINED = msgspec.msgpack.Ext(0, b"\x00")  # what msgpackr sends for a JS `undefined`


def decode(request: Any) -> Any:
    return decode_command(encode(request))


def accepted(request: Any) -> Any:
    result = decode(request)
    assert not isinstance(result, Rejected), result
    return result


def push(**fields: Any) -> dict[str, Any]:
    return {"cmd": "PUSH", "queue": "q", "name": "job", "data": {"k": 1}, **fields}


# --- one struct per command -------------------------------------------------------------------

COMMANDS = [
    ({"cmd": "Hello", "protocolVersion": 3, "capabilities": ["pipelining"]}, Hello),
    ({"cmd": "Auth", "token": "secret"}, Auth),
    ({"cmd": "Ping"}, Ping),
    (push(), Push),
    ({"cmd": "PUSHB", "queue": "q", "jobs": [{"name": "a", "data": 1}]}, PushBatch),
    ({"cmd": "PULL", "queue": "q"}, Pull),
    ({"cmd": "PULLB", "queue": "q", "count": 2}, PullBatch),
    ({"cmd": "ACK", "id": "j1"}, Ack),
    ({"cmd": "ACKB", "ids": ["j1", "j2"]}, AckBatch),
    ({"cmd": "FAIL", "id": "j1"}, Fail),
    ({"cmd": "GetJob", "id": "j1"}, GetJob),
    ({"cmd": "GetState", "id": "j1"}, GetState),
    ({"cmd": "GetResult", "id": "j1"}, GetResult),
    ({"cmd": "GetJobCounts", "queue": "q"}, GetJobCounts),
    ({"cmd": "Count", "queue": "q"}, Count),
    ({"cmd": "JobHeartbeat", "id": "j1", "token": "t"}, JobHeartbeat),
    ({"cmd": "JobHeartbeatB", "ids": ["j1"], "tokens": ["t"]}, JobHeartbeatB),
    ({"cmd": "RegisterWorker", "name": "w", "queues": ["q"]}, RegisterWorker),
    ({"cmd": "UnregisterWorker", "workerId": "w1"}, UnregisterWorker),
    ({"cmd": "Heartbeat", "id": "w1"}, Heartbeat),
    ({"cmd": "ListWorkers"}, ListWorkers),
]


@pytest.mark.parametrize(("request_", "kind"), COMMANDS, ids=lambda v: getattr(v, "__name__", ""))
def test_each_command_decodes_to_its_struct(request_: dict[str, Any], kind: type) -> None:
    command = accepted({**request_, "reqId": "r7"})
    assert type(command) is kind
    assert command.reqId == "r7"


@pytest.mark.parametrize("req_id", ["42", 42, 4.5, None])
def test_req_id_of_any_type_is_kept(req_id: Any) -> None:
    assert accepted({"cmd": "Ping", "reqId": req_id}).reqId == req_id


def test_missing_req_id_is_none() -> None:
    assert accepted({"cmd": "Ping"}).reqId is None


def test_push_fields() -> None:
    command = accepted(push(priority=5, delay=100, jobId="custom-1", tags=["t"], lifo=True))
    assert command.queue == "q"
    assert command.name == "job"
    assert command.data == encode({"k": 1})  # untouched MessagePack bytes
    assert command.priority == 5
    assert command.delay == 100
    assert command.jobId == "custom-1"
    assert command.tags == ["t"]
    assert command.lifo is True


def test_push_defaults() -> None:
    command = accepted(push())
    assert command.priority == 0
    assert command.delay == 0
    assert command.maxAttempts == 3
    assert command.backoff == 1000
    assert command.backoffConfig is None
    assert command.ttl is None
    assert command.timeout is None
    assert command.jobId is None
    # Absent lists and flags may stay None (read as empty / false).
    assert command.dependsOn in (None, [])
    assert command.tags in (None, [])
    assert command.childrenIds in (None, [])
    assert command.lifo in (None, False)
    assert command.removeOnComplete in (None, False)
    assert command.removeOnFail in (None, False)
    assert command.durable in (None, False)
    assert command.repeat is None
    assert command.stackTraceLimit == 10
    assert command.dedup == {"ttl": None, "extend": False, "replace": False}


def test_push_ignores_unknown_fields() -> None:
    assert accepted(push(somethingNew=1)).name == "job"


def test_pushb_items() -> None:
    command = accepted(
        {
            "cmd": "PUSHB",
            "queue": "q",
            "jobs": [{"name": "a", "data": 1, "customId": "c1"}, {"name": "b", "data": [2]}],
        }
    )
    assert command.queue == "q"
    assert [job.name for job in command.jobs] == ["a", "b"]
    assert [job.data for job in command.jobs] == [encode(1), encode([2])]
    assert [job.customId for job in command.jobs] == ["c1", None]


def test_pull_defaults_and_fields() -> None:
    command = accepted({"cmd": "PULL", "queue": "q"})
    assert (command.timeout, command.owner, command.lockTtl, command.detach) == (
        0,
        None,
        30000,
        False,
    )
    command = accepted(
        {"cmd": "PULL", "queue": "q", "timeout": 500, "owner": "w", "lockTtl": 1000, "detach": True}
    )
    assert (command.timeout, command.owner, command.lockTtl, command.detach) == (
        500,
        "w",
        1000,
        True,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"owner": True},
        {"owner": True, "lockTtl": True},
        {"owner": True, "lockTtl": True, "detach": True},
        {"owner": True, "lockTtl": True, "detach": True, "group": True},
    ],
)
def test_a_pull_refuses_an_owner_that_is_not_a_string_whatever_else_it_holds(
    fields: dict[str, Any],
) -> None:
    # The plain-PULL shortcut applies only when all four lease and group fields are absent.
    result = decode({"cmd": "PULL", "queue": "q", **fields})
    assert isinstance(result, Rejected) and result.error == "owner must be a string"


def test_pullb_fields() -> None:
    command = accepted({"cmd": "PULLB", "queue": "q", "count": 10, "timeout": 50, "owner": "w"})
    assert (command.count, command.timeout, command.owner, command.lockTtl) == (10, 50, "w", 30000)


def test_ack_fields() -> None:
    command = accepted(
        {"cmd": "ACK", "id": "j1", "result": {"r": [1, 2]}, "token": "t", "removeOnComplete": True}
    )
    assert command.id == "j1"
    assert command.result == encode({"r": [1, 2]})
    assert command.token == "t"
    assert command.removeOnComplete is True
    assert accepted({"cmd": "ACK", "id": "j1"}).result is None
    assert accepted({"cmd": "ACK", "id": "j1", "result": None}).result == b"\xc0"


def test_ackb_fields() -> None:
    command = accepted(
        {"cmd": "ACKB", "ids": ["a", "b"], "results": [1, "x"], "tokens": ["t", "u"]}
    )
    assert command.ids == ["a", "b"]
    assert command.results == [encode(1), encode("x")]
    assert command.tokens == ["t", "u"]
    bare = accepted({"cmd": "ACKB", "ids": ["a"]})
    assert (bare.results, bare.tokens) == (None, None)


def test_fail_fields() -> None:
    command = accepted(
        {
            "cmd": "FAIL",
            "id": "j1",
            "error": "boom",
            "stack": ["at f", "at g"],
            "unrecoverable": True,
            "token": "t",
            "removeOnFail": True,
        }
    )
    assert command.id == "j1"
    assert command.error == "boom"
    assert command.stack == ["at f", "at g"]
    assert command.unrecoverable is True
    assert command.token == "t"
    assert command.removeOnFail is True
    bare = accepted({"cmd": "FAIL", "id": "j1"})
    assert (bare.error, bare.stack, bare.unrecoverable, bare.removeOnFail) == (
        None,
        None,
        False,
        False,
    )


# --- msgpackr's JS undefined (fixext1, type 0) ---------------------------------------------------


def test_undefined_is_fixext1_type_0() -> None:
    assert encode(UNDEFINED) == b"\xd4\x00\x00"


def test_undefined_option_leaves_the_default() -> None:
    command = accepted(
        push(priority=UNDEFINED, delay=UNDEFINED, maxAttempts=UNDEFINED, timeout=UNDEFINED)
    )
    assert (command.priority, command.delay, command.maxAttempts, command.timeout) == (
        0,
        0,
        3,
        None,
    )


def test_undefined_req_id_is_absent() -> None:
    assert accepted({"cmd": "Ping", "reqId": UNDEFINED}).reqId is None


def test_undefined_data_is_missing_data() -> None:
    assert decode(push(data=UNDEFINED)) == Rejected(None, "data is required")


def test_undefined_data_written_as_raw_bytes_is_missing_data() -> None:
    payload = encode({"cmd": "PUSH", "queue": "q", "name": "n", "reqId": "r1"})
    payload = b"\x85" + payload[1:] + b"\xa4data\xd4\x00\x00"  # 4 keys -> 5 keys
    assert decode_command(payload) == Rejected("r1", "data is required")


def test_undefined_name_takes_the_name_from_data() -> None:
    command = accepted(push(name=UNDEFINED, data={"name": "legacy", "x": 1}))
    assert command.name == "legacy"
    assert command.data == encode({"x": 1})


def test_undefined_inside_nested_options_is_absent() -> None:
    command = accepted(push(backoff={"type": "fixed", "delay": UNDEFINED, "maxDelay": UNDEFINED}))
    assert command.backoff == 1000
    assert command.backoffConfig == {"type": "fixed", "delay": 1000}


def test_undefined_lock_ttl_is_the_default() -> None:
    assert accepted({"cmd": "PULL", "queue": "q", "lockTtl": UNDEFINED}).lockTtl == 30000


def test_undefined_result_is_no_result() -> None:
    assert accepted({"cmd": "ACK", "id": "j", "result": UNDEFINED}).result is None
    batch = accepted({"cmd": "ACKB", "ids": ["a", "b"], "results": [1, UNDEFINED]})
    assert batch.results == [encode(1), None]


def test_undefined_options_in_pushb_items_are_absent() -> None:
    item = {
        "name": "a",
        "data": 1,
        "priority": UNDEFINED,
        "delay": UNDEFINED,
        "customId": UNDEFINED,
    }
    command = accepted({"cmd": "PUSHB", "queue": "q", "jobs": [item]})
    job = command.jobs[0]
    assert (job.priority, job.delay, job.customId) == (0, 0, None)


def test_undefined_data_in_pushb_item_is_missing_data() -> None:
    request = {"cmd": "PUSHB", "queue": "q", "jobs": [{"name": "a", "data": UNDEFINED}]}
    assert decode(request) == Rejected(None, "jobs[0]: data is required")


def test_undefined_inside_data_is_kept_verbatim() -> None:
    command = accepted(push(data={"a": UNDEFINED}))
    assert command.data == b"\x81\xa1a\xd4\x00\x00"


# --- integral floats (msgpackr sends integers beyond 32 bits as float64) ------------------------


def test_integral_float_count() -> None:
    command = accepted({"cmd": "PULLB", "queue": "q", "count": 5.0})
    assert command.count == 5
    assert type(command.count) is int


def test_integral_floats_in_push() -> None:
    command = accepted(push(maxAttempts=5.0, delay=1.7e12, timestamp=1.7e12, groupMaxSize=4.0))
    assert command.maxAttempts == 5
    assert type(command.maxAttempts) is int
    assert command.delay == 1_700_000_000_000
    assert command.timestamp == 1_700_000_000_000
    assert command.groupMaxSize == 4


def test_integral_float_group_priority() -> None:
    command = accepted(push(groupId="g", priority=7.0))
    assert command.priority == 7


def test_integral_float_pull_timeout() -> None:
    assert accepted({"cmd": "PULL", "queue": "q", "timeout": 1000.0}).timeout == 1000


# --- rejections --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1\xc1\xc1garbage",  # 0xc1 is never used in MessagePack
        b'{"cmd":"Ping"}',  # JSON text
        b"\x82\xa3cmd",  # truncated map
        b"",  # empty frame
        encode({"cmd": "Ping"}) + b"\x00",  # trailing bytes after the value
    ],
    ids=["never-used-byte", "json", "truncated", "empty", "trailing"],
)
def test_not_messagepack_is_invalid_command_format(payload: bytes) -> None:
    assert decode_command(payload) == Rejected(None, "Invalid command format")


@pytest.mark.parametrize("value", [7, [1, 2], "PUSH", None, True, [{"cmd": "Ping"}]])
def test_non_map_is_invalid_command(value: Any) -> None:
    assert decode(value) == Rejected(None, "Invalid command")


@pytest.mark.parametrize("req_id", ["r210", 210])
def test_map_without_cmd_is_invalid_command(req_id: Any) -> None:
    assert decode({"queue": "x", "reqId": req_id}) == Rejected(req_id, "Invalid command")


@pytest.mark.parametrize("cmd", ["", None, UNDEFINED, 0, False])
def test_falsy_cmd_is_invalid_command(cmd: Any) -> None:
    assert decode({"cmd": cmd, "reqId": "r"}) == Rejected("r", "Invalid command")


def test_empty_map_is_invalid_command() -> None:
    assert decode({}) == Rejected(None, "Invalid command")


@pytest.mark.parametrize("cmd", ["Frobnicate", "push", "pushb", "Push", "ping", "PING", "ack"])
def test_unknown_command(cmd: str) -> None:
    assert decode({"cmd": cmd, "queue": "x", "data": {}, "reqId": "r1"}) == Rejected(
        "r1", f"Unknown command: {cmd}"
    )


def test_unknown_command_non_string_cmd() -> None:
    assert decode({"cmd": 5, "reqId": 3}) == Rejected(3, "Unknown command: 5")


@pytest.mark.parametrize("req_id", ["r9", 9, -1, 2.5, ["a"], {"k": "v"}])
def test_req_id_of_any_type_kept_on_rejections(req_id: Any) -> None:
    assert decode({"cmd": "nope", "reqId": req_id}) == Rejected(req_id, "Unknown command: nope")
    assert decode({"reqId": req_id}) == Rejected(req_id, "Invalid command")
    assert decode(push(queue="", reqId=req_id)) == Rejected(req_id, "Queue name is required")


def test_req_id_kept_on_pushb_item_rejection() -> None:
    request = {
        "cmd": "PUSHB",
        "queue": "q",
        "reqId": 77,
        "jobs": [{"name": "a", "data": 1, "ttl": -1}],
    }
    assert decode(request) == Rejected(77, "jobs[0]: ttl must be at least 0")


def test_undefined_req_id_on_rejection_is_none() -> None:
    assert decode({"cmd": "nope", "reqId": UNDEFINED}) == Rejected(None, "Unknown command: nope")


def test_rejected_is_a_value() -> None:
    rejected = Rejected("r", "Invalid command")
    assert (rejected.req_id, rejected.error) == ("r", "Invalid command")
    assert rejected == Rejected("r", "Invalid command")
    assert rejected != Rejected("s", "Invalid command")


def test_decode_command_never_raises_on_random_bytes() -> None:
    for size in range(0, 40):
        for seed in range(8):
            payload = bytes((seed * 37 + i * 101) % 256 for i in range(size))
            assert isinstance(decode_command(payload), Rejected | msgspec.Struct)


# --- append_frame --------------------------------------------------------------------------------


def test_append_frame_to_empty_buffer() -> None:
    reply = {"ok": True, "id": "job-1", "reqId": "r1"}
    buffer = bytearray()
    append_frame(buffer, reply)
    body = encode(reply)
    assert bytes(buffer) == len(body).to_bytes(4, "big") + body


def test_append_frame_keeps_existing_bytes_and_chains() -> None:
    buffer = bytearray(b"prefix")
    first = {"ok": False, "error": "Invalid command", "reqId": None}
    second = {"ok": True, "jobs": [{"id": "a", "data": list(range(100))}]}
    append_frame(buffer, first)
    append_frame(buffer, second)
    assert buffer[:6] == b"prefix"
    payloads = FrameDecoder().feed(bytes(buffer[6:]))
    assert [msgspec.msgpack.decode(payload) for payload in payloads] == [first, second]


def test_append_frame_large_reply_length() -> None:
    reply = {"ok": True, "data": "x" * 70_000}
    buffer = bytearray()
    append_frame(buffer, reply)
    assert int.from_bytes(buffer[:4], "big") == len(buffer) - 4 == len(encode(reply))


def test_append_frame_matches_frame_of_encode() -> None:
    reply = {"ok": True, "count": 3}
    buffer = bytearray()
    append_frame(buffer, reply)
    assert bytes(buffer) == protocol.frame(protocol.encode(reply))


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
