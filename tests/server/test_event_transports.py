"""The event catalogue on each transport: WebSocket `Subscribe` (patterns add up, as in the
reference), TCP `SubscribeEvents` (with `events`, or the reference's default), SSE."""

from __future__ import annotations

import json

import trio
import trio.testing

from broker.node.app import App
from tests.support.client import FrameClient
from tests.support.engine import push
from tests.support.http import SseClient
from tests.support.websocket import call, connect


async def next_event(socket) -> dict:  # type: ignore[no-untyped-def]
    """The next message that is an event (not a reply)."""
    while True:
        message = json.loads(await socket.get_message())
        if "event" in message and "ok" not in message:
            return message


async def test_websocket_subscriptions_add_up_and_unsubscribe_by_name(
    app: App, nursery: trio.Nursery, client: FrameClient
) -> None:
    watcher = await connect(app, nursery)
    first = await call(watcher, cmd="Subscribe", events=["queue:paused"], reqId="1")
    second = await call(watcher, cmd="Subscribe", events=["worker:*", "queue:paused"], reqId="2")
    assert (first["subscribed"], second["subscribed"]) == (
        ["queue:paused"], ["queue:paused", "worker:*"],
    )  # fmt: skip
    await client.call("Pause", queue="mail")
    paused = await next_event(watcher)
    assert (paused["event"], paused["data"]) == ("queue:paused", {"queue": "mail"})
    assert isinstance(paused["ts"], int | float)
    left = await call(watcher, cmd="Unsubscribe", events=["queue:paused"], reqId="3")
    assert left["subscribed"] == ["worker:*"]
    await client.call("Resume", queue="mail")
    await client.call("Pause", queue="mail")
    await client.call("RegisterWorker", name="w", queues=["mail"])
    connected = await next_event(watcher)  # the pause in between was not sent
    assert (connected["event"], connected["data"]["workerId"]) == ("worker:connected", "w")
    assert (await call(watcher, cmd="Unsubscribe", reqId="4"))["subscribed"] == []
    await watcher.aclose()


async def test_websocket_subscribe_refuses_unknown_names_and_a_missing_list(
    app: App, nursery: trio.Nursery
) -> None:
    socket = await connect(app, nursery)
    refused = await call(socket, cmd="Subscribe", events=["queue:nope", "job:*"], reqId="1")
    assert refused == {"ok": False, "error": "Invalid: queue:nope", "reqId": "1"}
    missing = await call(socket, cmd="Subscribe", reqId="2")
    assert missing["error"] == "events must be a non-empty array"
    every = await call(socket, cmd="Subscribe", events=["*", "stats:snapshot", "dlq:*"], reqId="3")
    assert every["ok"] is True
    await socket.aclose()


async def test_tcp_subscribe_events_takes_event_names(
    app: App, client: FrameClient, connect: object
) -> None:
    reply = await client.call("SubscribeEvents", events=["worker:connected", "dlq:*"])
    assert reply["ok"] is True
    other = await connect()  # type: ignore[operator]
    await other.call("RegisterWorker", name="w", queues=["q"], hostname="h", pid=3)
    await push(other)  # no job event was asked for
    await other.call("PurgeDlq", queue="q")  # nothing to purge: no event
    frame = await client.receive()
    event = frame["event"]
    assert frame["type"] == "event" and isinstance(event.pop("timestamp"), float)
    assert event == {"workerId": "w", "name": "w", "queues": ["q"], "hostname": "h", "pid": 3,
                     "eventType": "worker:connected"}  # fmt: skip
    bad = await client.call("SubscribeEvents", events=["worker:gone"])
    assert bad["error"] == "Invalid: worker:gone"
    assert (await client.call("SubscribeEvents", events=[]))["error"] == (
        "events must be a non-empty array"
    )


async def test_tcp_default_subscription_hears_pause_and_resume_as_the_reference_sends_them(
    client: FrameClient, connect: object
) -> None:
    assert (await client.call("SubscribeEvents", queue="q"))["ok"] is True
    other = await connect()  # type: ignore[operator]
    await other.call("Pause", queue="elsewhere")
    await other.call("Pause", queue="q")
    await other.call("Resume", queue="q")
    await other.call("RegisterWorker", name="w", queues=["q"])  # not among the defaults
    job_id = await push(other)
    types = [(await client.receive())["event"] for _ in range(3)]
    assert [(e["eventType"], e["queue"], e["jobId"]) for e in types] == [
        ("paused", "q", ""), ("resumed", "q", ""), ("pushed", "q", job_id),
    ]  # fmt: skip


async def test_sse_streams_every_event_with_its_own_data(
    app: App, nursery: trio.Nursery, client: FrameClient
) -> None:
    stream = await SseClient.open(app, nursery, "/events/queues/mail")
    await stream.message()
    await client.call("Pause", queue="other")  # another queue's: not for this stream
    await client.call("Pause", queue="mail")
    await client.call("RegisterWorker", name="w", queues=["other"])  # names no queue: sent
    seen = []
    for _ in range(2):
        lines = dict(line.split(": ", 1) for line in (await stream.message()).split("\n"))
        seen.append((lines["event"], json.loads(lines["data"])))
    assert seen[0] == ("queue:paused", {"queue": "mail"})
    assert seen[1][0] == "worker:connected" and seen[1][1]["workerId"] == "w"
