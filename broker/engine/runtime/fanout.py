"""Fan-out: a stored pass's replies to their clients, then its events to their listeners.

During a pass every reply is staged in its session (`ReplySink.stage_reply`) and every job
event in the observers' `events`; nothing leaves before the pass's commit has returned (a client
never hears `ok` for a change that is not stored). Then `send_replies` sends them, on the loop.
A pass committed on a worker thread (commits.py) has its replies and events detached instead
(`detach`), and released once its commit returns (`release`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.clock import Clock
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.events import EventBus

Detached = tuple[list[Callable[[], None]], list[Any]]
"""A pass's replies (one sender per session) and its events, held for its commit."""


class Fanout:
    """The sessions with staged replies (`outbox`) and the event bus the pass's events go to."""

    def __init__(self, state: EngineState, clock: Clock, bus: EventBus) -> None:
        self.state = state
        self.clock = clock
        self.bus = bus
        # Sessions with staged replies register here (each transport's session is handed
        # this set); their replies are sent after the commit.
        self.outbox: set[ReplySink] = set()
        bus.on_change = self._listening

    def send_replies(self) -> None:
        """The pass is stored: send every staged reply, then publish the pass's events."""
        outbox = self.outbox
        for session in outbox:
            session.send_staged()
        outbox.clear()
        state = self.state
        observers = state.observers
        if observers.events:
            self.publish(observers.take_events())
        else:  # `publish` with nothing to publish, inline: most passes emit no event
            state.emitting = self.bus.listening()

    def detach(self) -> Detached:
        """Take the pass's staged replies and events, to be released after its commit (the
        next pass stages anew meanwhile)."""
        outbox = self.outbox
        releases = [session.take_staged() for session in outbox]
        outbox.clear()
        return releases, self.state.observers.take_events()

    def release(self, releases: list[Callable[[], None]], events: list[Any]) -> None:
        """Send a stored pass's detached replies, then publish its events (as `send_replies`)."""
        for release in releases:
            release()
        self.publish(events)

    def publish(self, events: list[Any]) -> None:
        """A pass is committed: now subscribers and webhooks may hear of its events."""
        if events:
            now = self.clock.now_ms()
            self.bus.publish_recorded(events, now)
            events.clear()
        self.state.emitting = self.bus.listening()  # webhooks may have come or gone

    def _listening(self, listening: bool) -> None:
        self.state.emitting = listening
