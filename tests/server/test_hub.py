"""The read hub (broker/server/hub.py): idle socket connections are read by one task, and
whatever it cannot take at once goes back to the connection's own task, in order, unchanged.

These connections are real sockets (socket pairs adopted by the broker): memory streams are
never parked."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import msgspec
import pytest
import trio
import trio.testing

from broker.node.app import App
from broker.node.config import Config
from broker.server.frontdoor import MAX_IN_FLIGHT
from broker.server.tcp import Connection
from protocol import frame
from tests.support.app import start_app
from tests.support.client import FrameClient

_encode = msgspec.msgpack.encode
SocketConnect = Callable[[], Awaitable[FrameClient]]


def socket_connector(app: App, opened: list[FrameClient]) -> SocketConnect:
    """Open connections to `app` over a socket pair (the broker serves one end); each client
    is added to `opened`, for the test to close."""

    async def connect() -> FrameClient:
        ours, theirs = socket.socketpair()
        assert app.tcp is not None
        app.tcp.adopt(trio.SocketStream(trio.socket.from_stdlib_socket(theirs)))
        client = FrameClient(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
        opened.append(client)
        return client

    return connect


@pytest.fixture
async def opened() -> AsyncIterator[list[FrameClient]]:
    clients: list[FrameClient] = []
    yield clients
    for client in clients:
        await client.aclose()


@pytest.fixture
async def connect_socket(app: App, opened: list[FrameClient]) -> SocketConnect:
    return socket_connector(app, opened)


def parked(app: App) -> int:
    assert app.tcp is not None
    return app.tcp.hub.parked()


def push(n: int, queue: str = "q") -> dict[str, object]:
    return {"cmd": "PUSH", "queue": queue, "data": {"n": n}, "reqId": f"p{n}"}


async def test_idle_connections_wait_in_the_hub_and_are_served_from_it(
    app: App, connect_socket: SocketConnect
) -> None:
    clients = [await connect_socket() for _ in range(3)]
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 3
    for number, client in enumerate(clients):
        await client.send(*(push(10 * number + i) for i in range(5)))
    for number, client in enumerate(clients):
        replies = [await client.receive() for _ in range(5)]
        assert [r["reqId"] for r in replies] == [f"p{10 * number + i}" for i in range(5)]
        assert all(r["ok"] and r["id"] for r in replies)
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 3
    assert app.tcp is not None
    hub = app.tcp.hub
    assert (hub.reads_taken, hub.reads_handed_back) == (3, 0)  # served without leaving it
    count = await clients[0].call("Count", queue="q")
    assert count["count"] == 15


async def test_a_frame_split_across_reads_is_finished_by_its_connection(
    app: App, connect_socket: SocketConnect
) -> None:
    client = await connect_socket()
    data = frame(_encode(push(1)))
    await trio.testing.wait_all_tasks_blocked()
    await client.send_raw(data[:7])
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 0  # its own task holds the partial frame
    assert app.tcp is not None and app.tcp.hub.reads_handed_back == 1
    await client.send_raw(data[7:] + frame(_encode(push(2))))
    assert [(await client.receive())["reqId"] for _ in range(2)] == ["p1", "p2"]
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 1  # back in the hub once nothing is held


async def test_a_local_command_among_engine_commands_is_answered_by_the_connection(
    app: App, connect_socket: SocketConnect
) -> None:
    client = await connect_socket()
    await trio.testing.wait_all_tasks_blocked()
    await client.send(push(1), {"cmd": "Ping", "reqId": "ping"}, push(2))
    replies = [await client.receive() for _ in range(3)]
    # The front door answers a Ping at once, the engine's replies follow in their order.
    assert [r["reqId"] for r in replies] == ["ping", "p1", "p2"]
    assert all(r["ok"] for r in replies)
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 1
    assert app.tcp is not None and app.tcp.hub.reads_handed_back == 1


async def test_more_commands_than_the_budget_in_one_write_are_all_answered(
    app: App, connect_socket: SocketConnect
) -> None:
    client = await connect_socket()
    await trio.testing.wait_all_tasks_blocked()
    count = MAX_IN_FLIGHT + 10
    await client.send(*(push(i) for i in range(count)))
    replies = [await client.receive() for _ in range(count)]
    assert [r["reqId"] for r in replies] == [f"p{i}" for i in range(count)]


def busiest(connections: Iterable[Connection]) -> Connection:
    """The connection with the most commands in flight."""
    return max(connections, key=lambda connection: connection.door.in_flight.count)


def long_poll(number: int) -> dict[str, object]:
    return {"cmd": "PULL", "queue": "q", "timeout": 50_000, "reqId": f"w{number}"}


async def test_a_read_past_the_in_flight_budget_is_handed_back_and_the_cap_holds(
    app: App, connect_socket: SocketConnect
) -> None:
    worker, producer = await connect_socket(), await connect_socket()
    await worker.send(*(long_poll(i) for i in range(MAX_IN_FLIGHT - 1)))
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 2  # the worker waits in the hub with room for one more command
    assert app.tcp is not None
    connection = busiest(app.tcp.connections)
    assert connection.door.in_flight.count == MAX_IN_FLIGHT - 1
    handed_back = app.tcp.hub.reads_handed_back
    await worker.send(*(long_poll(i) for i in range(MAX_IN_FLIGHT - 1, MAX_IN_FLIGHT + 9)))
    await trio.testing.wait_all_tasks_blocked()
    # Ten commands with room for one: the hub leaves the read to the connection's task, which
    # reads no further than the cap.
    assert app.tcp.hub.reads_handed_back == handed_back + 1
    assert connection.door.in_flight.count == MAX_IN_FLIGHT
    # Nothing is lost: as jobs come and replies are read, every poll is answered.
    jobs = [{"name": "n", "data": i} for i in range(MAX_IN_FLIGHT + 9)]
    assert (await producer.call("PUSHB", queue="q", jobs=jobs))["ok"] is True
    replies = [await worker.receive() for _ in range(MAX_IN_FLIGHT + 9)]
    assert sorted(r["job"]["data"] for r in replies) == list(range(MAX_IN_FLIGHT + 9))


async def test_a_connection_whose_replies_fill_its_budget_while_parked_is_not_read_by_the_hub(
    app: App, connect_socket: SocketConnect, opened: list[FrameClient]
) -> None:
    ours, theirs = socket.socketpair()
    # The broker's end takes little into the kernel: an unread reply stays with the broker.
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    assert app.tcp is not None
    app.tcp.adopt(trio.SocketStream(trio.socket.from_stdlib_socket(theirs)))
    worker = FrameClient(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    opened.append(worker)
    producer = await connect_socket()
    await worker.send(long_poll(0))
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 2
    big = "x" * (3 * 1024 * 1024)  # more than the worker's 1 MiB budget
    assert (await producer.call("PUSH", queue="q", data=big))["ok"] is True
    await trio.testing.wait_all_tasks_blocked()  # the parked poll is answered; nobody reads it
    assert parked(app) == 2
    handed_back = app.tcp.hub.reads_handed_back
    await worker.send({"cmd": "Count", "queue": "q", "reqId": "count"})
    await trio.testing.wait_all_tasks_blocked()
    # The hub leaves that read to the connection, which reads nothing more until the client
    # has read its reply.
    assert app.tcp.hub.reads_handed_back == handed_back + 1
    assert parked(app) == 1  # the producer only
    assert (await worker.receive())["job"]["data"] == big
    assert (await worker.receive())["count"] == 0
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 2  # back in the hub


async def test_a_client_gone_while_parked_gives_back_the_job_it_pulled(
    app: App, connect_socket: SocketConnect
) -> None:
    worker, other = await connect_socket(), await connect_socket()
    job_id = (await worker.call("PUSH", queue="q", data={}))["id"]
    assert (await worker.call("PULL", queue="q"))["job"]["id"] == job_id
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 2
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 1
    assert (await other.call("GetState", id=job_id))["state"] == "waiting"


async def test_a_reset_tcp_connection_is_closed_and_leaves_the_hub(nursery: trio.Nursery) -> None:
    app = App(Config(port=0, http_port=0, memory=True))
    listeners = await nursery.start(app.run)
    address = listeners[0].socket.getsockname()
    with socket.create_connection(address[:2]) as doomed, socket.create_connection(address[:2]):
        assert app.tcp is not None
        await trio.testing.wait_all_tasks_blocked()
        assert parked(app) == 2
        # Closing with a zero linger time sends a reset: the hub's read fails.
        doomed.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        doomed.close()
        await trio.testing.wait_all_tasks_blocked()
        assert len(app.tcp.connections) == 1 and parked(app) == 1
    app.shutdown()


async def test_a_bug_in_the_hub_leaves_the_read_to_the_connection(
    app: App, connect_socket: SocketConnect, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker.server.tcp import Connection

    def broken(self: Connection, chunk: bytes) -> None:
        raise RuntimeError("bug")

    client = await connect_socket()
    await trio.testing.wait_all_tasks_blocked()
    monkeypatch.setattr(Connection, "take_now", broken)
    reply = await client.call("PUSH", queue="q", data={})
    assert reply["ok"] is True  # the connection's own task served it
    assert app.tcp is not None and app.tcp.hub.reads_handed_back == 1


async def test_an_unauthenticated_connection_reads_for_itself_until_auth(
    nursery: trio.Nursery, opened: list[FrameClient]
) -> None:
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({"t"}))
    app = await start_app(nursery, config)
    client = await socket_connector(app, opened)()
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 0
    assert (await client.call("Auth", token="t"))["ok"] is True
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 1
    assert (await client.call("PUSH", queue="q", data={}))["ok"] is True
    app.shutdown()


async def test_shutdown_answers_a_parked_connection_and_closes_it(
    app: App, connect_socket: SocketConnect
) -> None:
    client = await connect_socket()
    await trio.testing.wait_all_tasks_blocked()
    assert parked(app) == 1
    app.shutdown()
    with trio.fail_after(10):
        with pytest.raises(EOFError):
            await client.receive()
    assert parked(app) == 0
