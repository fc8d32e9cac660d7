"""Replies weighed, not only counted: a client that does not read its replies holds at most its
byte budget and one reply more, on TCP and WebSocket alike; all connections together stay near
a total; a reply larger than the budget still goes out whole; HTTP answers and subscribed events
count too; and the others are served meanwhile.

The clients that do not read are lockstep streams: what they do not read is not sent, so their
replies stay with the broker (a socket would take some into the kernel first)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
import trio_websocket

from broker.node.app import App
from broker.node.config import Config
from broker.server.unsent import MIB
from tests.support.app import memory_connector, start_app
from tests.support.client import FrameClient

JOB_BYTES = 300_000  # a PULL's reply is a little more
ONE_MIB_OF_REPLIES = 4  # three 300 kB replies fit in 1 MiB; the fourth goes past it


def lockstep_client(app: App) -> FrameClient:
    """A TCP connection with no buffering in between: what is not read is not sent."""
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    assert app.tcp is not None
    app.tcp.adopt(server_stream)
    return FrameClient(client_stream)


async def push_jobs(client: FrameClient, count: int, size: int = JOB_BYTES) -> None:
    jobs = [{"name": "n", "data": "x" * size} for _ in range(count)]
    assert (await client.call("PUSHB", queue="q", jobs=jobs))["ok"] is True


async def active(client: FrameClient) -> int:
    counts: dict[str, int] = (await client.call("GetJobCounts", queue="q"))["counts"]
    return counts["active"]


def pulls(count: int, prefix: str = "p") -> list[dict[str, Any]]:
    return [{"cmd": "PULL", "queue": "q", "reqId": f"{prefix}{i}"} for i in range(count)]


async def read_jobs(client: FrameClient, count: int, prefix: str = "p") -> list[dict[str, Any]]:
    """The next `count` replies, which must be jobs answering `pulls(count, prefix)` in order."""
    replies = [await client.receive() for _ in range(count)]
    assert [reply["reqId"] for reply in replies] == [f"{prefix}{i}" for i in range(count)]
    return [reply["job"] for reply in replies]


@pytest.fixture
async def budgets_app(nursery: trio.Nursery) -> App:
    """A broker allowing 4 MiB unread per connection and 1 MiB over all of them."""
    config = Config(port=0, http_port=0, memory=True, max_unsent_mib=4, max_unsent_total_mib=1)
    return await start_app(nursery, config)


async def test_a_client_that_does_not_read_gets_one_reply_past_its_budget_then_waits(
    app: App, client: FrameClient
) -> None:
    await push_jobs(client, 50)
    hog = lockstep_client(app)
    await hog.send(*pulls(50))  # read at once: 50 commands fit the in-flight cap
    await trio.testing.wait_all_tasks_blocked()
    assert await active(client) == ONE_MIB_OF_REPLIES  # the other 46 PULLs wait
    assert app.unsent.total < 2 * MIB
    assert (await client.call("Ping"))["ok"] is True
    # Nothing is lost: as the client reads, the rest run, in order.
    jobs = await read_jobs(hog, 50)
    assert all(len(job["data"]) == JOB_BYTES for job in jobs)
    assert len({job["id"] for job in jobs}) == 50 and await active(client) == 50
    await trio.testing.wait_all_tasks_blocked()
    assert app.unsent.total == 0


async def test_a_client_that_leaves_without_reading_frees_its_share_of_the_total(
    app: App, client: FrameClient
) -> None:
    await push_jobs(client, 10)
    hog = lockstep_client(app)
    await hog.send(*pulls(10))
    await trio.testing.wait_all_tasks_blocked()
    assert app.unsent.total > MIB
    await hog.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert app.unsent.total == 0
    assert await active(client) == 0  # what it pulled (no lease) is waiting again


async def test_a_reply_larger_than_the_budget_goes_out_whole_and_holds_back_the_next(
    app: App, client: FrameClient
) -> None:
    await push_jobs(client, 3, size=3 * MIB)
    hog = lockstep_client(app)
    await hog.send(*pulls(3))
    await trio.testing.wait_all_tasks_blocked()
    assert await active(client) == 1
    jobs = await read_jobs(hog, 3)
    assert [len(job["data"]) for job in jobs] == [3 * MIB] * 3


async def test_over_the_total_clients_holding_more_than_the_floor_wait_and_others_go_on(
    budgets_app: App, nursery: trio.Nursery
) -> None:
    client = await memory_connector(budgets_app, nursery)()
    await push_jobs(client, 61)
    hogs = [lockstep_client(budgets_app) for _ in range(3)]
    for hog in hogs:
        await hog.send(*pulls(20))
        await trio.testing.wait_all_tasks_blocked()
    # The first takes four replies (1.2 MB: past the 1 MiB total, within its own 4 MiB); the
    # others one each, as the total is spent. Each alone would have taken fourteen.
    assert await active(client) == ONE_MIB_OF_REPLIES + 2
    # A client that reads is served in full meanwhile, large replies and small.
    assert len((await client.call("PULL", queue="q"))["job"]["data"]) == JOB_BYTES
    await client.send(
        *({"cmd": "PUSH", "queue": "small", "data": i, "reqId": i} for i in range(10))
    )
    assert [(await client.receive())["reqId"] for _ in range(10)] == list(range(10))
    async with trio.open_nursery() as readers:
        for hog in hogs:
            readers.start_soon(read_jobs, hog, 20)
    assert await active(client) == 61


async def websocket(app: App, nursery: trio.Nursery) -> trio_websocket.WebSocketConnection:
    """A WebSocket over a lockstep stream, whose client keeps no message it was not asked for."""
    client, server = trio.testing.lockstep_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    return await trio_websocket.wrap_client_stream(
        nursery, client, "test", "/ws", message_queue_size=0
    )


async def test_a_websocket_that_does_not_read_is_held_to_its_budget_too(
    app: App, client: FrameClient, nursery: trio.Nursery
) -> None:
    await push_jobs(client, 50)
    socket = await websocket(app, nursery)

    async def send_pulls() -> None:  # the broker stops reading: this waits meanwhile
        for message in pulls(50):
            await socket.send_message(json.dumps(message))

    nursery.start_soon(send_pulls)
    await trio.testing.wait_all_tasks_blocked()
    # The budget and one reply (the client library took one more off the wire).
    assert await active(client) <= ONE_MIB_OF_REPLIES + 1
    assert app.unsent.total < 2 * MIB
    assert (await client.call("Ping"))["ok"] is True
    replies = [json.loads(await socket.get_message()) for _ in range(50)]
    assert [reply["reqId"] for reply in replies] == [f"p{i}" for i in range(50)]
    assert await active(client) == 50


async def fail_jobs(client: FrameClient, count: int, error: str) -> None:
    """Push, pull and fail `count` jobs (unrecoverable: each emits `job:failed`)."""
    await push_jobs(client, count, size=1)
    for _ in range(count):
        job = (await client.call("PULL", queue="q"))["job"]
        failed = await client.call("FAIL", id=job["id"], error=error, unrecoverable=True)
        assert failed["ok"] is True


async def test_a_tcp_subscriber_is_dropped_once_its_unread_events_pass_the_budget(
    app: App, client: FrameClient
) -> None:
    subscriber = lockstep_client(app)
    await subscriber.send({"cmd": "SubscribeEvents", "queue": "q", "reqId": "s"})
    await trio.testing.wait_all_tasks_blocked()
    # Ten events of 200 kB: far fewer than the 1,000 a subscriber may fall behind, but past
    # its 1 MiB budget.
    await fail_jobs(client, 10, error="e" * 200_000)
    await trio.testing.wait_all_tasks_blocked()
    assert app.tcp is not None and len(app.tcp.connections) == 1  # only `client` is left
    with pytest.raises(EOFError):
        while True:
            await subscriber.receive()


async def test_a_websocket_subscriber_is_dropped_once_its_unread_events_pass_the_budget(
    app: App, client: FrameClient, nursery: trio.Nursery
) -> None:
    socket = await websocket(app, nursery)
    await socket.send_message(json.dumps({"cmd": "Subscribe", "events": ["job:failed"]}))
    assert json.loads(await socket.get_message())["ok"] is True
    await fail_jobs(client, 10, error="e" * 200_000)
    await trio.testing.wait_all_tasks_blocked()
    assert app.actor is not None and not app.actor.bus.subscriptions
    last = None
    with pytest.raises(trio_websocket.ConnectionClosed):
        while True:
            last = json.loads(await socket.get_message())
    assert last is not None and last["event"] == "subscription:dropped"


async def test_an_http_answer_being_written_counts_in_the_total(
    budgets_app: App, nursery: trio.Nursery
) -> None:
    client = await memory_connector(budgets_app, nursery)()
    await push_jobs(client, 14)
    browser, server = trio.testing.lockstep_stream_pair()
    assert budgets_app.http is not None
    nursery.start_soon(budgets_app.http.serve_stream, server)
    await browser.send_all(
        b"GET /queues/q/jobs/list?state=waiting&limit=4 HTTP/1.1\r\nhost: t\r\n\r\n"
    )
    await trio.testing.wait_all_tasks_blocked()
    assert budgets_app.unsent.total > 4 * JOB_BYTES  # four jobs' data, not read
    # So a TCP client holding more than the floor unread is held back: one PULL of ten runs.
    hog = lockstep_client(budgets_app)
    await hog.send(*pulls(10))
    await trio.testing.wait_all_tasks_blocked()
    assert await active(client) == 1
    answer = b""
    while not answer.endswith(b"}"):
        answer += await browser.receive_some(1 << 20)
    assert len(json.loads(answer.partition(b"\r\n\r\n")[2])["jobs"]) == 4
    await read_jobs(hog, 10)
