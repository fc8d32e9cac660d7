"""Real sockets against real trioq processes: pipelining, long polls, framing errors, release on
close, auth, graceful shutdown and the command line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.broker import (
    MAX_FRAME,
    BrokerFactory,
    FrameSocket,
    encode,
    encode_frame,
    frame,
    poll_until,
)

Address = tuple[str, int]


def fresh_queue(tag: str) -> str:
    return f"e2e-{tag}-{uuid.uuid4().hex[:12]}"


def push(client: FrameSocket, queue: str, **fields: object) -> str:
    reply = client.call("PUSH", queue=queue, name="job", data=fields.pop("data", {}), **fields)
    assert reply["ok"] is True, reply
    assert isinstance(reply["id"], str)
    return reply["id"]


def state_of(client: FrameSocket, job_id: str) -> str:
    reply = client.call("GetState", id=job_id)
    assert reply["ok"] is True, reply
    return reply["state"]


# -- (a) pipelining --------------------------------------------------------------------------------


def test_hundred_pipelined_pushes_in_one_write_get_one_reply_each(broker_address: Address) -> None:
    queue = fresh_queue("pipe")
    req_ids = [f"push-{i}" for i in range(100)]
    with FrameSocket(broker_address) as client:
        client.send(
            *(
                {"cmd": "PUSH", "reqId": r, "queue": queue, "name": "n", "data": {"i": i}}
                for i, r in enumerate(req_ids)
            )
        )
        replies = [client.receive() for _ in req_ids]
        assert all(reply["ok"] is True for reply in replies), replies
        echoed = [reply["reqId"] for reply in replies]
        assert sorted(echoed) == sorted(req_ids)  # each reqId exactly once
        job_ids = {reply["id"] for reply in replies}
        assert len(job_ids) == 100
        # nothing more is owed: the next reply is the one to this Ping
        assert client.call("Ping")["data"]["pong"] is True
        counts = client.call("GetJobCounts", queue=queue)
        assert counts["counts"]["waiting"] == 100, counts


# -- (b) a parked long poll does not block the connection -----------------------------------------


def test_long_poll_does_not_block_the_connection_and_wakes_on_push(
    broker_address: Address,
) -> None:
    queue = fresh_queue("poll")
    other = fresh_queue("other")
    with FrameSocket(broker_address) as a, FrameSocket(broker_address) as b:
        # The PULL would time out after 30 s with no job; every wait below is far shorter, so
        # a job in its reply shows it was woken by the push (margins hold on a loaded machine).
        a.send({"cmd": "PULL", "reqId": "pull", "queue": queue, "timeout": 30_000})
        a.send({"cmd": "Ping", "reqId": "ping"})
        first = a.receive(timeout=10)
        assert first["reqId"] == "ping" and first["ok"] is True, first
        # an engine command after the PULL is answered too, while the PULL is still parked
        a.send({"cmd": "PUSH", "reqId": "push-other", "queue": other, "name": "n", "data": 1})
        second = a.receive(timeout=10)
        assert second["reqId"] == "push-other" and second["ok"] is True, second

        job_id = push(b, queue, data={"wake": True})
        reply = a.receive(timeout=10)
        assert reply["reqId"] == "pull", reply
        assert reply["ok"] is True
        assert reply["job"] is not None, "the PULL timed out instead of being woken"
        assert reply["job"]["id"] == job_id
        assert reply["job"]["data"] == {"wake": True}


# -- (c) framing errors keep the connection usable ------------------------------------------------


def test_non_msgpack_frame_answers_invalid_command_format(broker_address: Address) -> None:
    with FrameSocket(broker_address) as client:
        client.send_raw(frame(b"\xc1"))  # 0xc1 is never used in MessagePack
        reply = client.receive()
        assert reply == {"ok": False, "error": "Invalid command format"}
        client.send_raw(frame(b"\x92\x01"))  # an array announcing 2 items, holding 1
        assert client.receive() == {"ok": False, "error": "Invalid command format"}
        client.send_raw(frame(b""))  # a zero-length frame is legal framing
        reply = client.receive()
        assert reply["ok"] is False
        assert reply["error"] in {"Invalid command format", "Invalid command"}
        assert "reqId" not in reply
        pong = client.call("Ping")
        assert pong["ok"] is True and pong["data"]["pong"] is True
        queue = fresh_queue("fmt")
        job_id = push(client, queue)
        assert state_of(client, job_id) == "waiting"


def test_not_a_map_and_missing_cmd_answer_invalid_command(broker_address: Address) -> None:
    with FrameSocket(broker_address) as client:
        client.send_raw(encode_frame([1, 2, 3]))
        assert client.receive() == {"ok": False, "error": "Invalid command"}
        client.send_raw(encode_frame({"queue": "q"}))
        assert client.receive() == {"ok": False, "error": "Invalid command"}
        reply = client.call("NoSuchCommand")
        assert reply["ok"] is False and reply["error"] == "Unknown command: NoSuchCommand"
        assert client.call("Ping")["ok"] is True


def test_deeply_nested_frame_is_rejected_and_the_broker_survives(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    nested = b"\x91" * 100_000 + b"\xc0"  # [[[[...nil...]]]], 100k levels
    command = encode({"cmd": "PUSH", "reqId": "deep", "queue": "q", "name": "n"})
    assert command[0] == 0x84  # a fixmap of 4 pairs: add a 5th, `data`, nested as deep
    nested_in_command = b"\x85" + command[1:] + b"\xa4data" + nested
    with FrameSocket(broker.address) as client:
        client.send_raw(frame(nested))
        try:
            reply = client.receive()
        except EOFError:
            pytest.fail(
                f"broker closed the connection; alive={not broker.died()}\n"
                f"{broker.stderr_text()[-3000:]}"
            )
        assert reply["ok"] is False, reply
        assert client.call("Ping")["ok"] is True
        # the same depth inside a command's field
        client.send_raw(frame(nested_in_command))
        reply = client.receive()
        assert reply["ok"] is False, reply
        assert client.call("Ping")["ok"] is True
    assert broker.alive()


BAD_UTF8 = [b"\xa2z\xa4", b"\x81\xa2z\xa4\x01", b"\x91\xa1\xff", b"\xa3\xed\xa0\x80"]


def with_raw_field(message: dict, name: str, raw: bytes) -> bytes:
    """`message` encoded with one more field whose value is the given raw MessagePack bytes."""
    body = encode(message)
    assert 0x80 <= body[0] < 0x8F  # a fixmap: one more pair fits in its header
    return bytes([body[0] + 1]) + body[1:] + encode(name) + raw


def test_invalid_utf8_is_refused_or_relayed_as_valid_msgpack(broker_address: Address) -> None:
    """MessagePack strings must be UTF-8. A broker that stores such bytes as they came and sends
    them to the worker that pulls the job hands every consumer a frame it cannot decode."""
    queue = fresh_queue("utf8")
    with FrameSocket(broker_address) as client:
        bad_queue = with_raw_field(
            {"cmd": "PUSH", "reqId": "q", "name": "n"}, "queue", b"\xa2z\xa4"
        )
        client.send_raw(frame(bad_queue))
        reply = client.receive()
        assert reply["ok"] is False, reply
        for i, bad in enumerate(BAD_UTF8):
            push_id = f"data-{i}"
            message = {"cmd": "PUSH", "reqId": push_id, "queue": queue, "name": "n"}
            client.send_raw(frame(with_raw_field(message, "data", bad)))
            reply = client.receive_for(push_id)
            if reply["ok"]:  # accepted: what a worker pulls must decode
                pulled = client.call("PULL", queue=queue)
                assert pulled["job"]["id"] == reply["id"]
        # the same for an ACK result read back with GetResult
        job_id = push(client, queue)
        pulled = client.call("PULL", queue=queue)  # every job pushed above was pulled already
        assert pulled["job"]["id"] == job_id
        ack = {"cmd": "ACK", "reqId": "ack", "id": job_id}
        client.send_raw(frame(with_raw_field(ack, "result", b"\x81\xa1r\xa2z\xa4")))
        if client.receive_for("ack")["ok"]:
            result = client.call("GetResult", id=job_id)
            assert result["ok"] is True
        assert client.call("Ping")["ok"] is True


def test_frame_split_into_single_bytes_is_reassembled(broker_address: Address) -> None:
    queue = fresh_queue("split")
    data = encode_frame({"cmd": "PUSH", "reqId": "slow", "queue": queue, "name": "n", "data": 7})
    data += encode_frame({"cmd": "Ping", "reqId": "after"})
    with FrameSocket(broker_address) as client:
        for i in range(len(data)):
            client.send_raw(data[i : i + 1])
        pushed = client.receive_for("slow")
        assert pushed["ok"] is True
        assert client.receive_for("after")["ok"] is True
        assert state_of(client, pushed["id"]) == "waiting"


# -- (d) oversized frames -------------------------------------------------------------------------


def test_frame_over_64_mib_is_refused_and_the_connection_closed(broker_address: Address) -> None:
    with FrameSocket(broker_address) as client:
        client.send_raw((MAX_FRAME + 1).to_bytes(4, "big"))
        replies = client.read_until_eof()
    assert replies == [
        {"ok": False, "error": "Frame too large: 67108865 bytes exceeds maximum 67108864"}
    ]
    # the broker itself goes on
    with FrameSocket(broker_address) as client:
        assert client.call("Ping")["ok"] is True


def test_frame_of_exactly_64_mib_is_accepted(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()  # a private broker: the shared one keeps its memory small
    # a bin32 value filling the whole 64 MiB payload: well framed, just not a command
    body = b"\xc6" + (MAX_FRAME - 5).to_bytes(4, "big") + bytes(MAX_FRAME - 5)
    assert len(body) == MAX_FRAME
    with FrameSocket(broker.address, timeout=20) as client:
        client.send_raw(frame(body))
        client.send({"cmd": "Ping", "reqId": "after-big"})
        reply = client.receive()
        assert reply == {"ok": False, "error": "Invalid command"}
        assert client.receive()["reqId"] == "after-big"


# -- (e) release on close -------------------------------------------------------------------------


def test_job_pulled_without_owner_goes_back_to_waiting_when_the_connection_closes(
    broker_address: Address,
) -> None:
    queue = fresh_queue("release")
    with FrameSocket(broker_address) as watcher:
        job_id = push(watcher, queue)
        with FrameSocket(broker_address) as worker:
            pulled = worker.call("PULL", queue=queue)
            assert pulled["job"]["id"] == job_id
            assert "token" not in pulled or pulled["token"] is None
            assert state_of(watcher, job_id) == "active"
        state = poll_until(lambda: state_of(watcher, job_id), lambda s: s == "waiting")
        assert state == "waiting"
        # and it can be pulled again, with its attempts untouched
        again = watcher.call("PULL", queue=queue)
        assert again["job"]["id"] == job_id
        assert again["job"]["attempts"] == 0
        assert watcher.call("ACK", id=job_id)["ok"] is True


def pull_then_close(address: Address, queue: str, barrier_queue: str, **pull: object) -> dict:
    """Pull one job from `queue` with `pull` options and one plain job from `barrier_queue` on a
    connection, then close it. Returns the first PULL's reply."""
    with FrameSocket(address) as worker:
        reply = worker.call("PULL", queue=queue, **pull)
        assert reply["ok"] is True and reply["job"] is not None, reply
        barrier = worker.call("PULL", queue=barrier_queue)
        assert barrier["job"] is not None, barrier
    return reply


