"""Events for subscribers (WebSocket, SSE, TCP) and webhooks, published after each commit.

The event catalogue is the reference's (its WebSocket `Subscribe` accepts these names, `*` and
`<family>:*`): job events (`job:completed`, ...) carry `{queue, jobId, ...}`; the others name
what changed (`queue:paused` `{queue}`, `worker:connected` `{workerId, name, ...}`, ...), and
`queue:counts`, `stats:snapshot` and `health:status` come from broadcasts.py. A message is
`{event, ts, data}`.

The engine collects the events of a pass (only while someone listens) and the actor hands them
here once the pass is committed, so nobody hears of a change that is not stored. A message is
built only when an active listener wants its name or a subscriber takes it (its name, then its
queue: a subscriber that names a queue gets only that queue's events and those of no queue).
A publish is one fan-out: each listener is asked once whether it is active, each subscriber is
handed its share of the pass in one call, in order, and each message is encoded once for all
the subscribers of one transport (`DirectSubscription`: TCP and WebSocket, sent from the
publishing task, with no task hop per event; `Subscription`: a bounded channel). A batch's job
events (a run: one kind, one queue, no extra data) are routed once, and TCP and WebSocket
encode a run in one call around the job ids, with no message built. A subscriber
that falls too far behind is dropped with a reason instead of slowing the engine or growing
memory; so is one whose events cannot be encoded or delivered (a bug), never the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

log = logging.getLogger(__name__)

# Every event name a subscription may name: the reference's catalogue, by family.
CATALOGUE: dict[str, tuple[str, ...]] = {
    "job": (
        "pushed", "active", "completed", "failed", "removed", "promoted", "progress", "delayed",
        "stalled", "retried", "discarded", "priority-changed", "data-updated", "delay-changed",
        "timeout", "lock-expired", "deduplicated", "waiting-children", "dependencies-resolved",
        "moved-to-delayed", "expired",
    ),
    "queue": (
        "created", "removed", "paused", "resumed", "drained", "cleaned", "obliterated",
        "counts", "idle", "threshold",
    ),
    "dlq": ("added", "retried", "retry-all", "purged", "auto-retried", "expired"),
    "flow": ("completed", "failed"),
    "cron": ("created", "updated", "deleted", "fired", "missed", "skipped"),
    "worker": (
        "connected", "disconnected", "heartbeat", "idle", "removed-stale", "overloaded", "error",
    ),
    "ratelimit": ("set", "cleared", "hit", "rejected"),
    "concurrency": ("set", "cleared", "rejected"),
    "webhook": ("added", "removed", "fired", "failed", "enabled", "disabled"),
    "batch": ("pushed", "pulled"),
    "client": ("connected", "disconnected"),
    "auth": ("failed",),
    "cleanup": ("orphans-removed", "stale-deps-removed"),
    "health": ("status",),
    "stats": ("snapshot",),
    "storage": ("status", "backup-started", "backup-completed", "backup-failed", "size-warning"),
    "server": ("started", "shutdown", "recovered", "memory-warning"),
    "memory": ("compacted",),
    "config": ("stall-changed", "dlq-changed"),
}  # fmt: skip
EVENT_NAMES = frozenset(f"{family}:{name}" for family, names in CATALOGUE.items() for name in names)
VALID_PATTERNS = EVENT_NAMES | {"*"} | {f"{family}:*" for family in CATALOGUE}
JOB_EVENTS = frozenset(name for name in EVENT_NAMES if name.startswith("job:"))
JOB_EVENT_NAMES = {kind: f"job:{kind}" for kind in CATALOGUE["job"]}  # "active": "job:active"
# What the broker publishes by itself, on a timer (broadcasts.py), not from the engine.
PERIODIC_EVENTS = frozenset({"health:status", "stats:snapshot"})

# What a TCP `SubscribeEvents` without `events` gets: the job events the reference sends its
# TCP subscribers, and a queue's pause and resume (its QueueEvents hear `paused`, `resumed`).
TCP_DEFAULT_PATTERNS = [
    "job:pushed", "job:active", "job:completed", "job:failed", "job:progress", "job:stalled",
    "job:removed", "job:delayed", "job:retried", "queue:paused", "queue:resumed",
]  # fmt: skip

SUBSCRIBER_BUFFER = 1000
DROPPED_SLOW = "subscriber too slow: its event buffer filled up"
DROPPED_FAILED = "its events could not be delivered (a bug, logged)"


def invalid_patterns(patterns: Iterable[str]) -> list[str]:
    """The patterns that name no event of the catalogue (nor `*`, nor `<family>:*`)."""
    return [pattern for pattern in patterns if pattern not in VALID_PATTERNS]


def names_matching(patterns: Iterable[str]) -> frozenset[str]:
    """The event names the patterns select (`*`: all; `job:*`: every job event)."""
    names: set[str] = set()
    for pattern in patterns:
        if pattern == "*":
            return EVENT_NAMES
        if pattern.endswith(":*"):
            family = pattern[:-2]
            names.update(f"{family}:{name}" for name in CATALOGUE.get(family, ()))
        elif pattern in EVENT_NAMES:
            names.add(pattern)
    return frozenset(names)


def event_message(kind: str, job: Any, extra: dict[str, Any], now_ms: float) -> dict[str, Any]:
    """The message a subscriber receives, `{event, ts, data}`, from what the engine recorded:
    a job event (`kind` such as "completed", with its job) gets `data: {queue, jobId, ...}`;
    any other event is named in full (`kind` "queue:paused", no job) and `extra` is its data."""
    if job is None:
        return {"event": kind, "ts": now_ms, "data": extra}
    data: dict[str, Any] = {"queue": job.queue, "jobId": job.id}
    if extra:
        data.update(extra)
    return {"event": JOB_EVENT_NAMES.get(kind) or f"job:{kind}", "ts": now_ms, "data": data}


# The reference's JobEvent type names (what its TCP subscribers and QueueEvents read), where
# the event's own name is not `job:<type>`.
REFERENCE_EVENT_TYPES = {
    "job:active": "pulled", "queue:paused": "paused", "queue:resumed": "resumed",
}  # fmt: skip


# Each event's `eventType` on TCP, worked out once for the whole catalogue.
TCP_EVENT_TYPES = {
    name: REFERENCE_EVENT_TYPES.get(name, name[4:] if name.startswith("job:") else name)
    for name in EVENT_NAMES
}
_NO_JOB_ID = frozenset({"queue:paused", "queue:resumed"})  # sent with `jobId: ""`


def tcp_event_frame(message: dict[str, Any]) -> dict[str, Any]:
    """A bus message as the reference pushes it to a TCP subscriber (`SubscribeEvents`):
    `{type: "event", event: {eventType, queue, jobId, timestamp, ...}}`. A job event's type is
    the reference's (`pulled`, `completed`...), as are `paused` and `resumed` (with `jobId: ""`,
    as the reference sends them); other events keep their full name (`worker:connected`)."""
    name = message["event"]
    data = message["data"]
    if name in _NO_JOB_ID and "jobId" not in data:
        data = {**data, "jobId": ""}
    event_type = TCP_EVENT_TYPES.get(name, name)
    event = {**data, "eventType": event_type, "timestamp": float(message["ts"])}
    return {"type": "event", "event": event}


class Subscriber:
    """One subscriber: which events it wants (names, and a queue or every queue) and why it
    was dropped. The bus hands it each publish's events for it at once (`take`)."""

    encode: Callable[[dict[str, Any]], Any] | None = None
    """How this subscriber wants each message, computed once per message for every subscriber
    sharing the same `encode` (None: the message itself)."""

    encode_jobs: Callable[[str, str, list[Any], float], list[Any]] | None = None
    """Optional, beside `encode`: `encode_jobs(name, queue, jobs, now_ms)` makes, in one call,
    what `encode` makes of each job's event `name` with no extra data, in order (a batch's
    events; None: `encode` is called per message)."""

    def __init__(self, patterns: list[str], queue: str | None) -> None:
        self.patterns = list(dict.fromkeys(patterns))  # as given, repeats dropped
        self.names = names_matching(self.patterns)
        self.queue = queue
        self.dropped: str | None = None
        self.pending: list[Any] = []  # its events of the publish under way (EventBus)
        self.failed = False  # whether one of them could not be encoded (a bug)

    def wants(self, message: dict[str, Any]) -> bool:
        """Whether the message matches this subscription's names and queue (an event that
        names no queue reaches every subscriber of its name)."""
        if message["event"] not in self.names:
            return False
        if self.queue is None:
            return True
        queue = message["data"].get("queue") if isinstance(message["data"], dict) else None
        return queue is None or queue == self.queue

    def take(self, items: list[Any]) -> str | None:
        """One publish's events for this subscriber, in order (each what `encode` made of its
        message); never blocks. Returns why the subscriber must be dropped, or None."""
        raise NotImplementedError

    def close(self) -> None:
        """The subscription has ended: nothing more will be taken."""

    def on_dropped(self) -> None:
        """The bus dropped this subscriber (`dropped` says why) and unsubscribed it."""


