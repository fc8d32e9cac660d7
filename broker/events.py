"""Job events for subscribers (WebSocket) and webhooks, published after each commit.

The engine collects the events of a pass (only while someone listens) and the actor hands
them here once the pass is committed, so nobody hears of a change that is not stored. Each
subscriber has a bounded buffer; a subscriber that falls that far behind is dropped with a
reason instead of slowing the engine or growing memory.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

import trio

EVENT_TYPES = (
    "pushed", "active", "progress", "completed", "failed", "retried", "delayed", "stalled",
    "removed",
)  # fmt: skip
SUBSCRIBER_BUFFER = 1000
DROPPED_SLOW = "subscriber too slow: its event buffer filled up"


def event_message(kind: str, job: Any, extra: dict[str, Any], now_ms: float) -> dict[str, Any]:
    """The message a subscriber receives: {event, ts, data: {queue, jobId, ...}}."""
    data: dict[str, Any] = {"queue": job.queue, "jobId": job.id, **extra}
    return {"event": f"job:{kind}", "ts": now_ms, "data": data}


# The reference's JobEvent type names, where trioq's differ.
REFERENCE_EVENT_TYPES = {"active": "pulled"}


def tcp_event_frame(message: dict[str, Any]) -> dict[str, Any]:
    """A bus message as the reference pushes it to a TCP subscriber (`SubscribeEvents`):
    `{type: "event", event: {eventType, queue, jobId, timestamp, ...}}`."""
    kind = message["event"].removeprefix("job:")
    event = dict(message["data"])
    event["eventType"] = REFERENCE_EVENT_TYPES.get(kind, kind)
    event["timestamp"] = float(message["ts"])
    return {"type": "event", "event": event}


class Subscription:
    """One subscriber: which events it wants, its bounded buffer, and why it was dropped."""

    def __init__(self, patterns: list[str], queue: str | None) -> None:
        self.patterns = patterns
        self.queue = queue
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](SUBSCRIBER_BUFFER)
        self.dropped: str | None = None

    def wants(self, message: dict[str, Any]) -> bool:
        """Whether the message matches this subscription's queue and event patterns."""
        if self.queue is not None and message["data"]["queue"] != self.queue:
            return False
        return any(fnmatch.fnmatchcase(message["event"], p) for p in self.patterns)


class EventBus:
    """Fans job events out to subscriptions and to other listeners (webhooks)."""

    def __init__(self) -> None:
        self.subscriptions: set[Subscription] = set()
        self.listeners: list[tuple[Callable[[dict[str, Any]], None], Callable[[], bool]]] = []
        self.on_change: Callable[[bool], None] = lambda listening: None

    def listening(self) -> bool:
        """Whether anyone would receive an event (the engine skips collecting otherwise)."""
        if self.subscriptions:
            return True
        # A loop, not any() over a generator: this runs on every pass.
        for _, active in self.listeners:  # noqa: SIM110
            if active():
                return True
        return False

    def subscribe(self, patterns: list[str], queue: str | None = None) -> Subscription:
        """Start a subscription; events published from now on reach it."""
        subscription = Subscription(patterns, queue)
        self.subscriptions.add(subscription)
        self.on_change(True)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """End a subscription."""
        self.subscriptions.discard(subscription)
        subscription.send.close()
        self.on_change(self.listening())

    def add_listener(
        self, listener: Callable[[dict[str, Any]], None], active: Callable[[], bool]
    ) -> None:
        """Call `listener(message)` for every event while `active()` (it must not block)."""
        self.listeners.append((listener, active))
        self.on_change(self.listening())

    def publish(self, messages: Iterable[dict[str, Any]]) -> None:
        """Deliver committed events; never blocks (a full subscriber is dropped)."""
        for message in messages:
            for listener, _ in self.listeners:
                listener(message)
            for subscription in list(self.subscriptions):
                if not subscription.wants(message):
                    continue
                try:
                    subscription.send.send_nowait(message)
                except trio.WouldBlock:
                    subscription.dropped = DROPPED_SLOW
                    self.unsubscribe(subscription)
