"""WebSocket connections and calls to an in-process broker."""

from __future__ import annotations

import json

import trio
import trio.testing
import trio_websocket

from broker.node.app import App


async def connect(
    app: App, nursery: trio.Nursery, lockstep: bool = False
) -> trio_websocket.WebSocketConnection:
    """A WebSocket client on the app's HTTP front, over memory streams (lockstep ones
    when asked)."""
    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    client, server = pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    return await trio_websocket.wrap_client_stream(nursery, client, "test", "/ws")


async def call(socket: trio_websocket.WebSocketConnection, **message: object) -> dict:
    """Send `message`; the reply that carries its reqId (events before it are skipped)."""
    await socket.send_message(json.dumps(message))
    while True:
        reply = json.loads(await socket.get_message())
        if reply.get("reqId") == message.get("reqId"):
            return reply
