"""Queue settings: pause, rate limit, concurrency and the stall config (a component).

The settings live on each QueueState (PULL reads them there); this component is the only
writer of the queue-level ones, and the one that stores every queue's settings record (with
the dead-letter and group settings, which deadletters.py and groups.py set and mark changed in
`ChangeLog.changed_settings`). Stored as records, so they survive a restart.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from broker.engine.routing import Routes
from broker.engine.rules.dlq import apply_dlq_config
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.queues import QueueState
from protocol import CommandError
from protocol import admin as cmd
from store import Record

QUEUE = "queue"
# stallInterval 0: no stall detection unless set here or by a job's own stallTimeout (a job on
# a long lease, silent, is not a stalled job). gracePeriod is kept for the reply's shape.
DEFAULT_STALL_CONFIG = {"enabled": True, "stallInterval": 0, "maxStalls": 3, "gracePeriod": 0}
Reply = dict[str, Any]
# Its name before the engine was split into layers: operators filter on it.
log = logging.getLogger("broker.engine.settings")

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(dict[str, Any]).decode


def settings_record(queue: QueueState) -> Record:
    """A queue's settings as a stored record."""
    body = {
        "paused": queue.paused,
        "rateLimit": queue.rate_limit,
        "concurrency": queue.concurrency,
        "stallConfig": queue.stall_config,
        "dlqConfig": queue.dlq_config,
        "groups": queue.group_settings,
    }
    return Record(QUEUE, queue.name, _encode(body))


