"""Webhooks: job events POSTed as JSON, signed, retried, never blocking the engine.

The engine owns the registry (AddWebhook, RemoveWebhook, ListWebhooks, SetWebhookEnabled;
stored as records). The dispatcher listens on the event bus after each commit, queues a
delivery per matching webhook in a bounded buffer (a full buffer drops the delivery and counts
it as failed), and worker tasks POST them with an HMAC-SHA256 signature of the body when the
webhook has a secret, retrying with growing pauses.

Targets on private, loopback, link-local or unspecified addresses, `localhost` and cloud
metadata names are refused unless the operator allows private targets; host names are
checked as written (they are not resolved when the webhook is added).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
import msgspec
import trio

from protocol import webhooks as cmd
from store import Record

from .engine.errors import EngineError
from .engine.model import uuid7
from .engine.state import EngineState

log = logging.getLogger(__name__)

WEBHOOK = "webhook"
NOT_FOUND = "Webhook not found"
DELIVERY_BUFFER = 10_000
ATTEMPTS = 3
TIMEOUT_S = 10.0
Reply = dict[str, Any]
_json = msgspec.json.Encoder().encode
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(dict[str, Any]).decode


def refused_target(url: str, allow_private: bool) -> str | None:
    """Why `url` may not receive webhooks, or None when it may."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "Invalid URL format"
    if parts.scheme not in ("http", "https"):
        return "Webhook URL must use http or https protocol"
    host = (parts.hostname or "").lower()
    if not host:
        return "Invalid URL format"
    if allow_private:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return "Webhook URL cannot point to localhost"
    if host == "169.254.169.254" or host.endswith(".internal"):
        return "Webhook URL cannot point to cloud metadata endpoints"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    for test, words in (
        (address.is_loopback, "loopback IP"),
        (address.is_link_local, "link-local IP"),
        (address.is_unspecified, "unspecified IP"),
        (address.is_private, "private IP"),
    ):
        if test:
            return f"Webhook URL cannot point to {words}"
    return None


@attrs.define(slots=True, eq=False)
class Webhook:
    """One registered webhook."""

    id: str
    url: str
    events: list[str]
    queue: str | None
    secret: str | None
    enabled: bool
    created_at: float

    def wants(self, message: dict[str, Any]) -> bool:
        """Whether this webhook takes the event (by name, and queue when it has one)."""
        if self.queue is not None and message["data"]["queue"] != self.queue:
            return False
        name = message["event"]  # "job:completed"
        dotted = name.replace(":", ".")
        return any(e in ("*", "job.*", "job:*", name, dotted) for e in self.events)

    def summary(self, stats: dict[str, Any]) -> Reply:
        """How ListWebhooks shows it (never the secret)."""
        return {
            "id": self.id,
            "url": self.url,
            "events": self.events,
            "queue": self.queue,
            "createdAt": self.created_at,
            "enabled": self.enabled,
            "lastTriggered": stats.get("lastTriggered"),
            "successCount": stats.get("successCount", 0),
            "failureCount": stats.get("failureCount", 0),
        }


