"""The webhook registry: a component of the engine.

Owns the registered webhooks, their delivery counts, and which of them changed since the last
commit (stored as records). Offers the engine its commands (AddWebhook, RemoveWebhook,
ListWebhooks, SetWebhookEnabled: `routes`), the webhooks an event goes to (`matching`), and
`record_delivery` for the outcome of a delivery. It touches nothing else of the engine.

Delivery itself (HTTP, signatures, retries) is not the engine's: broker/services/webhooks.py does it
outside the actor and reports each outcome back through the actor's inbox (`Delivered`), so
the counts only ever change inside the actor.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import msgspec

from broker.engine.errors import EngineError
from broker.engine.routing import Reply, Routes
from broker.engine.rules.webhook_policy import refused_target
from broker.engine.sink import ReplySink
from broker.engine.state.ids import uuid7
from protocol import lifecycle as lifecycle_cmd
from protocol import webhooks as cmd
from store import Record

WEBHOOK = "webhook"
NOT_FOUND = "Webhook not found"
_encode = msgspec.msgpack.Encoder().encode


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

    def wants(self, message: dict[str, object]) -> bool:
        """Whether this webhook takes the event (by name, and queue when it has one)."""
        data = message["data"]
        if self.queue is not None and (not isinstance(data, dict) or data["queue"] != self.queue):
            return False
        name = str(message["event"])  # "job:completed"
        dotted = name.replace(":", ".")
        return any(e in ("*", "job.*", "job:*", name, dotted) for e in self.events)


@attrs.define(slots=True)
class DeliveryStats:
    """What ListWebhooks shows of a webhook's deliveries since start-up (not stored)."""

    success_count: int = 0
    failure_count: int = 0
    last_triggered: float | None = None


@attrs.frozen
class Delivered:
    """The outcome of one delivery (or of one dropped for a full buffer), reported by the
    dispatcher through the actor's inbox."""

    hook_id: str
    ok: bool
    when: float


# A stored webhook is the `attrs.asdict` of one (`take_writes`): msgspec builds it back.
_decode_webhook = msgspec.msgpack.Decoder(Webhook).decode


class WebhookRegistry:
    """The registered webhooks and their delivery counts (see the module docstring)."""

    def __init__(self, allow_private: bool = False) -> None:
        self.allow_private = allow_private  # targets that are not globally routable
        self._hooks: dict[str, Webhook] = {}
        self._stats: dict[str, DeliveryStats] = {}
        # Ids of the webhooks changed since the last `take_writes` (stored.py).
        self.unstored: set[str] = set()
        # Records an event for the subscribers (the engine sets EngineState.announce).
        self.announce: Callable[[str, Reply], None] = lambda name, data: None

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.AddWebhook, self.add)
        routes.add(cmd.RemoveWebhook, self.remove)
        routes.add(cmd.ListWebhooks, self.list_all)
        routes.add(lifecycle_cmd.SetWebhookEnabled, self.set_enabled)
        return routes

    # -- commands ------------------------------------------------------------------------------

    def add(self, session: ReplySink, command: cmd.AddWebhook, now: float) -> Reply:
        """AddWebhook: the URL must be a permitted target."""
        refusal = refused_target(command.url, self.allow_private)
        if refusal is not None:
            raise EngineError(refusal)
        hook = Webhook(uuid7(), command.url, command.events, command.queue, command.secret,
                       True, now)  # fmt: skip
        self._hooks[hook.id] = hook
        self.unstored.add(hook.id)
        data = {"webhookId": hook.id, "url": hook.url, "events": hook.events,
                "queue": hook.queue, "createdAt": now}  # fmt: skip
        self.announce("webhook:added", {"id": hook.id, "url": hook.url, "events": hook.events})
        return {"ok": True, "data": data}

    def remove(self, session: ReplySink, command: cmd.RemoveWebhook, now: float) -> Reply:
        """RemoveWebhook."""
        if self._hooks.pop(command.webhookId, None) is None:
            raise EngineError(NOT_FOUND)
        self._stats.pop(command.webhookId, None)
        self.unstored.add(command.webhookId)
        self.announce("webhook:removed", {"id": command.webhookId})
        return {"ok": True, "data": {"removed": True}}

    def list_all(self, session: ReplySink, command: cmd.ListWebhooks, now: float) -> Reply:
        """ListWebhooks (never the secrets)."""
        hooks = [self._summary(hook) for hook in self._hooks.values()]
        enabled = sum(1 for hook in self._hooks.values() if hook.enabled)
        return {
            "ok": True,
            "data": {"webhooks": hooks, "stats": {"total": len(hooks), "enabled": enabled}},
        }

    def set_enabled(
        self, session: ReplySink, command: lifecycle_cmd.SetWebhookEnabled, now: float
    ) -> Reply:
        """SetWebhookEnabled: turn a webhook on or off without deleting it."""
        hook = self._hooks.get(command.id)
        if hook is None:
            raise EngineError(NOT_FOUND)
        hook.enabled = command.enabled
        self.unstored.add(hook.id)
        name = "webhook:enabled" if hook.enabled else "webhook:disabled"
        self.announce(name, {"webhookId": hook.id})
        return {"ok": True}

    def _summary(self, hook: Webhook) -> Reply:
        stats = self._stats.get(hook.id) or DeliveryStats()
        return {
            "id": hook.id,
            "url": hook.url,
            "events": hook.events,
            "queue": hook.queue,
            "createdAt": hook.created_at,
            "enabled": hook.enabled,
            "lastTriggered": stats.last_triggered,
            "successCount": stats.success_count,
            "failureCount": stats.failure_count,
        }

    # -- what the others use -------------------------------------------------------------------

    def has_enabled(self) -> bool:
        """Whether any enabled webhook exists (events are collected only then)."""
        # A loop, not any() over a generator: the actor asks on every pass.
        for hook in self._hooks.values():  # noqa: SIM110
            if hook.enabled:
                return True
        return False

    def matching(self, message: dict[str, object]) -> list[Webhook]:
        """The enabled webhooks that take this event."""
        return [hook for hook in self._hooks.values() if hook.enabled and hook.wants(message)]

    def record_delivery(self, outcome: Delivered) -> None:
        """Count a delivery's outcome (the actor calls this for a `Delivered` report)."""
        if outcome.hook_id not in self._hooks:
            return  # removed meanwhile
        stats = self._stats.setdefault(outcome.hook_id, DeliveryStats())
        if outcome.ok:
            stats.success_count += 1
        else:
            stats.failure_count += 1
        stats.last_triggered = outcome.when

    # -- persistence ---------------------------------------------------------------------------

    def take_writes(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Webhooks to write or delete since the last commit."""
        writes, deletes = [], []
        for webhook_id in self.unstored:
            hook = self._hooks.get(webhook_id)
            if hook is None:
                deletes.append((WEBHOOK, webhook_id))
            else:
                writes.append(Record(WEBHOOK, webhook_id, _encode(attrs.asdict(hook))))
        self.unstored.clear()
        return writes, deletes

    def restore(self, records: list[Record], now: float) -> None:
        """Start-up: load the stored webhooks (`now` is the protocol's, stored.py: unused)."""
        for record in records:
            if record.kind == WEBHOOK:
                hook = _decode_webhook(record.body)
                self._hooks[hook.id] = hook
