"""The TCP port under hostile clients: failures stay inside their connection, memory stays
bounded, slow or guessing clients are cut off, and nothing leaks before Auth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from broker.node.app import App
from broker.node.config import Config
from broker.server import frontdoor
from broker.server.guards import AuthThrottle
from protocol import frame
from tests.support.app import Connect, memory_connector, start_app
from tests.support.client import FrameClient

_encode = msgspec.msgpack.encode
TOKEN = "secret"


@pytest.fixture
async def guarded_app(nursery: trio.Nursery) -> AsyncIterator[App]:
    """A broker that requires Auth."""
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    app = await start_app(nursery, config)
    yield app
    app.shutdown()


@pytest.fixture
async def guarded_connect(guarded_app: App, nursery: trio.Nursery) -> Connect:
    return memory_connector(guarded_app, nursery)


async def closed_by_server(client: FrameClient) -> bool:
    """Whether the server has closed the connection (after any replies still to read)."""
    try:
        while True:
            await client.receive()
    except EOFError:
        return True


def lockstep_client(app: App) -> FrameClient:
    """A connection with no buffering in between: what is not read is not sent."""
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    assert app.tcp is not None
    app.tcp.adopt(server_stream)
    return FrameClient(client_stream)


# -- a failure ends its connection, never the broker ---------------------------------------------


async def test_a_bug_while_serving_closes_that_connection_only(
    connect: Connect, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("bug")

    monkeypatch.setattr(frontdoor, "hello_reply", broken)
    victim, bystander = await connect(), await connect()
    await victim.send({"cmd": "Hello"})
    assert await closed_by_server(victim)
    assert (await bystander.call("Ping"))["ok"] is True
    logged = [r for r in caplog.records if "failed and was closed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


# -- replies the connection makes itself count against its budget --------------------------------


@pytest.mark.parametrize(
    ("needs_auth", "message"),
    [(False, {"cmd": "Ping", "reqId": 1}), (True, {"cmd": "PUSH", "queue": "q", "data": 1})],
)
async def test_a_client_that_does_not_read_its_local_replies_stops_being_read(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, needs_auth: bool, message: Any
) -> None:
    tokens = frozenset({TOKEN}) if needs_auth else frozenset()
    app = await start_app(nursery, Config(port=0, http_port=0, memory=True, auth_tokens=tokens))
    client = lockstep_client(app)
    flood = frame(_encode(message)) * 100_000
    with trio.move_on_after(20) as waited:  # (an anonymous client is closed at 30 s)
        await client.send_raw(flood)
    assert waited.cancelled_caught, "the broker read 100,000 requests nobody read replies to"
    app.shutdown()


# -- partial frames -------------------------------------------------------------------------------


async def test_before_auth_only_small_frames_are_read(guarded_connect: Connect) -> None:
    client = await guarded_connect()
    await client.send_raw((100_000).to_bytes(4, "big") + b"\0" * 10)
    reply = await client.receive()
    assert reply["error"] == "Frame too large: 100000 bytes exceeds maximum 65536"
    assert await closed_by_server(client)


async def test_after_auth_large_frames_are_read_even_in_the_same_write(
    guarded_connect: Connect,
) -> None:
    client = await guarded_connect()
    big = {"cmd": "PUSH", "queue": "q", "data": "x" * 200_000, "reqId": "big"}
    await client.send({"cmd": "Auth", "token": TOKEN, "reqId": "auth"}, big)
    assert (await client.receive_for("auth"))["ok"] is True
    assert (await client.receive_for("big"))["ok"] is True


async def test_unfinished_frames_of_all_connections_share_one_budget(
    app: App, connect: Connect
) -> None:
    assert app.tcp is not None
    app.tcp.guards.partial_frames.limit = 1_000_000
    holder, greedy = await connect(), await connect()
    await holder.send_raw((900_000).to_bytes(4, "big") + b"\0" * 700_000)
    await trio.testing.wait_all_tasks_blocked()  # the broker holds the holder's 700 KB
    await greedy.send_raw((900_000).to_bytes(4, "big") + b"\0" * 400_000)
    reply = await greedy.receive()
    assert reply["error"] == "Server busy: too much unfinished frame data buffered"
    assert await closed_by_server(greedy)
    await holder.aclose()  # its bytes are given back
    late = await connect()
    assert (await late.call("Ping", padding="x" * 899_000))["ok"] is True


async def test_a_frame_unfinished_after_30_seconds_closes_the_connection(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    client = await connect()
    await client.send_raw((1000).to_bytes(4, "big") + b"\0" * 10)
    started = trio.current_time()
    with trio.fail_after(3600):
        assert await closed_by_server(client)
    assert trio.current_time() - started == pytest.approx(30)


async def test_slow_but_steady_frames_and_idle_connections_stay_open(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    client = await connect()
    for byte in frame(_encode({"cmd": "Ping", "reqId": "slow"})):
        await client.send_raw(bytes([byte]))
        await trio.sleep(1)
    assert (await client.receive())["reqId"] == "slow"
    await trio.sleep(3600)
    assert (await client.call("Ping"))["ok"] is True


# -- Auth -----------------------------------------------------------------------------------------


async def test_three_wrong_tokens_close_the_connection(guarded_connect: Connect) -> None:
    client = await guarded_connect()
    await client.send(*({"cmd": "Auth", "token": f"guess{i}"} for i in range(5)))
    errors = [(await client.receive())["error"] for _ in range(3)]
    assert errors == ["Invalid token"] * 3
    assert await closed_by_server(client)


async def test_repeated_failures_from_one_peer_are_answered_ever_more_slowly(
    guarded_connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    pauses = []
    for _ in range(3):
        client = await guarded_connect()
        for _ in range(3):
            asked = trio.current_time()
            assert (await client.call("Auth", token="wrong"))["error"] == "Invalid token"
            pauses.append(trio.current_time() - asked)
    assert pauses[:3] == [0, 0, 0]
    assert pauses[3:] == [0.25, 0.5, 1, 2, 4, 8]
    right = await guarded_connect()
    assert (await right.call("Auth", token=TOKEN))["ok"] is True  # after a pause; then forgiven
    again = await guarded_connect()
    asked = trio.current_time()
    await again.call("Auth", token="wrong")
    assert trio.current_time() == asked


async def test_a_connection_that_does_not_authenticate_within_30_seconds_is_closed(
    guarded_connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    anonymous, member = await guarded_connect(), await guarded_connect()
    assert (await member.call("Auth", token=TOKEN))["ok"] is True
    opened = trio.current_time()
    with trio.fail_after(3600):
        assert await closed_by_server(anonymous)
    assert trio.current_time() - opened == pytest.approx(30)
    await trio.sleep(3600)
    assert (await member.call("Ping"))["ok"] is True


def test_failed_auth_bookkeeping_is_bounded() -> None:
    throttle = AuthThrottle(max_peers=100)
    for peer in range(10_000):
        throttle.failed(f"10.0.{peer // 256}.{peer % 256}", now=0)
    assert len(throttle) == 100


# -- nothing leaks before Auth, no Python repr in errors -----------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"cmd": "PUSHF", "queue": "q", "reqId": 1},
        {"cmd": "SetStallConfig", "queue": "q", "config": 5, "reqId": 1},
        {"cmd": msgspec.msgpack.Ext(5, b"\x01"), "reqId": 1},
        {"cmd": "Nope", "reqId": 1},
        {"reqId": 1},
    ],
)
async def test_before_auth_every_command_hears_only_not_authenticated(
    guarded_connect: Connect, message: dict[str, Any]
) -> None:
    client = await guarded_connect()
    await client.send(message)
    assert await client.receive() == {"ok": False, "error": "Not authenticated", "reqId": 1}


async def test_before_auth_garbage_hears_only_not_authenticated(guarded_connect: Connect) -> None:
    client = await guarded_connect()
    await client.send_raw(frame(b"\xc1"))
    assert await client.receive() == {"ok": False, "error": "Not authenticated"}


async def test_an_extension_type_command_is_not_shown_as_a_python_object(
    client: FrameClient,
) -> None:
    await client.send({"cmd": msgspec.msgpack.Ext(5, b"\x01"), "reqId": "x"})
    reply = await client.receive_for("x")
    assert reply["error"] == "Unknown command: [object Object]"