class Subscription(Subscriber):
    """A subscriber reading messages from a bounded channel (`receive`): one that falls
    SUBSCRIBER_BUFFER messages behind is dropped."""

    def __init__(self, patterns: list[str], queue: str | None) -> None:
        super().__init__(patterns, queue)
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](SUBSCRIBER_BUFFER)

    def take(self, items: list[Any]) -> str | None:
        """Put the messages in the channel; a full one drops the subscriber."""
        send = self.send.send_nowait
        for message in items:
            try:
                send(message)
            except trio.WouldBlock:
                return DROPPED_SLOW
        return None

    def close(self) -> None:
        """End the channel (the reader still gets what it holds)."""
        self.send.close()


class DirectSubscription(Subscriber):
    """A subscriber handed each publish's events in one call, in the publishing task (no task
    hop per event): `deliver(items)`, each item `encode(message)`. Every subscriber with the
    same `encode` shares one encoding of a message. `deliver` must not block; it returns why
    the subscriber must be dropped, or None. Once the bus has dropped it (for that reason, or
    because delivering failed) and unsubscribed it, it calls `on_dropped()`: the transport
    then tells its client and disconnects it."""

    def __init__(
        self,
        patterns: list[str],
        queue: str | None,
        encode: Callable[[dict[str, Any]], Any],
        deliver: Callable[[list[Any]], str | None],
        on_dropped: Callable[[], None],
        encode_jobs: Callable[[str, str, list[Any], float], list[Any]] | None = None,
    ) -> None:
        super().__init__(patterns, queue)
        self.encode = encode
        self.encode_jobs = encode_jobs
        self.deliver = deliver
        self._on_dropped = on_dropped

    def take(self, items: list[Any]) -> str | None:
        """Hand the encoded events over."""
        return self.deliver(items)

    def on_dropped(self) -> None:
        """Tell the transport."""
        self._on_dropped()