def wait_for_release(watcher: FrameSocket, barrier_id: str) -> None:
    """The barrier job was pulled plainly on the closed connection: once it is waiting again,
    the broker has handled that connection's close."""
    state = poll_until(lambda: state_of(watcher, barrier_id), lambda s: s == "waiting")
    assert state == "waiting", "the plain job was never released, cannot judge the others"


def test_job_pulled_with_detach_stays_active_after_close(broker_address: Address) -> None:
    queue, barrier_queue = fresh_queue("detach"), fresh_queue("barrier")
    with FrameSocket(broker_address) as watcher:
        job_id = push(watcher, queue)
        barrier_id = push(watcher, barrier_queue)
        reply = pull_then_close(broker_address, queue, barrier_queue, detach=True)
        assert reply["job"]["id"] == job_id
        wait_for_release(watcher, barrier_id)
        assert state_of(watcher, job_id) == "active"
        # still settleable from elsewhere
        assert watcher.call("ACK", id=job_id)["ok"] is True
        assert state_of(watcher, job_id) == "completed"


def test_job_pulled_with_owner_stays_leased_after_close(broker_address: Address) -> None:
    queue, barrier_queue = fresh_queue("owner"), fresh_queue("barrier")
    with FrameSocket(broker_address) as watcher:
        job_id = push(watcher, queue)
        barrier_id = push(watcher, barrier_queue)
        reply = pull_then_close(broker_address, queue, barrier_queue, owner="w1", lockTtl=60_000)
        assert reply["job"]["id"] == job_id
        token = reply["token"]
        assert isinstance(token, str) and token
        wait_for_release(watcher, barrier_id)
        assert state_of(watcher, job_id) == "active"
        # the lease survived: the token still settles it from another connection
        acked = watcher.call("ACK", id=job_id, token=token, result="done")
        assert acked["ok"] is True, acked
        assert state_of(watcher, job_id) == "completed"


