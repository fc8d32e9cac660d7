"""Webhook delivery: job events POSTed as JSON, signed, retried, never blocking the engine.

The engine owns the registry (engine/components/webhooks.py: AddWebhook, RemoveWebhook,
ListWebhooks, SetWebhookEnabled; stored as records, with the delivery counts). The dispatcher
listens on the event bus after each commit, queues a delivery per matching webhook in a bounded
buffer, and worker tasks POST them with an HMAC-SHA256 signature of the body when the webhook has a
secret, retrying with growing pauses. Each outcome (a full buffer drops the delivery: a failure)
goes back to the registry through the actor (`report`, normally `EngineActor.submit`): the counts
change only inside the actor.

Targets that are not globally routable are refused unless the operator allows private
targets: when the webhook is added (the host as written) and again at each delivery (every
address it resolves to, and the connection goes to the address checked); see
webhook_targets.py. Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpcore
import msgspec
import trio

from ..engine.components.webhooks import Delivered, Webhook, WebhookRegistry
from .webhook_targets import GuardedBackend, RefusedTarget, Resolver, resolve

# Named as before the move to broker/services/: operators filter and alert on it.
log = logging.getLogger("broker.webhooks")

__all__ = ["Webhook", "WebhookDispatcher", "post", "signature"]

DELIVERY_BUFFER = 10_000
ATTEMPTS = 3
TIMEOUT_S = 10.0
_json = msgspec.json.Encoder().encode
Report = Callable[[Delivered], Awaitable[None]]


def signature(body: bytes, secret: str) -> str:
    """The hex HMAC-SHA256 of the body with the webhook's secret."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookDispatcher:
    """Queues deliveries from the event bus and POSTs them from worker tasks."""

    def __init__(
        self,
        registry: WebhookRegistry,
        report: Report,
        retry_base_s: float = 1.0,
        workers: int = 4,
        resolver: Resolver = resolve,
    ) -> None:
        self.registry = registry
        self.report = report
        self.retry_base_s = retry_base_s
        self.workers = workers
        self.resolver = resolver
        self.send, self.receive = trio.open_memory_channel[tuple[Webhook, dict[str, Any]]](
            DELIVERY_BUFFER
        )
        # Outcomes of deliveries dropped by on_event (which runs in the actor's task and must
        # not wait), reported by a task of their own.
        self._dropped: list[Delivered] = []
        self._dropped_lot = trio.lowlevel.ParkingLot()

    def on_event(self, message: dict[str, Any]) -> None:
        """Bus listener (called by the actor after a commit): queue a delivery per enabled
        webhook that wants the event."""
        for hook in self.registry.matching(message):
            try:
                self.send.send_nowait((hook, message))
            except trio.WouldBlock:  # dropped, never waited for: a failure
                self._dropped.append(Delivered(hook.id, ok=False, when=message["ts"]))
                self._dropped_lot.unpark_all()

    def open_client(self) -> httpcore.AsyncConnectionPool:
        """The HTTP client deliveries go through: connections only to permitted addresses
        (see GuardedBackend), no proxies from the environment, no redirects followed."""
        backend = GuardedBackend(self.registry.allow_private, self.resolver)
        return httpcore.AsyncConnectionPool(network_backend=backend)

    async def run(self) -> None:
        """Deliver until cancelled."""
        async with self.open_client() as client, trio.open_nursery() as nursery:
            for _ in range(self.workers):
                nursery.start_soon(self._deliver_loop, client)
            nursery.start_soon(self._report_dropped)

    async def _deliver_loop(self, client: httpcore.AsyncConnectionPool) -> None:
        async for hook, message in self.receive:
            await self.deliver(client, hook, message)

    async def _report_dropped(self) -> None:
        while True:
            while not self._dropped:
                await self._dropped_lot.park()
            dropped, self._dropped = self._dropped, []
            for outcome in dropped:
                await self.report(outcome)

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
                    await self.report(Delivered(hook.id, ok=True, when=message["ts"]))
                    return True
            except RefusedTarget as exc:
                log.warning("webhook %s: refused target: %s", hook.id, exc)
                break  # retrying would ask the same resolver about the same name
            except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
                    httpcore.UnsupportedProtocol, trio.TooSlowError) as exc:  # fmt: skip
                log.info("webhook %s: delivery failed: %s", hook.id, exc)
            if attempt < ATTEMPTS:
                await trio.sleep(self.retry_base_s * attempt)
        await self.report(Delivered(hook.id, ok=False, when=message["ts"]))
        return False


async def post(
    client: httpcore.AsyncConnectionPool, url: str, body: bytes, headers: dict[str, str]
) -> int:
    """POST `body` to `url` (the response body is read and dropped); returns the status."""
    with trio.fail_after(TIMEOUT_S):
        response = await client.request("POST", url, headers=list(headers.items()), content=body)
    return response.status