Listener = Callable[[dict[str, Any]], None]


class EventBus:
    """Fans events out to subscriptions and to other listeners (webhooks, the SSE ring)."""

    def __init__(self) -> None:
        self.subscriptions: set[Subscriber] = set()
        self.listeners: list[tuple[Listener, Callable[[], bool], frozenset[str]]] = []
        self.on_change: Callable[[bool], None] = lambda listening: None
        # The subscriptions that want each name (only names some subscription wants are keys),
        # and how many subscriptions want any the engine records.
        self._by_name: dict[str, list[Subscriber]] = {}
        self._engine_subscribers = 0
        # Called with each job event's queue while someone wants `queue:counts` (broadcasts).
        self.on_queue_touched: Callable[[str], None] | None = None
        self._changed = trio.Event()  # set (and replaced) when who listens may have changed

    def listening(self) -> bool:
        """Whether anyone would receive an event the engine records (it skips collecting
        otherwise): a subscriber of any but the periodic ones, or an active listener."""
        if self._engine_subscribers:
            return True
        # A loop, not any() over a generator: this runs on every pass.
        for _, active, _ in self.listeners:  # noqa: SIM110
            if active():
                return True
        return False

    def wants(self, name: str) -> bool:
        """Whether some subscriber or active listener would receive an event of this name."""
        if name in self._by_name:
            return True
        for _, active, names in self.listeners:  # noqa: SIM110
            if name in names and active():
                return True
        return False

    def listeners_changed(self) -> None:
        """Who listens may have changed (a subscription, or a listener's `active()`): the
        engine and the broadcasts look again."""
        self.on_change(self.listening())
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        """Until `listeners_changed` is next called."""
        await self._changed.wait()

    def subscribe(self, patterns: list[str], queue: str | None = None) -> Subscription:
        """Start a subscription read from a channel; events published from now on reach it."""
        subscription = Subscription(patterns, queue)
        self._add(subscription)
        return subscription

    def subscribe_direct(
        self,
        patterns: list[str],
        queue: str | None,
        encode: Callable[[dict[str, Any]], Any],
        deliver: Callable[[list[Any]], str | None],
        on_dropped: Callable[[], None],
        encode_jobs: Callable[[str, str, list[Any], float], list[Any]] | None = None,
    ) -> DirectSubscription:
        """Start a subscription handed each publish's events at once (see DirectSubscription;
        `encode_jobs` is `Subscriber.encode_jobs`)."""
        subscription = DirectSubscription(
            patterns, queue, encode, deliver, on_dropped, encode_jobs
        )
        self._add(subscription)
        return subscription

    def _add(self, subscription: Subscriber) -> None:
        self.subscriptions.add(subscription)
        self._count(subscription, 1)
        self.listeners_changed()

    def change(self, subscription: Subscriber, patterns: list[str]) -> None:
        """Give a live subscription other patterns (WebSocket Subscribe/Unsubscribe); one
        that was dropped stays dropped."""
        if subscription not in self.subscriptions:
            return
        self._count(subscription, -1)
        subscription.patterns = list(dict.fromkeys(patterns))
        subscription.names = names_matching(subscription.patterns)
        self._count(subscription, 1)
        self.listeners_changed()

    def unsubscribe(self, subscription: Subscriber) -> None:
        """End a subscription."""
        if subscription in self.subscriptions:
            self.subscriptions.discard(subscription)
            self._count(subscription, -1)
        subscription.close()
        self.listeners_changed()

    def _count(self, subscription: Subscriber, step: int) -> None:
        by_name = self._by_name
        for name in subscription.names:
            if step > 0:
                # Beside those sharing its encoder, so a message is encoded once for them all.
                wanting = by_name.setdefault(name, [])
                at = len(wanting)
                for index, other in enumerate(wanting):
                    if other.encode is subscription.encode:
                        at = index + 1
                wanting.insert(at, subscription)
            else:
                wanting = by_name[name]
                wanting.remove(subscription)
                if not wanting:
                    del by_name[name]
        if subscription.names - PERIODIC_EVENTS:
            self._engine_subscribers += step

    def add_listener(
        self,
        listener: Listener,
        active: Callable[[], bool],
        names: frozenset[str] = JOB_EVENTS,
    ) -> None:
        """Call `listener(message)` for every event of `names` (job events unless told)
        while `active()` (it must not block)."""
        self.listeners.append((listener, active, names))
        self.listeners_changed()

    def _active_listeners(self) -> list[tuple[Listener, frozenset[str]]]:
        """The listeners to call in this publish (asked once, not per event)."""
        called = []
        for listener, active, names in self.listeners:  # a loop: cheaper than a comprehension
            if active():
                called.append((listener, names))
        return called

    def publish_recorded(
        self, events: Iterable[tuple[str, Any, dict[str, Any]]], now_ms: float
    ) -> None:
        """Publish what the engine recorded in a committed pass, `(kind, job, extra)` each
        (see `event_message`). An event that no active listener wants and no subscriber
        takes (by name, then by queue) is skipped before its message is built; each
        subscriber is handed its share of the pass at once. Consecutive job events of one
        kind and queue with no extra data (a batch's jobs) go out as one run: who takes them
        is worked out once, and a transport with `encode_jobs` encodes them in one call."""
        listeners = self._active_listeners()
        touched = None
        if "queue:counts" in self._by_name:
            touched = self.on_queue_touched
        else:
            for _, names in listeners:  # a loop, not any(<generator>): this runs every pass
                if "queue:counts" in names:
                    touched = self.on_queue_touched
                    break
        takers: list[Subscriber] = []
        run: list[Any] = []  # the jobs of the run under way, all of `run_kind` and `run_queue`
        run_kind = run_queue = ""
        for kind, job, extra in events:
            if job is not None and not extra:
                queue = job.queue
                if kind == run_kind and queue == run_queue:
                    run.append(job)
                    continue
                if run:
                    self._publish_run(run_kind, run_queue, run, now_ms, listeners, takers)
                run, run_kind, run_queue = [job], kind, queue
                if touched is not None:
                    touched(queue)  # once per run: it notes the queue in a set
                continue
            if run:
                self._publish_run(run_kind, run_queue, run, now_ms, listeners, takers)
                run, run_kind, run_queue = [], "", ""
            if job is None:
                name, queue = kind, extra.get("queue")
            else:
                name, queue = JOB_EVENT_NAMES.get(kind) or f"job:{kind}", job.queue
                if touched is not None:
                    touched(queue)
            self._publish_one(name, queue, kind, job, extra, now_ms, listeners, takers)
        if run:
            self._publish_run(run_kind, run_queue, run, now_ms, listeners, takers)
        self._hand_over(takers)

    def _publish_one(
        self,
        name: str,
        queue: str | None,
        kind: str,
        job: Any,
        extra: dict[str, Any],
        now_ms: float,
        listeners: list[tuple[Listener, frozenset[str]]],
        takers: list[Subscriber],
    ) -> None:
        """One recorded event: its message is built only if someone takes it."""
        message = None
        subscribers = self._by_name.get(name)
        if subscribers is not None:
            for subscriber in subscribers:
                if subscriber.queue is None or queue is None or subscriber.queue == queue:
                    message = event_message(kind, job, extra, now_ms)
                    _add_to_pending(takers, subscribers, queue, message)
                    break
        for listener, names in listeners:
            if name in names:
                if message is None:
                    message = event_message(kind, job, extra, now_ms)
                listener(message)

    def _publish_run(
        self,
        kind: str,
        queue: str,
        jobs: list[Any],
        now_ms: float,
        listeners: list[tuple[Listener, frozenset[str]]],
        takers: list[Subscriber],
    ) -> None:
        """Job events of one kind and queue with no extra data, in order: each subscriber that
        takes them gets them all, encoded once per encoder (in one `encode_jobs` call where its
        transport has one); messages are built only for listeners and plain encoders."""
        name = JOB_EVENT_NAMES.get(kind) or f"job:{kind}"
        # Loops, not comprehensions: they run for every run, and are mostly of one item.
        wanting = []
        plain = False  # whether some subscriber needs the messages (no `encode_jobs`)
        for subscriber in self._by_name.get(name, ()):
            if subscriber.queue is None or subscriber.queue == queue:
                wanting.append(subscriber)
                if subscriber.encode_jobs is None:
                    plain = True
        called = []
        for listener, names in listeners:
            if name in names:
                called.append(listener)
        if not wanting and not called:
            return
        messages = None
        if called or plain:
            messages = [event_message(kind, job, {}, now_ms) for job in jobs]
            for message in messages:  # each event to every listener, in order, as one by one
                for listener in called:
                    listener(message)
        last_encode: Any = None
        last_jobs: Any = None
        items: list[Any] = []
        for subscriber in wanting:  # those sharing an encoder are listed together (`_count`)
            encode = subscriber.encode
            if encode is None:
                items = messages  # type: ignore[assignment]
            elif encode is not last_encode or subscriber.encode_jobs is not last_jobs:
                last_encode, last_jobs = encode, subscriber.encode_jobs
                items = _encode_run(subscriber, name, queue, jobs, messages, now_ms)
            pending = subscriber.pending
            if not pending:
                takers.append(subscriber)
            if items is _FAILED_RUN:
                subscriber.failed = True
            else:
                pending.extend(items)

    def publish(self, messages: Iterable[dict[str, Any]]) -> None:
        """Deliver committed events; never blocks (a subscriber that cannot take them is
        dropped)."""
        listeners = self._active_listeners()
        by_name = self._by_name
        takers: list[Subscriber] = []
        for message in messages:
            name = message["event"]
            for listener, names in listeners:
                if name in names:
                    listener(message)
            subscribers = by_name.get(name)
            if subscribers is not None:
                data = message["data"]
                queue = data.get("queue") if isinstance(data, dict) else None
                _add_to_pending(takers, subscribers, queue, message)
        self._hand_over(takers)

    def _hand_over(self, takers: list[Subscriber]) -> None:
        """Give each subscriber its events of this publish; drop those that cannot take them."""
        for subscriber in takers:
            batch, subscriber.pending = subscriber.pending, []
            try:
                reason = DROPPED_FAILED if subscriber.failed else subscriber.take(batch)
            except Exception:  # a bug in a transport costs its subscriber, never the engine
                log.exception("an event subscriber failed; it is dropped")
                reason = DROPPED_FAILED
            if reason is not None:
                subscriber.dropped = reason
                self.unsubscribe(subscriber)
                subscriber.on_dropped()


