"""WebSocket robustness: Auth checks tokens as TCP does, a client that does not read stops
being read, and no value a client sends or a job holds can end the broker."""

from __future__ import annotations

import json
import logging

import pytest
import trio
import trio.testing
import trio_websocket

from broker.node.app import App
from broker.node.config import Config
from broker.server import frontdoor
from broker.server import http as http_module
from tests.support.app import Connect, start_app
from tests.support.http import http
from tests.support.payloads import ODD_AS_JSON, ODD_DATA, frame_with_raw
from tests.support.websocket import call
from tests.support.websocket import connect as ws_connect


async def test_auth_checks_the_token_like_tcp(nursery: trio.Nursery) -> None:
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({"s3cret"}))
    app = await start_app(nursery, config)
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    headers = [(b"authorization", b"Bearer s3cret")]
    socket = await trio_websocket.wrap_client_stream(
        nursery, client, "test", "/ws", extra_headers=headers
    )
    wrong = await call(socket, cmd="Auth", token="wrong", reqId="1")
    assert wrong == {"ok": False, "error": "Invalid token", "reqId": "1"}
    assert (await call(socket, cmd="Auth", token="s3cret", reqId="2"))["ok"] is True
    await socket.aclose()
    app.shutdown()


async def test_a_client_that_does_not_read_stops_being_read(
    app: App, nursery: trio.Nursery
) -> None:
    socket = await ws_connect(app, nursery, lockstep=True)
    total = 300

    async def flood() -> None:
        for i in range(total):
            await socket.send_message(json.dumps({"cmd": "PUSH", "queue": "fq", "data": i}))

    nursery.start_soon(flood)
    await trio.testing.wait_all_tasks_blocked()
    _, _, body = await http(app, nursery, "GET", "/queues/fq/count")
    assert json.loads(body)["count"] < 100  # 50 in flight, a few in buffers; not all 300
    replies = [json.loads(await socket.get_message()) for _ in range(total)]
    assert all(reply["ok"] for reply in replies)
    _, _, body = await http(app, nursery, "GET", "/queues/fq/count")
    assert json.loads(body)["count"] == total
    await socket.aclose()


async def test_a_ping_waits_behind_50_unanswered_commands_as_on_tcp(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # One budget per connection, whoever answers: 50 parked long polls fill it, so even a
    # message the connection answers itself is not read until one of them is answered.
    socket = await ws_connect(app, nursery)
    for i in range(50):
        await socket.send_message(
            json.dumps({"cmd": "PULL", "queue": "empty", "timeout": 5000, "reqId": i})
        )
    await socket.send_message(json.dumps({"cmd": "Ping", "reqId": "ping"}))
    first = json.loads(await socket.get_message())
    assert first["reqId"] != "ping" and first["job"] is None  # a poll timed out first
    replies = [json.loads(await socket.get_message()) for _ in range(50)]
    assert [reply["reqId"] for reply in replies].count("ping") == 1
    await socket.aclose()


async def test_values_json_cannot_hold_are_shown(
    app: App, nursery: trio.Nursery, connect: Connect
) -> None:
    client = await connect()
    await client.send_raw(
        frame_with_raw({"cmd": "PUSH", "queue": "xq", "reqId": "1"}, data=ODD_DATA)
    )
    job_id = (await client.receive_for("1"))["id"]
    socket = await ws_connect(app, nursery)
    reply = await call(socket, cmd="GetJob", id=job_id, reqId="g")
    assert reply["job"]["data"] == ODD_AS_JSON
    await socket.aclose()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"cmd": "PUSH", "queue": "q", "data": 1000000000000000000000000000000, "reqId": "r"}',
         "Numbers must fit in 64 bits"),
        ('{"cmd": "PUSH", "queue": "q", "priority": 1000000000000000000000000000000, "reqId": "r"}',
         "Numbers must fit in 64 bits"),
        ('{"cmd": "PUSH", "queue": "q", "data": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "Invalid command format"),
    ],
    ids=["big-data", "big-priority", "deep"],
)  # fmt: skip
async def test_json_msgpack_cannot_carry_is_an_error_reply(
    app: App, nursery: trio.Nursery, text: str, error: str
) -> None:
    socket = await ws_connect(app, nursery)
    await socket.send_message(text)
    assert json.loads(await socket.get_message())["error"] == error
    assert (await call(socket, cmd="Ping", reqId="p"))["ok"] is True
    await socket.aclose()


async def test_an_unexpected_error_closes_only_that_socket(
    app: App,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(now_ms: float) -> None:
        raise RuntimeError("boom")

    socket = await ws_connect(app, nursery)
    monkeypatch.setattr(frontdoor, "ping_reply", broken)
    with caplog.at_level(logging.ERROR):
        await socket.send_message('{"cmd": "Ping"}')
        with pytest.raises(trio_websocket.ConnectionClosed):
            await socket.get_message()
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
    monkeypatch.undo()
    other = await ws_connect(app, nursery)
    assert (await call(other, cmd="Ping", reqId="p"))["ok"] is True
    await other.aclose()


async def test_any_json_value_works_as_a_req_id(app: App, nursery: trio.Nursery) -> None:
    socket = await ws_connect(app, nursery)
    for req_id in ([], {"a": [1]}, None, 1.5):
        await socket.send_message(json.dumps({"cmd": "Count", "queue": "q", "reqId": req_id}))
        reply = json.loads(await socket.get_message())
        assert (reply["ok"], reply.get("reqId")) == (True, req_id)
    await socket.aclose()


UPGRADE = (
    b"GET /ws HTTP/1.1\r\nhost: t\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
    b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
)


@pytest.mark.parametrize("sent", [UPGRADE, UPGRADE[:-2] + b"\r\n", UPGRADE + b"\x81\x85"])
async def test_a_client_leaving_mid_handshake_is_not_an_error(
    app: App, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, sent: bytes
) -> None:
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    with caplog.at_level(logging.ERROR):
        async with trio.open_nursery() as inner:
            inner.start_soon(app.http.serve_stream, server)
            await client.send_all(sent)
            await client.aclose()
    assert caplog.records == []
    assert (await http(app, nursery, "GET", "/healthz"))[0] == 200


async def test_websockets_beyond_the_cap_are_refused_503(
    app: App, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_module, "MAX_WEBSOCKETS", 1)
    first = await ws_connect(app, nursery)
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    await client.send_all(UPGRADE)
    refused = b""
    while chunk := await client.receive_some(65536):
        refused += chunk
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    await first.aclose()
    await trio.testing.wait_all_tasks_blocked()
    second = await ws_connect(app, nursery)
    assert (await call(second, cmd="Ping", reqId="p"))["ok"] is True
    await second.aclose()


async def test_subscribe_checks_its_queue(app: App, nursery: trio.Nursery) -> None:
    socket = await ws_connect(app, nursery)
    reply = await call(socket, cmd="Subscribe", events=["*"], queue=["q"], reqId="s")
    assert reply == {"ok": False, "error": "queue must be a string", "reqId": "s"}
    await socket.aclose()