class QueueSettings:
    """Pause, Resume, IsPaused, RateLimit(Clear), Set/ClearConcurrency, Set/GetStallConfig;
    restores and stores every queue's settings record."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        # The queues whose settings changed since the last `take_writes` (stored.py): the
        # state's set, since other components change settings too (groups, DLQ, admin).
        self.unstored = state.changes.changed_settings

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.Pause, self.pause)
        routes.add(cmd.Resume, self.resume)
        routes.add(cmd.IsPaused, self.is_paused)
        routes.add(cmd.RateLimit, self.rate_limit)
        routes.add(cmd.RateLimitClear, self.rate_limit_clear)
        routes.add(cmd.SetConcurrency, self.set_concurrency)
        routes.add(cmd.ClearConcurrency, self.clear_concurrency)
        routes.add(cmd.SetStallConfig, self.set_stall_config)
        routes.add(cmd.GetStallConfig, self.get_stall_config)
        return routes

    def _settable(self, name: str) -> QueueState:
        """The queue a setting is given to, made if new (within --max-queues)."""
        self.state.queues.admit((name,), self.state.now)
        return self.state.queues.make(name)

    def _changed(self, queue: QueueState) -> None:
        """A setting of `queue` changed: store it; one undone may leave the queue idle."""
        self.state.changes.note_setting(queue.name)
        self.state.queues.note_emptied(queue, self.state.now)

    def pause(self, session: ReplySink, command: cmd.Pause, now: float) -> Reply:
        """Pause: pulls get nothing from this queue until Resume (pushes still land)."""
        queue = self._settable(command.queue)
        queue.set_paused(True)
        self._changed(queue)
        self.state.announce("queue:paused", {"queue": queue.name})
        return {"ok": True}

    def resume(self, session: ReplySink, command: cmd.Resume, now: float) -> Reply:
        """Resume: parked pulls are served at once (a queue that does not exist is not
        paused: nothing to do)."""
        queue = self.state.queues.get(command.queue)
        if queue is not None:
            queue.set_paused(False)
            self._changed(queue)
            self.state.changes.note_dirty(queue)
        self.state.announce("queue:resumed", {"queue": command.queue})
        return {"ok": True}

    def is_paused(self, session: ReplySink, command: cmd.IsPaused, now: float) -> Reply:
        """IsPaused."""
        queue = self.state.queues.get(command.queue)
        return {"ok": True, "paused": bool(queue and queue.paused)}

    def rate_limit(self, session: ReplySink, command: cmd.RateLimit, now: float) -> Reply:
        """RateLimit: at most `limit` jobs of the queue start per second."""
        queue = self._settable(command.queue)
        queue.limit_rate(command.limit, now)
        self._changed(queue)
        # trioq's rate limit is per second: the reference's event names that window
        event = {"queue": queue.name, "max": command.limit, "duration": 1000}
        self.state.announce("ratelimit:set", event)
        return {"ok": True}

    def rate_limit_clear(
        self, session: ReplySink, command: cmd.RateLimitClear, now: float
    ) -> Reply:
        """RateLimitClear."""
        queue = self.state.queues.get(command.queue)
        if queue is not None:
            queue.limit_rate(None, now)
            self._changed(queue)
            self.state.changes.note_dirty(queue)
        self.state.announce("ratelimit:cleared", {"queue": command.queue})
        return {"ok": True}

    def set_concurrency(self, session: ReplySink, command: cmd.SetConcurrency, now: float) -> Reply:
        """SetConcurrency: at most `limit` jobs of the queue active at once."""
        queue = self._settable(command.queue)
        queue.limit_concurrency(command.limit)
        self._changed(queue)
        self.state.changes.note_dirty(queue)
        event = {"queue": queue.name, "concurrency": command.limit}
        self.state.announce("concurrency:set", event)
        return {"ok": True}

    def clear_concurrency(
        self, session: ReplySink, command: cmd.ClearConcurrency, now: float
    ) -> Reply:
        """ClearConcurrency."""
        queue = self.state.queues.get(command.queue)
        if queue is not None:
            queue.limit_concurrency(None)
            self._changed(queue)
            self.state.changes.note_dirty(queue)
        self.state.announce("concurrency:cleared", {"queue": command.queue})
        return {"ok": True}

    def set_stall_config(
        self, session: ReplySink, command: cmd.SetStallConfig, now: float
    ) -> Reply:
        """SetStallConfig: merged into the queue's (stallInterval applies to jobs without
        their own stallTimeout; maxStalls to every stall count)."""
        queue = self._settable(command.queue)
        queue.merge_stall_config(command.config)
        self._changed(queue)
        event = {"queue": queue.name, "config": command.config}
        self.state.announce("config:stall-changed", event)
        return {"ok": True}

    def get_stall_config(
        self, session: ReplySink, command: cmd.GetStallConfig, now: float
    ) -> Reply:
        """GetStallConfig: the defaults merged with what was set."""
        queue = self.state.queues.get(command.queue)
        config = {**DEFAULT_STALL_CONFIG, **(queue.stall_config if queue else {})}
        return {"ok": True, "config": config}

    def restore(self, records: list[Record], now: float) -> None:
        """Load stored queue settings (after the jobs: DLQ settings apply to failed jobs)."""
        for record in records:
            if record.kind != QUEUE:
                continue
            body = _decode(record.body)
            queue = self.state.queues.make(record.key)
            queue.load_settings(body, self._stored_dlq_config(queue, body.get("dlqConfig") or {}))
            if queue.dlq_config:
                apply_dlq_config(self.state, queue, now)
            if not queue.configured():  # a record of defaults (earlier trioqs wrote them)
                self._changed(queue)  # deleted, and the queue forgotten if it holds nothing

    def _stored_dlq_config(self, queue: QueueState, stored: dict[str, Any]) -> dict[str, Any]:
        """Stored DLQ settings, checked as SetDlqConfig checks them: earlier brokers stored
        settings they did not enforce, unchecked (`maxEntries: 0` would now empty the DLQ).
        Invalid ones are dropped, with a warning, and the store is corrected."""
        try:
            return cmd.dlq_config_of(stored)
        except CommandError as exc:
            log.warning("queue %s: stored DLQ settings %r ignored: %s", queue.name, stored, exc)
            self.state.changes.note_setting(queue.name)
            return {}

    def take_writes(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Queue settings to write or delete since the last commit."""
        writes, deletes = [], []
        for name in self.state.changes.take_settings():
            queue = self.state.queues.get(name)
            if queue is None or not queue.configured():  # nothing to keep: no record
                deletes.append((QUEUE, name))
            else:
                writes.append(settings_record(queue))
        return writes, deletes
