"""A standby's forwarding, bounded (broker/node/forwarding.py, ha.py): never to itself, few
connection attempts to a target that refuses, a clear error frame for a client no active broker
can be found for, and a cap on the clients waiting."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec
import pytest
import trio
import trio.testing

from broker.node import forwarding, ha
from broker.node.forwarding import (
    MAX_BACKOFF_S,
    NO_ACTIVE,
    TOO_MANY,
    Forwarder,
    connects_to_itself,
    error_frames,
)
from broker.node.identity import this_process
from store.postgres import Lease
from tests.support.client import FrameClient

TARGET = "127.0.0.1:9"


def frames(data: bytes) -> list[Any]:
    replies = []
    while data:
        size = int.from_bytes(data[:4], "big")
        replies.append(msgspec.msgpack.decode(data[4 : 4 + size]))
        data = data[4 + size :]
    return replies


def request(**fields: Any) -> bytes:
    body = msgspec.msgpack.encode(fields)
    return len(body).to_bytes(4, "big") + body


def test_a_turned_away_client_hears_the_error_for_each_request_it_sent() -> None:
    sent = request(cmd="PUSH", reqId="a") + request(cmd="Ping") + request(cmd="GetJob", reqId=7)
    assert frames(error_frames(sent + b"\0\0", "why")) == [
        {"ok": False, "error": "why", "reqId": "a"},
        {"ok": False, "error": "why"},
        {"ok": False, "error": "why", "reqId": 7},
    ]
    assert frames(error_frames(b"", "why")) == [{"ok": False, "error": "why"}]
    garbage = b"\0\0\0\2\xc1\xc1"  # a whole frame that is not MessagePack
    assert frames(error_frames(garbage, "why")) == [{"ok": False, "error": "why"}]
    too_large = b"\xff\xff\xff\xff"
    assert frames(error_frames(request(reqId=1) + too_large, "why")) == [
        {"ok": False, "error": "why", "reqId": 1}
    ]


@pytest.mark.parametrize(
    ("local", "peer", "listening", "itself"),
    [
        (("127.0.0.1", 5000), ("127.0.0.1", 6801), [("127.0.0.1", 6801)], True),
        (("10.0.0.5", 5000), ("10.0.0.5", 6801), [("0.0.0.0", 6801)], True),  # any interface
        (("10.0.0.5", 5000), ("10.0.0.9", 6801), [("0.0.0.0", 6801)], False),  # another host
        (("127.0.0.1", 5000), ("127.0.0.1", 6802), [("127.0.0.1", 6801)], False),
        (("::1", 5000, 0, 0), ("::1", 6801, 0, 0), [("::", 6801, 0, 0)], True),
    ],
)
def test_a_connection_to_one_of_its_own_listeners_is_recognised(local, peer, listening, itself):
    assert connects_to_itself(local, peer, listening) is itself


async def test_a_refusing_target_is_tried_again_after_a_doubling_backoff_one_at_a_time(
    autojump_clock,
) -> None:
    forwarder = Forwarder([], set(), wait_s=20)
    now = trio.current_time()
    assert forwarder.may_try(TARGET, now)
    waits = []
    for _ in range(7):
        forwarder.refused(TARGET, now)
        waits.append(forwarder.target(TARGET).retry_at - now)
        assert not forwarder.may_try(TARGET, now)
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, MAX_BACKOFF_S, MAX_BACKOFF_S]
    later = now + MAX_BACKOFF_S
    assert forwarder.may_try(TARGET, later)
    forwarder.target(TARGET).connecting = 1  # an attempt is under way: the others wait
    assert not forwarder.may_try(TARGET, later)


async def test_a_connection_to_this_broker_itself_is_dropped_and_its_address_remembered() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    try:
        bound = [listener.socket.getsockname() for listener in listeners]
        alias = f"localhost:{bound[0][1]}"  # another name for this broker's own address
        forwarder = Forwarder(bound, set(), wait_s=20)
        assert not forwarder.is_own(alias)
        assert await forwarder.connect(alias) is None
        assert forwarder.is_own(alias)
    finally:
        for listener in listeners:
            await listener.aclose()


class Stub:
    """What a RoleLoop's forwarding reads of its App and store."""

    stopping = False
    clock = None
    lease_ttl_s = 10.0
    advertise = "127.0.0.1:1"
    holder = "me"


