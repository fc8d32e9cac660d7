"""jsonwire: the one conversion of replies to JSON, which shows what JSON cannot hold and never
raises, and JSON requests that MessagePack cannot carry turned into clear errors."""

from __future__ import annotations

import json

import msgspec

from broker.engine.state.model import Job
from broker.engine.state.wireform import wire_job, wire_jobs
from broker.server.jsonwire import UNSHOWABLE, command_from, reply_json
from protocol import Rejected


def shown(raw: bytes) -> object:
    return json.loads(reply_json({"ok": True, "data": msgspec.Raw(raw)}))["data"]


def test_extension_types_and_binary() -> None:
    assert shown(b"\x92\xd4\x07\x01\xd4\x00\x00") == [{"$ext": 7, "data": "AQ=="}, None]
    assert shown(b"\xc4\x02hi") == "aGk="


def test_map_keys_json_cannot_hold_become_their_json_text() -> None:
    assert shown(b"\x83\x92\x01\x02\x01\xc0\x02\xd4\x05\x01\x03") == {
        "[1,2]": 1,
        "null": 2,
        '{"$ext":5,"data":"AQ=="}': 3,
    }


def test_non_finite_floats_are_null_and_unreadable_msgpack_is_base64() -> None:
    assert shown(b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00") is None  # NaN
    assert shown(b"\xd4\xff\x01") == {"$msgpack": "1P8B"}  # a timestamp of the wrong size


def test_it_never_raises() -> None:
    assert reply_json({"ok": True, "x": object()}) == UNSHOWABLE


def test_numbers_beyond_64_bits_are_a_clear_error() -> None:
    assert command_from({"cmd": "PUSH", "queue": "q", "data": 10**30, "reqId": 1}) == Rejected(
        1, "Numbers must fit in 64 bits"
    )
    assert command_from([1]) == Rejected(None, "Invalid command")


def test_a_pulled_job_with_unreadable_data_shows_every_other_field() -> None:
    job = Job("a", "q", "n", b"\xd4\xff\x01", 1.5, 2, 3.25, timeline=("waiting", 1, None))
    as_struct = json.loads(reply_json({"ok": True, "job": job.to_wire(), "jobs": [job.to_wire()]}))
    pulled = json.loads(reply_json({"ok": True, "job": wire_job(job), "jobs": wire_jobs([job])}))
    assert pulled == as_struct
    assert pulled["job"]["data"] == {"$msgpack": "1P8B"}
    assert pulled["jobs"][0]["id"] == "a"


def test_pulled_lists_of_any_length_show_every_readable_field() -> None:
    # 15 jobs is the longest list with a one-byte header, 16 the shortest with a longer one.
    for count in (1, 15, 16):
        jobs = [Job(str(n), "q", "n", b"\xd4\xff\x01", 1, 2, 3) for n in range(count)]
        pulled = json.loads(reply_json({"ok": True, "jobs": wire_jobs(jobs)}))["jobs"]
        assert [job["id"] for job in pulled] == [str(n) for n in range(count)]
        assert {job["data"]["$msgpack"] for job in pulled} == {"1P8B"}


def test_an_unreadable_list_that_is_no_pulled_job_is_shown_whole() -> None:
    result = msgspec.Raw(b"\x91\xd4\xff\x01")  # a list holding a timestamp of the wrong size
    assert json.loads(reply_json({"ok": True, "result": result}))["result"] == {
        "$msgpack": "kdT/AQ=="
    }