# -- (f) auth -------------------------------------------------------------------------------------


def test_auth_token_gates_every_command(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("--auth-token", "secret")
    queue = fresh_queue("auth")
    with FrameSocket(broker.address) as client, FrameSocket(broker.address) as other:
        for cmd, fields in [
            ("Ping", {}),
            ("Hello", {"protocolVersion": 3}),
            ("PUSH", {"queue": queue, "name": "n", "data": 1}),
            ("PULL", {"queue": queue}),
        ]:
            reply = client.call(cmd, **fields)
            assert reply["ok"] is False and reply["error"] == "Not authenticated", (cmd, reply)
        wrong = client.call("Auth", token="not-the-secret")
        assert wrong["ok"] is False and wrong["error"] == "Invalid token", wrong
        assert client.call("Ping")["error"] == "Not authenticated"
        right = client.call("Auth", token="secret")
        assert right["ok"] is True, right
        job_id = push(client, queue, data={"x": 1})
        pulled = client.call("PULL", queue=queue)
        assert pulled["job"]["id"] == job_id
        assert client.call("ACK", id=job_id)["ok"] is True
        # authentication belongs to the connection
        assert other.call("Ping")["error"] == "Not authenticated"
    assert broker.alive()


# -- (g) graceful shutdown ------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_answers_parked_long_poll_and_exits_zero(
    broker_factory: BrokerFactory, signum: int
) -> None:
    broker = broker_factory()
    queue = fresh_queue("shutdown")
    with FrameSocket(broker.address) as client:
        client.send({"cmd": "PULL", "reqId": "parked", "queue": queue, "timeout": 30_000})
        # an engine command sent after the PULL: once it is answered, the PULL is parked
        barrier = client.call("GetJobCounts", queue=queue)
        assert barrier["ok"] is True
        started = time.monotonic()
        broker.send_signal(signum)
        reply = client.receive(timeout=10)
        assert reply["reqId"] == "parked", reply
        assert reply["ok"] is True and reply["job"] is None, reply
        assert client.read_until_eof(timeout=10) == []
    code = broker.wait(timeout=10)
    assert code == 0, broker.stderr_text()
    assert time.monotonic() - started < 20  # answered at shutdown, not at its 30 s timeout
    assert "Traceback" not in broker.stderr_text()


def test_a_sigterm_sent_as_soon_as_the_address_is_printed_stops_it_cleanly(
    broker_factory: BrokerFactory,
) -> None:
    for _ in range(5):  # the signal lands in the moments after the print: no window to hit
        broker = broker_factory()
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=10) == 0, broker.stderr_text()


# -- (h) the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        pytest.param([sys.executable, "-m", "broker"], id="python-m-broker"),
        pytest.param([str(Path(sys.executable).parent / "trioq")], id="trioq-script"),
    ],
)
def test_serve_help_documents_the_options(command: list[str]) -> None:
    result = subprocess.run(
        [*command, "serve", "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    for option in ("--port", "--memory", "--auth-token"):
        assert option in result.stdout, f"{option} missing from:\n{result.stdout}"
