"""decode_command: one struct per command, msgpackr compatibility, and the rejection texts."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import protocol
from protocol import FrameDecoder, Rejected, append_frame, decode_command
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
