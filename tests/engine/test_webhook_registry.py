"""The webhook registry: which events a webhook takes, what ListWebhooks shows of it, and how
delivery outcomes are counted."""

from __future__ import annotations

import pytest

from broker.engine.components.webhooks import Delivered, Webhook, WebhookRegistry
from broker.engine.errors import EngineError
from protocol.webhooks import AddWebhook, ListWebhooks
from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.stores import StoreFactory


def event(name: str, queue: str | None = "q") -> dict[str, object]:
    """A job event as the bus hands it to the webhooks."""
    data: object = {"jobId": "j1", "queue": queue} if queue is not None else "no job"
    return {"event": name, "ts": 1.0, "data": data}


def hook(events: list[str], queue: str | None = None) -> Webhook:
    return Webhook("h1", "https://example.com/h", events, queue, None, True, 0.0)


def test_event_names_match_in_either_spelling_and_by_wildcard() -> None:
    completed = event("job:completed")
    for events in (["*"], ["job.*"], ["job:*"], ["job:completed"], ["job.completed"]):
        assert hook(events).wants(completed), events
    assert not hook(["job.failed", "job:active"]).wants(completed)


def test_a_webhook_for_one_queue_takes_only_that_queue_events() -> None:
    only_q = hook(["*"], queue="q")
    assert only_q.wants(event("job:completed", "q"))
    assert not only_q.wants(event("job:completed", "other"))
    assert not only_q.wants(event("job:completed", None))  # an event about no job's queue
    assert hook(["*"]).wants(event("job:completed", None))


async def test_list_webhooks_shows_each_field_but_the_secret(client: FrameClient) -> None:
    added = await client.call(
        "AddWebhook", url="https://example.com/h", events=["job.completed"], queue="q",
        secret="s3cret",
    )  # fmt: skip
    data = added["data"]
    assert added["ok"] is True
    assert data == {
        "webhookId": data["webhookId"], "url": "https://example.com/h",
        "events": ["job.completed"], "queue": "q", "createdAt": data["createdAt"],
    }  # fmt: skip
    off = await client.call("AddWebhook", url="https://example.com/off", events=["*"])
    await client.call("SetWebhookEnabled", id=off["data"]["webhookId"], enabled=False)
    reply = await client.call("ListWebhooks")
    listed = reply["data"]
    assert reply["ok"] is True
    assert listed["webhooks"][1]["enabled"] is False
    del listed["webhooks"][1]
    assert listed == {
        "webhooks": [{
            "id": data["webhookId"], "url": "https://example.com/h", "events": ["job.completed"],
            "queue": "q", "createdAt": data["createdAt"], "enabled": True, "lastTriggered": None,
            "successCount": 0, "failureCount": 0,
        }],
        "stats": {"total": 2, "enabled": 1},
    }  # fmt: skip


def test_deliveries_are_counted_per_outcome() -> None:
    registry = WebhookRegistry()
    added = registry.add(None, AddWebhook(url="https://example.com/h", events=["*"]), 5.0)  # type: ignore[arg-type]
    hook_id = added["data"]["webhookId"]
    for ok, when in ((True, 10.0), (True, 11.0), (False, 12.0), (False, 13.0), (False, 14.0)):
        registry.record_delivery(Delivered(hook_id, ok, when))
    registry.record_delivery(Delivered("removed-meanwhile", True, 15.0))
    listed = registry.list_all(None, ListWebhooks(), 20.0)["data"]  # type: ignore[arg-type]
    (summary,) = listed["webhooks"]
    assert (summary["successCount"], summary["failureCount"]) == (2, 3)
    assert summary["lastTriggered"] == 14.0


async def test_a_removed_webhook_stays_removed_after_a_restart(
    store_factory: StoreFactory,
) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        kept = await client.call("AddWebhook", url="https://example.com/kept", events=["*"])
        gone = await client.call("AddWebhook", url="https://example.com/gone", events=["*"])
        reply = await client.call("RemoveWebhook", webhookId=gone["data"]["webhookId"])
        assert (reply["ok"], reply["data"]) == (True, {"removed": True})
    async with broker.running() as connect:
        client = await connect()
        listed = (await client.call("ListWebhooks"))["data"]["webhooks"]
        assert [hook["id"] for hook in listed] == [kept["data"]["webhookId"]]


def test_a_registry_refuses_local_targets_unless_told_otherwise() -> None:
    # The safe default: an engine built without the broker's config (which may allow them).
    command = AddWebhook(url="http://localhost:9000/h", events=["*"])
    with pytest.raises(EngineError, match="cannot point to localhost"):
        WebhookRegistry().add(None, command, 0.0)  # type: ignore[arg-type]
    assert WebhookRegistry(allow_private=True).add(None, command, 0.0)["ok"] is True  # type: ignore[arg-type]
