"""Server-sent events on the HTTP port: `GET /events` and `GET /events/queues/:queue`.

Every committed event (the reference's catalogue, events.py) is numbered and kept in one
bounded in-memory ring (the last RING_SIZE events) while some SSE client is connected (with
none, the bus does not call the ring). An SSE client is a cursor into that ring: it writes the
events after its cursor that match its queue (and those of no queue), all that are there in
one write, waits for more, and sends a `:heartbeat` comment when nothing happened for
HEARTBEAT_S. So a client costs no buffer of its own, each event is formatted once for all
clients, and `Last-Event-ID` replay comes for free: a client that reconnects with it gets the
events it missed if the ring still holds them. Each event's `data` is the event's own data, as
the reference sends it.

A slow client is dropped, never buffered without bound: a write that does not finish within
SEND_TIMEOUT_S, or a cursor that the ring has overtaken (more than RING_SIZE events behind),
ends its response. The browser's EventSource (and the dashboard) reconnects after `retry`.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from typing import Any

import trio

from .dashboard import whole_number

RING_SIZE = 1000
HEARTBEAT_S = 15.0
SEND_TIMEOUT_S = 10.0
RETRY_MS = 3000
MAX_CLIENTS = 1000
CONTENT_TYPE = "text/event-stream"


class EventRing:
    """The last `size` job events, numbered from 1, each formatted for SSE at most once (for
    every client that writes it), and a way to wait for the next one."""

    def __init__(self, size: int = RING_SIZE) -> None:
        self.events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=size)
        self.last_id = 0
        self._formatted: dict[int, bytes] = {}  # by event id, while the ring holds the event
        self._changed = trio.Event()

    def append(self, message: dict[str, Any]) -> None:
        """Number and keep one event, and wake every waiting client (never blocks)."""
        events = self.events
        if len(events) == events.maxlen and self._formatted:
            self._formatted.pop(events[0][0], None)  # it is about to leave the ring
        self.last_id += 1
        events.append((self.last_id, message))
        self._changed.set()  # (replaced by the next `wait`: one per wake-up, not per event)

    def formatted(self, event_id: int, message: dict[str, Any]) -> bytes:
        """The event as SSE bytes (`format_event`), made once for all clients."""
        data = self._formatted.get(event_id)
        if data is None:
            data = self._formatted[event_id] = format_event(event_id, message)
        return data

    def oldest_id(self) -> int:
        """The id of the oldest event still held (last_id + 1 when empty)."""
        return self.last_id - len(self.events) + 1

    def since(self, cursor: int) -> list[tuple[int, dict[str, Any]]] | None:
        """The events after `cursor`; None when some of them were already overwritten."""
        first = self.oldest_id()
        if cursor < first - 1:
            return None
        skip = cursor - first + 1
        return list(itertools.islice(self.events, skip, None))

    def start_cursor(self, last_event_id: str | None) -> int:
        """Where a new client starts: after `Last-Event-ID` when the ring still holds what
        followed it (else at the oldest event held), otherwise at the newest event."""
        wanted = None if last_event_id is None else whole_number(last_event_id)
        if wanted is None:
            return self.last_id
        return min(max(wanted, self.oldest_id() - 1), self.last_id)

    async def wait(self) -> None:
        """Until the next event is appended (the caller has read every event so far: no
        event may come between its last `since` and this call)."""
        if self._changed.is_set():
            self._changed = trio.Event()
        await self._changed.wait()


def format_event(event_id: int, message: dict[str, Any]) -> bytes:
    """One SSE event as the reference sends it: `id`, `event` (e.g. `job:completed`) and the
    event's data as `data` (a job event's with its `timestamp`: `{queue, jobId, timestamp,
    ...}`)."""
    body = message["data"]
    if message["event"].startswith("job:"):
        body = {"queue": body["queue"], "jobId": body["jobId"], "timestamp": message["ts"], **body}
    data = json.dumps(body, separators=(",", ":"), default=str)
    return f"id: {event_id}\nevent: {message['event']}\ndata: {data}\n\n".encode()


def greeting(client_id: str) -> bytes:
    """The first message: the reconnect delay and who this client is."""
    data = json.dumps({"connected": True, "clientId": client_id})
    return f"retry: {RETRY_MS}\ndata: {data}\n\n".encode()


HEARTBEAT = b":heartbeat\n\n"


def wanted(message: dict[str, Any], queue: str | None) -> bool:
    """Whether a client watching `queue` (None: every queue) gets this event: one of that
    queue, or one that names no queue (a worker's, the periodic snapshots)."""
    if queue is None:
        return True
    data = message.get("data")
    named = data.get("queue") if isinstance(data, dict) else None
    return named is None or named == queue


class ClientTooSlow(Exception):
    """The client fell more than the ring behind; its response ends."""


async def stream_events(
    ring: EventRing,
    cursor: int,
    queue: str | None,
    send: Any,
) -> None:
    """Write events after `cursor` (and heartbeats) through `send(bytes)` until cancelled;
    raises ClientTooSlow when the ring overtook this client or a write takes too long."""
    while True:
        pending = ring.since(cursor)
        if pending is None:
            raise ClientTooSlow
        if pending:
            # Every pending event this client wants, in one write.
            chunks = [
                ring.formatted(i, message) for i, message in pending if wanted(message, queue)
            ]
            cursor = pending[-1][0]
            if chunks:
                await _send_in_time(send, b"".join(chunks))
            continue
        with trio.move_on_after(HEARTBEAT_S) as quiet:
            await ring.wait()
        if quiet.cancelled_caught:
            await _send_in_time(send, HEARTBEAT)


async def _send_in_time(send: Any, data: bytes) -> None:
    with trio.move_on_after(SEND_TIMEOUT_S) as late:
        await send(data)
    if late.cancelled_caught:
        raise ClientTooSlow
