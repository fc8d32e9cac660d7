"""Webhooks: refused targets, signed deliveries with retries to a local receiver, persistence."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h11
import pytest
import trio

from broker.engine.components.webhooks import Delivered, Webhook, WebhookRegistry
from broker.node.config import Config
from broker.services.webhooks import WebhookDispatcher
from tests.support.app import Broker, memory_connector, start_app
from tests.support.client import FrameClient
from tests.support.engine import push
from tests.support.stores import StoreFactory


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


async def test_webhooks_survive_a_restart_and_can_be_disabled(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory, allow_private_webhooks=True)
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


LOCAL_FORMS = [
    "http://127.1",
    "http://2130706433",
    "http://0x7f000001",
    "http://017700000001",
    "http://0",
    "http://user@127.1",
    "http://localhost.",
    "http://[::1]",
    "http://[::ffff:127.0.0.1]",
    "http://[::ffff:7f00:1]",
    "http://[64:ff9b::7f00:1]",
    "http://[2002:7f00:1::1]",
]


@pytest.mark.parametrize(
    ("url", "error"),
    [(f"{form}:8080/hook", None) for form in LOCAL_FORMS]
    + [
        ("http://169.254.169.254./latest", "Webhook URL cannot point to cloud metadata endpoints"),
        ("http://2852039166/", "Webhook URL cannot point to cloud metadata endpoints"),
        ("http://0xa9fea9fe/", "Webhook URL cannot point to cloud metadata endpoints"),
        ("http://10.1/", "Webhook URL cannot point to private IP"),
        ("http://100.64.0.1/", "Webhook URL cannot point to private IP"),
        ("http://[fd00::1]/", "Webhook URL cannot point to private IP"),
        ("http://[fe80::1]/", "Webhook URL cannot point to link-local IP"),
        ("http://169.254.1.1/", "Webhook URL cannot point to link-local IP"),
        ("http://224.0.0.1/", "Webhook URL cannot point to multicast IP"),
        ("http://[ff02::1]/", "Webhook URL cannot point to multicast IP"),
        ("http://240.0.0.1/", "Webhook URL cannot point to reserved IP"),
        ("http://[::ffff:10.0.0.1]/", "Webhook URL cannot point to private IP"),
        ("http://example.com:99999/", "Invalid URL format"),
    ],
)
async def test_every_literal_form_of_a_private_address_is_refused(
    client: FrameClient, url: str, error: str | None
) -> None:
    reply = await client.call("AddWebhook", url=url, events=["job.completed"])
    assert not reply["ok"]
    if error is None:  # the local forms: loopback, unspecified or localhost, worded as such
        assert reply["error"].startswith("Webhook URL cannot point to ")
    else:
        assert reply["error"] == error
    assert (await client.call("ListWebhooks"))["data"]["webhooks"] == []


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/x", "http://93.184.215.14:8080/", "http://[2606:4700::1]/"]
)
async def test_public_targets_are_accepted(client: FrameClient, url: str) -> None:
    assert (await client.call("AddWebhook", url=url, events=["*"]))["ok"]


class Listener:
    """A local HTTP receiver that counts every connection that reaches it."""

    def __init__(self) -> None:
        self.receiver = Receiver([])
        self.connections = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        await self.receiver.handle(stream)

    async def start(self, nursery: trio.Nursery) -> int:
        serve = partial(trio.serve_tcp, self.handle, 0, host="127.0.0.1")
        [listener] = await nursery.start(serve)
        return int(listener.socket.getsockname()[1])


def fake_dns(answers: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    """A resolver that knows only `answers` (and numbers, which stand for themselves)."""

    async def resolve(host: str, port: int) -> list[str]:
        return answers.get(host, [host])

    return resolve


EVENT = {"event": "job:completed", "ts": 1.0, "data": {"jobId": "j1", "queue": "q"}}


async def deliver(dispatcher: WebhookDispatcher, url: str) -> bool:
    hook = Webhook("h1", url, ["*"], None, None, True, 0.0)
    async with dispatcher.open_client() as http:
        return await dispatcher.deliver(http, hook, EVENT)


class Reports(list[Delivered]):
    """The outcomes a dispatcher reports (to the actor, in the broker)."""

    async def report(self, outcome: Delivered) -> None:
        self.append(outcome)


def dispatcher_for(
    allow_private: bool, resolver: Any = None, reports: Reports | None = None
) -> WebhookDispatcher:
    registry = WebhookRegistry(allow_private)
    report = (reports if reports is not None else Reports()).report
    if resolver is None:
        return WebhookDispatcher(registry, report, retry_base_s=0.01)
    return WebhookDispatcher(registry, report, retry_base_s=0.01, resolver=resolver)


async def test_no_refused_form_reaches_a_local_listener_at_delivery(nursery: trio.Nursery) -> None:
    # Webhooks stored before the guard, or names whose DNS changed since they were added:
    # delivery checks again, on the addresses the host resolves to.
    listener = Listener()
    port = await listener.start(nursery)
    dns = fake_dns(
        {
            "rebound.example.com": ["127.0.0.1"],
            "mixed.example.com": ["93.184.215.14", "127.0.0.1"],
            "mapped.example.com": ["::ffff:127.0.0.1"],
        }
    )
    names = ["rebound.example.com", "mixed.example.com", "mapped.example.com"]
    real_dns = dispatcher_for(allow_private=False)
    reports = Reports()
    guarded = dispatcher_for(allow_private=False, resolver=dns, reports=reports)
    for form in LOCAL_FORMS:
        assert not await deliver(real_dns, f"{form}:{port}/hook"), form
    assert not await deliver(real_dns, f"http://localhost:{port}/hook")  # from /etc/hosts
    for name in names:
        assert not await deliver(guarded, f"http://{name}:{port}/hook"), name
    assert listener.connections == 0
    assert [outcome.ok for outcome in reports] == [False] * len(names)


async def test_delivery_connects_to_the_address_it_checked(nursery: trio.Nursery) -> None:
    # The name exists only in the fake resolver: were it looked up a second time (as a
    # rebinding attacker needs), the connection could not be made at all.
    listener = Listener()
    port = await listener.start(nursery)
    dispatcher = dispatcher_for(True, fake_dns({"hooks.example.test": ["127.0.0.1"]}))
    assert await deliver(dispatcher, f"http://hooks.example.test:{port}/hook")
    [(headers, body)] = listener.receiver.requests
    assert headers[b"host"] == f"hooks.example.test:{port}".encode()
    assert json.loads(body)["jobId"] == "j1"


async def test_redirects_are_not_followed(nursery: trio.Nursery) -> None:
    listener = Listener()
    listener.receiver.statuses = [302, 302, 302]
    port = await listener.start(nursery)
    assert not await deliver(dispatcher_for(True), f"http://127.0.0.1:{port}/hook")
    assert listener.connections == 3  # each attempt got its 302; none went anywhere else
