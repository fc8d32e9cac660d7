"""The WebSocket endpoint: commands as JSON or MessagePack, and job event subscriptions."""

from __future__ import annotations

import json

import msgspec
import trio
import trio.testing
import trio_websocket

from broker.events import DROPPED_SLOW, SUBSCRIBER_BUFFER
from broker.node.app import App
from tests.support.websocket import call, connect


async def test_json_and_msgpack_commands(app: App, nursery: trio.Nursery) -> None:
    socket = await connect(app, nursery)
    pushed = await call(socket, cmd="PUSH", queue="wq", name="n", data={"a": 1}, reqId="1")
    assert pushed["ok"] is True
    await socket.send_message(msgspec.msgpack.encode({"cmd": "PULL", "queue": "wq", "reqId": "2"}))
    reply = msgspec.msgpack.decode(await socket.get_message())
    assert (reply["reqId"], reply["job"]["id"], reply["job"]["data"]) == (
        "2",
        pushed["id"],
        {"a": 1},
    )
    bad = await call(socket, cmd="PUSH", queue="wq", data=1, delay="soon", reqId="3")
    assert bad["error"] == "delay must be a number"
    await socket.aclose()


async def test_subscribers_see_a_jobs_events_in_order(app: App, nursery: trio.Nursery) -> None:
    watcher = await connect(app, nursery)
    worker = await connect(app, nursery)
    ok = await call(watcher, cmd="Subscribe", events=["job:*"], queue="wq", reqId="s")
    assert ok["subscribed"] == ["job:*"]
    job_id = (await call(worker, cmd="PUSH", queue="wq", data=1, reqId="1"))["id"]
    await call(worker, cmd="PUSH", queue="other", data=1, reqId="2")
    await call(worker, cmd="PULL", queue="wq", reqId="3")
    await call(worker, cmd="ACK", id=job_id, result=7, reqId="4")
    seen = [json.loads(await watcher.get_message()) for _ in range(3)]
    assert [(e["event"], e["data"]["jobId"]) for e in seen] == [
        ("job:pushed", job_id), ("job:active", job_id), ("job:completed", job_id),
    ]  # fmt: skip
    assert (await call(watcher, cmd="Subscribe", events=["job:nope"], reqId="x"))["error"] == (
        "Invalid: job:nope"
    )
    await watcher.aclose()
    await worker.aclose()


async def test_a_slow_subscriber_is_told_and_dropped(app: App, nursery: trio.Nursery) -> None:
    watcher = await connect(app, nursery, lockstep=True)
    ok = await call(watcher, cmd="Subscribe", events=["job:pushed"], reqId="s")
    assert ok["ok"] is True
    producer = await connect(app, nursery)
    jobs = [{"data": i} for i in range(SUBSCRIBER_BUFFER + 50)]
    assert (await call(producer, cmd="PUSHB", queue="wq", jobs=jobs, reqId="b"))["ok"] is True
    last = None
    with trio.fail_after(30):
        while True:
            try:
                last = json.loads(await watcher.get_message())
            except trio_websocket.ConnectionClosed:
                break
    assert last == {"event": "subscription:dropped", "reason": DROPPED_SLOW}
    await producer.aclose()