_UNENCODABLE = object()  # what an encoder that raised made of a message
_FAILED_RUN: list[Any] = []  # what encoders that raised made of a run (never extended)


def _encode_run(
    subscriber: Subscriber,
    name: str,
    queue: str,
    jobs: list[Any],
    messages: list[dict[str, Any]] | None,
    now_ms: float,
) -> list[Any]:
    """A run of job events as this subscriber's encoder makes them (`encode_jobs` in one go,
    or `encode` per message); `_FAILED_RUN` if it raised (a bug, logged)."""
    try:
        if subscriber.encode_jobs is not None:
            return subscriber.encode_jobs(name, queue, jobs, now_ms)
        encode = subscriber.encode
        assert encode is not None and messages is not None
        return [encode(message) for message in messages]
    except Exception:  # a bug: it costs the subscribers of this encoder, not the engine
        log.exception("events %s could not be encoded", name)
        return _FAILED_RUN


def _add_to_pending(
    takers: list[Subscriber], subscribers: list[Subscriber], queue: str | None, message: Any
) -> None:
    """Add `message` to the pending events of each of its name's subscribers that takes
    `queue` (an event of no queue reaches all of them), listing in `takers` each subscriber
    that had none yet; encoded once per encoder (subscribers sharing an encoder are listed
    together, see `EventBus._count`)."""
    last_encode: Any = None
    last_item: Any = None
    for subscriber in subscribers:
        wanted = subscriber.queue
        if wanted is not None and queue is not None and wanted != queue:
            continue
        encode = subscriber.encode
        if encode is None:
            item = message
        elif encode is last_encode:
            item = last_item
        else:
            last_encode = encode
            try:
                item = last_item = encode(message)
            except Exception:  # a bug: it costs the subscribers of this encoder, not the engine
                log.exception("event %s could not be encoded", message.get("event"))
                item = last_item = _UNENCODABLE
        if item is _UNENCODABLE:
            subscriber.failed = True
        pending = subscriber.pending
        if not pending:
            takers.append(subscriber)
        pending.append(item)
