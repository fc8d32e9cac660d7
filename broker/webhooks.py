"""Webhooks: job events POSTed as JSON, signed, retried, never blocking the engine.

The engine owns the registry (AddWebhook, RemoveWebhook, ListWebhooks, SetWebhookEnabled;
stored as records). The dispatcher listens on the event bus after each commit, queues a
delivery per matching webhook in a bounded buffer (a full buffer drops the delivery and counts
it as failed), and worker tasks POST them with an HMAC-SHA256 signature of the body when the
webhook has a secret, retrying with growing pauses.

Targets that are not globally routable are refused unless the operator allows private
targets: when the webhook is added (the host as written) and again at each delivery (every
address it resolves to, and the connection goes to the address checked); see
webhook_targets.py. Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

import attrs
import httpcore
import msgspec
import trio

from protocol import webhooks as cmd
from store import Record

from .engine.errors import EngineError
from .engine.model import uuid7
from .engine.sink import ReplySink
from .engine.state import EngineState
from .webhook_targets import GuardedBackend, RefusedTarget, Resolver, refused_target, resolve

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

    def add_webhook(self, session: ReplySink, command: cmd.AddWebhook, now: float) -> Reply:
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

    def remove_webhook(self, session: ReplySink, command: cmd.RemoveWebhook, now: float) -> Reply:
        """RemoveWebhook."""
        if self.webhooks.pop(command.webhookId, None) is None:
            raise EngineError(NOT_FOUND)
        self.changed_webhooks.add(command.webhookId)
        return {"ok": True, "data": {"removed": True}}

    def list_webhooks(self, session: ReplySink, command: Any, now: float) -> Reply:
        """ListWebhooks."""
        hooks = [h.summary(self.webhook_stats.get(h.id, {})) for h in self.webhooks.values()]
        enabled = sum(1 for hook in self.webhooks.values() if hook.enabled)
        return {
            "ok": True,
            "data": {"webhooks": hooks, "stats": {"total": len(hooks), "enabled": enabled}},
        }

    def set_webhook_enabled(self, session: ReplySink, command: Any, now: float) -> Reply:
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

    def __init__(
        self,
        engine: Any,
        retry_base_s: float = 1.0,
        workers: int = 4,
        resolver: Resolver = resolve,
    ) -> None:
        self.engine = engine
        self.retry_base_s = retry_base_s
        self.workers = workers
        self.resolver = resolver
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

    def open_client(self) -> httpcore.AsyncConnectionPool:
        """The HTTP client deliveries go through: connections only to permitted addresses
        (see GuardedBackend), no proxies from the environment, no redirects followed."""
        backend = GuardedBackend(self.engine.allow_private_webhooks, self.resolver)
        return httpcore.AsyncConnectionPool(network_backend=backend)

    async def run(self) -> None:
        """Deliver until cancelled."""
        async with self.open_client() as client, trio.open_nursery() as nursery:
            for _ in range(self.workers):
                nursery.start_soon(self._deliver_loop, client)

    async def _deliver_loop(self, client: httpcore.AsyncConnectionPool) -> None:
        async for hook, message in self.receive:
            await self.deliver(client, hook, message)

    async def deliver(
        self, client: httpcore.AsyncConnectionPool, hook: Webhook, message: dict
    ) -> bool:
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
                status = await post(client, hook.url, body, headers)
                if 200 <= status < 300:
                    self._count(hook, ok=True, when=message["ts"])
                    return True
            except RefusedTarget as exc:
                log.warning("webhook %s: refused target: %s", hook.id, exc)
                break  # retrying would ask the same resolver about the same name
            except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
                    httpcore.UnsupportedProtocol, trio.TooSlowError) as exc:  # fmt: skip
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


async def post(
    client: httpcore.AsyncConnectionPool, url: str, body: bytes, headers: dict[str, str]
) -> int:
    """POST `body` to `url` (the response body is read and dropped); returns the status."""
    with trio.fail_after(TIMEOUT_S):
        response = await client.request("POST", url, headers=list(headers.items()), content=body)
    return response.status
