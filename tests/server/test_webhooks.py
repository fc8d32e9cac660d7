"""Webhooks: refused targets, signed deliveries with retries to a local receiver, persistence."""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import partial
from pathlib import Path

import h11
import pytest
import trio

from broker.config import Config
from tests.conftest import memory_connector, start_app
from tests.engine.test_push_pull import push
from tests.engine.test_restart import Broker
from tests.support.client import FrameClient


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://127.0.0.1/hook", "Webhook URL cannot point to loopback IP"),
        ("http://10.1.2.3/hook", "Webhook URL cannot point to private IP"),
        ("http://192.168.0.7/hook", "Webhook URL cannot point to private IP"),
        ("http://169.254.169.254/latest", "Webhook URL cannot point to cloud metadata endpoints"),
        (
            "http://metadata.google.internal/",
            "Webhook URL cannot point to cloud metadata endpoints",
        ),
        ("http://localhost:8080/", "Webhook URL cannot point to localhost"),
        ("http://0.0.0.0/", "Webhook URL cannot point to unspecified IP"),
        ("ftp://example.com/", "Webhook URL must use http or https protocol"),
    ],
)
async def test_private_targets_are_refused(client: FrameClient, url: str, error: str) -> None:
    reply = await client.call("AddWebhook", url=url, events=["job.completed"])
    assert reply["error"] == error
    assert (await client.call("ListWebhooks"))["data"]["webhooks"] == []


class Receiver:
    """A local HTTP endpoint that answers with the statuses it is given, then 200."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[tuple[dict[bytes, bytes], bytes]] = []
        self.got = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        headers: dict[bytes, bytes] = {}
        body = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                headers = dict(event.headers)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        self.requests.append((headers, body))
        status = self.statuses.pop(0) if self.statuses else 200
        reply = connection.send(h11.Response(status_code=status, headers=[("content-length", "0")]))
        await stream.send_all(reply + connection.send(h11.EndOfMessage()))
        await stream.aclose()
        if status == 200:
            self.got.set()


async def test_deliveries_are_signed_and_retried(nursery: trio.Nursery) -> None:
    receiver = Receiver([500])
    serve = partial(trio.serve_tcp, receiver.handle, 0, host="127.0.0.1")
    [listener] = await nursery.start(serve)
    port = listener.socket.getsockname()[1]
    config = Config(port=0, http_port=0, memory=True, allow_private_webhooks=True,
                    webhook_retry_s=0.01)  # fmt: skip
    app = await start_app(nursery, config)
    client = await memory_connector(app, nursery)()
    added = await client.call(
        "AddWebhook", url=f"http://127.0.0.1:{port}/hook", events=["job.completed"], secret="k"
    )
    hook_id = added["data"]["webhookId"]
    job_id = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=job_id, result=1)
    with trio.fail_after(10):
        await receiver.got.wait()
    assert len(receiver.requests) == 2  # a 500, then the retry
    headers, body = receiver.requests[-1]
    payload = json.loads(body)
    assert (payload["event"], payload["jobId"], payload["queue"]) == ("job.completed", job_id, "q")
    expected = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert headers[b"x-webhook-signature"] == expected.encode()
    listed = (await client.call("ListWebhooks"))["data"]["webhooks"]
    assert [(h["id"], h["successCount"], h["failureCount"]) for h in listed] == [(hook_id, 1, 0)]
    assert "secret" not in listed[0]
    app.shutdown()


async def test_webhooks_survive_a_restart_and_can_be_disabled(tmp_path: Path) -> None:
    broker = Broker(tmp_path, allow_private_webhooks=True)
    async with broker.running() as connect:
        client = await connect()
        added = await client.call("AddWebhook", url="http://127.0.0.1:9/h", events=["*"])
        hook_id = added["data"]["webhookId"]
        assert (await client.call("SetWebhookEnabled", id=hook_id, enabled=False))["ok"]
    async with broker.running() as connect:
        client = await connect()
        [hook] = (await client.call("ListWebhooks"))["data"]["webhooks"]
        assert (hook["id"], hook["enabled"]) == (hook_id, False)
        assert (await client.call("RemoveWebhook", webhookId=hook_id))["data"] == {"removed": True}
        assert (await client.call("RemoveWebhook", webhookId=hook_id))[
            "error"
        ] == "Webhook not found"