async def forwarded_clients(
    loop: ha.RoleLoop, nursery: trio.Nursery, count: int
) -> list[FrameClient]:
    """`count` clients whose connections the standby forwards (socket pairs)."""
    clients = []
    for _ in range(count):
        mine, theirs = trio.socket.socketpair()
        nursery.start_soon(loop._forward, trio.SocketStream(theirs))
        clients.append(FrameClient(trio.SocketStream(mine)))
    return clients


async def test_many_clients_waiting_for_a_refusing_target_make_few_attempts_then_hear_why(
    autojump_clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = []

    async def refused(host: str, port: int) -> trio.SocketStream:
        attempts.append(trio.current_time())
        raise ConnectionRefusedError

    monkeypatch.setattr(forwarding.trio, "open_tcp_stream", refused)
    loop = ha.RoleLoop(Stub(), Stub())  # type: ignore[arg-type]
    loop.forwarder = Forwarder([], {"127.0.0.1:1"}, wait_s=20)
    loop.active_address = loop._lease_address = TARGET
    async with trio.open_nursery() as nursery:
        clients = await forwarded_clients(loop, nursery, 50)
        for n, client in enumerate(clients):
            await client.send({"cmd": "PUSH", "queue": "q", "data": n, "reqId": n})
        replies = [await client.receive() for client in clients]
        for client in clients:
            await client.aclose()
    # One attempt at a time, backing off to every 2 s: not 50 clients retrying in a loop.
    assert 5 <= len(attempts) <= 15
    assert replies == [
        {"ok": False, "reqId": n,
         "error": f"{NO_ACTIVE} within 20 s (the lease names {TARGET})"}
        for n in range(50)
    ]  # fmt: skip
    assert loop.forwarder.waiting == 0


async def test_past_the_waiting_cap_a_client_is_turned_away_at_once(
    autojump_clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ha, "MAX_WAITING", 3)
    loop = ha.RoleLoop(Stub(), Stub())  # type: ignore[arg-type]
    loop.forwarder = Forwarder([], {"127.0.0.1:1"}, wait_s=20)
    async with trio.open_nursery() as nursery:
        waiting = await forwarded_clients(loop, nursery, 3)
        await trio.testing.wait_all_tasks_blocked()
        started = trio.current_time()
        (extra,) = await forwarded_clients(loop, nursery, 1)
        assert await extra.receive() == {"ok": False, "error": TOO_MANY}
        assert trio.current_time() - started < 1
        Stub.stopping = True  # the others are let go
        loop._changed()
    Stub.stopping = False
    for client in [*waiting, extra]:
        with pytest.raises(EOFError):
            await client.receive()
        await client.aclose()


def standby_named(listening: str) -> ha.RoleLoop:
    """A role loop (in standby) whose process listens on `listening`."""
    loop = ha.RoleLoop(Stub(), Stub())  # type: ignore[arg-type]
    loop.identity = attrs.evolve(this_process([listening]), nonce="successor")
    loop.forwarder = Forwarder([], {listening}, wait_s=20)
    return loop


async def test_a_standby_takes_a_live_lease_at_once_only_from_its_gone_predecessor() -> None:
    loop = standby_named("127.0.0.1:6801")
    assert loop.identity is not None
    gone = attrs.evolve(loop.identity, pid=2**22 + 1, start="1", nonce="predecessor").text()
    assert loop._gone_predecessor(Lease(7, gone, "127.0.0.1:6801", 9.0)) == gone
    assert loop._gone_predecessor(Lease(7, gone, "127.0.0.1:6801", -1.0)) is None  # expired:
    # taken as any expired lease is
    elsewhere = attrs.evolve(loop.identity, listen=("127.0.0.1:6802",), nonce="other").text()
    assert loop._gone_predecessor(Lease(7, elsewhere, "127.0.0.1:6802", 9.0)) is None
    assert loop._gone_predecessor(Lease(7, "3f9a0c1d2e4b5a6c", "127.0.0.1:6801", 9.0)) is None


async def test_a_standby_never_takes_its_own_address_for_the_active_brokers() -> None:
    loop = standby_named("127.0.0.1:6801")
    loop._observe(Lease(7, "another-machine", "127.0.0.1:6801", 9.0))
    assert (loop.epoch, loop.active_address, loop.status()["active"]) == (7, None, None)
    assert loop._why_no_active(20) == f"{NO_ACTIVE} within 20 s (the lease still names this broker)"
    loop._observe(Lease(8, "another-machine", "10.0.0.2:6801", 9.0))
    assert (loop.epoch, loop.active_address) == (8, "10.0.0.2:6801")
    loop._observe(Lease(8, "another-machine", "10.0.0.2:6801", -1.0))  # expired: none active
    assert loop.active_address is None
