"""HTTP requests to an in-process broker's HTTP port, and a Server-Sent Events client."""

from __future__ import annotations

import json
from typing import Any

import h11
import trio
import trio.testing

from broker.node.app import App


async def http(
    app: App, nursery: trio.Nursery, method: str, path: str, body: Any = None, token: str = ""
) -> tuple[int, str, bytes]:
    """One request over an in-memory connection: (status, content type, body)."""
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    connection = h11.Connection(h11.CLIENT)
    payload = b"" if body is None else json.dumps(body).encode()
    headers = [("host", "test"), ("content-length", str(len(payload)))]
    if token:
        headers.append(("authorization", f"Bearer {token}"))
    data = connection.send(h11.Request(method=method, target=path, headers=headers))
    await client.send_all(
        data + connection.send(h11.Data(data=payload)) + connection.send(h11.EndOfMessage())
    )
    status, content_type, received = 0, "", b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await client.receive_some(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
            content_type = dict(event.headers)[b"content-type"].decode()
        elif isinstance(event, h11.Data):
            received += event.data
        elif isinstance(event, h11.EndOfMessage):
            await client.aclose()
            return status, content_type, received


def get(path: str, method: str = "GET") -> bytes:
    """A request head that asks the server to close after answering."""
    return f"{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n".encode()


async def exchange(app: App, nursery: trio.Nursery, request: bytes) -> bytes:
    """Send raw request bytes; everything the server answers until it closes."""
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    await client.send_all(request)
    received = b""
    with trio.fail_after(120):  # the server's own timeouts close it well before
        while chunk := await client.receive_some(65536):
            received += chunk
    return received


class SseClient:
    """An SSE client on an in-memory connection: reads the response head, then messages."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.connection = h11.Connection(h11.CLIENT)
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.text = ""
        self.ended = False
        self.served = trio.Event()  # set when the server has finished with this connection

    @classmethod
    async def open(
        cls,
        app: App,
        nursery: trio.Nursery,
        path: str = "/events",
        headers: Any = (),
        stream_pair: Any = trio.testing.memory_stream_pair,
    ) -> SseClient:
        client_stream, server_stream = stream_pair()
        client = cls(client_stream)
        assert app.http is not None
        serve = app.http.serve_stream

        async def serve_then_mark() -> None:
            await serve(server_stream)
            client.served.set()

        nursery.start_soon(serve_then_mark)
        request = h11.Request(method="GET", target=path, headers=[("host", "t"), *headers])
        await client_stream.send_all(client.connection.send(request) or b"")
        await client.read_head()
        return client

    async def _next_event(self) -> Any:
        while True:
            event = self.connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.connection.receive_data(await self.stream.receive_some(65536))

    async def read_head(self) -> None:
        event = await self._next_event()
        assert isinstance(event, h11.Response)
        self.status = event.status_code
        self.headers = dict(event.headers)

    async def message(self) -> str:
        """The next SSE message (its lines without the blank line that ends it); '' at the end
        of the response."""
        while "\n\n" not in self.text:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                self.text += event.data.decode()
            else:
                self.ended = True
                return ""
        message, self.text = self.text.split("\n\n", 1)
        return message

    async def job_event(self) -> tuple[str, str, dict[str, Any]]:
        """The next job event as (id, event name, data), skipping heartbeats and the other
        events (`queue:counts` follows job events)."""
        while True:
            message = await self.message()
            if message == ":heartbeat":
                continue
            lines = dict(line.split(": ", 1) for line in message.split("\n"))
            if lines["event"].startswith("job:"):
                return lines["id"], lines["event"], json.loads(lines["data"])