class WebhookHandlers:
    """AddWebhook, RemoveWebhook, ListWebhooks, SetWebhookEnabled (mixed into Engine)."""

    state: EngineState
    webhooks: dict[str, Webhook]
    webhook_stats: dict[str, dict[str, Any]]
    changed_webhooks: set[str]
    allow_private_webhooks: bool

    def webhook_handlers(self) -> dict[type, Any]:
        """Command type -> handler, for the engine's dispatch table."""
        return {
            cmd.AddWebhook: self.add_webhook,
            cmd.RemoveWebhook: self.remove_webhook,
            cmd.ListWebhooks: self.list_webhooks,
        }

    def add_webhook(self, session: Any, command: cmd.AddWebhook, now: float) -> Reply:
        """AddWebhook: the URL must be a permitted target."""
        refusal = refused_target(command.url, self.allow_private_webhooks)
        if refusal is not None:
            raise EngineError(refusal)
        hook = Webhook(uuid7(), command.url, command.events, command.queue, command.secret,
                       True, now)  # fmt: skip
        self.webhooks[hook.id] = hook
        self.changed_webhooks.add(hook.id)
        data = {"webhookId": hook.id, "url": hook.url, "events": hook.events,
                "queue": hook.queue, "createdAt": now}  # fmt: skip
        return {"ok": True, "data": data}

    def remove_webhook(self, session: Any, command: cmd.RemoveWebhook, now: float) -> Reply:
        """RemoveWebhook."""
        if self.webhooks.pop(command.webhookId, None) is None:
            raise EngineError(NOT_FOUND)
        self.changed_webhooks.add(command.webhookId)
        return {"ok": True, "data": {"removed": True}}

    def list_webhooks(self, session: Any, command: Any, now: float) -> Reply:
        """ListWebhooks."""
        hooks = [h.summary(self.webhook_stats.get(h.id, {})) for h in self.webhooks.values()]
        enabled = sum(1 for hook in self.webhooks.values() if hook.enabled)
        return {
            "ok": True,
            "data": {"webhooks": hooks, "stats": {"total": len(hooks), "enabled": enabled}},
        }

    def set_webhook_enabled(self, session: Any, command: Any, now: float) -> Reply:
        """SetWebhookEnabled: turn a webhook on or off without deleting it."""
        hook = self.webhooks.get(command.id)
        if hook is None:
            raise EngineError(NOT_FOUND)
        hook.enabled = command.enabled
        self.changed_webhooks.add(hook.id)
        return {"ok": True}

    def take_webhook_writes(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Webhooks to write or delete since the last commit."""
        writes, deletes = [], []
        for webhook_id in self.changed_webhooks:
            hook = self.webhooks.get(webhook_id)
            if hook is None:
                deletes.append((WEBHOOK, webhook_id))
            else:
                writes.append(Record(WEBHOOK, webhook_id, _encode(attrs.asdict(hook))))
        self.changed_webhooks.clear()
        return writes, deletes

    def has_webhooks(self) -> bool:
        """Whether any enabled webhook exists (events are collected only then)."""
        return any(hook.enabled for hook in self.webhooks.values())

    def restore_webhooks(self, records: list[Record]) -> None:
        """Load stored webhooks."""
        for record in records:
            if record.kind == WEBHOOK:
                hook = Webhook(**_decode(record.body))
                self.webhooks[hook.id] = hook


def signature(body: bytes, secret: str) -> str:
    """The hex HMAC-SHA256 of the body with the webhook's secret."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookDispatcher:
    """Queues deliveries from the event bus and POSTs them from worker tasks."""

    def __init__(self, engine: Any, retry_base_s: float = 1.0, workers: int = 4) -> None:
        self.engine = engine
        self.retry_base_s = retry_base_s
        self.workers = workers
        self.stats: dict[str, dict[str, Any]] = engine.webhook_stats
        self.send, self.receive = trio.open_memory_channel[tuple[Webhook, dict[str, Any]]](
            DELIVERY_BUFFER
        )

    def on_event(self, message: dict[str, Any]) -> None:
        """Bus listener: queue a delivery per enabled webhook that wants the event."""
        for hook in self.engine.webhooks.values():
            if hook.enabled and hook.wants(message):
                try:
                    self.send.send_nowait((hook, message))
                except trio.WouldBlock:
                    self._count(hook, ok=False, when=message["ts"])  # dropped, never waited for

    async def run(self) -> None:
        """Deliver until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client, trio.open_nursery() as nursery:
            for _ in range(self.workers):
                nursery.start_soon(self._deliver_loop, client)

    async def _deliver_loop(self, client: httpx.AsyncClient) -> None:
        async for hook, message in self.receive:
            await self.deliver(client, hook, message)

    async def deliver(self, client: httpx.AsyncClient, hook: Webhook, message: dict) -> bool:
        """POST one event, retrying; returns whether a 2xx answer came."""
        data = message["data"]
        payload = {"event": message["event"].replace(":", "."), "timestamp": message["ts"],
                   "jobId": data["jobId"], "queue": data["queue"],
                   **{k: v for k, v in data.items() if k not in ("jobId", "queue")}}  # fmt: skip
        body = _json(payload)
        headers = {"content-type": "application/json", "x-webhook-event": payload["event"],
                   "x-webhook-timestamp": str(int(message["ts"]))}  # fmt: skip
        if hook.secret:
            headers["x-webhook-signature"] = signature(body, hook.secret)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = await client.post(hook.url, content=body, headers=headers)
                if 200 <= response.status_code < 300:
                    self._count(hook, ok=True, when=message["ts"])
                    return True
            except httpx.HTTPError as exc:
                log.info("webhook %s: delivery failed: %s", hook.id, exc)
            if attempt < ATTEMPTS:
                await trio.sleep(self.retry_base_s * attempt)
        self._count(hook, ok=False, when=message["ts"])
        return False

    def _count(self, hook: Webhook, ok: bool, when: float) -> None:
        stats = self.stats.setdefault(hook.id, {})
        key = "successCount" if ok else "failureCount"
        stats[key] = stats.get(key, 0) + 1
        stats["lastTriggered"] = when
