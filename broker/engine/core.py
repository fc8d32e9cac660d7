"""The engine: the components, composed, and the command router.

Every command goes to exactly one component through one typed table (command type -> handler,
routing.py), merged here from the components' own tables: one dict lookup per command, so PUSH,
PULL and ACK pass through no extra layer. Each component owns its state and offers the others a
narrow interface; docs/architecture.md has the map. Handlers check everything first, then
mutate, then return the reply (without `reqId`: `execute` adds it); a handler that parks a long
poll returns None and answers later; EngineError (or a CommandError) becomes
`{ok: false, error}`.

The engine is driven by the actor (actor.py): `execute` per command, `tick` per pass (due
timers, parked polls a pass made servable, WaitJob answers), `disconnect` when a connection
goes. It never writes a field of a ReplySink: what a connection holds is kept here, keyed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.engine.components.admin import QueueAdmin
from broker.engine.components.bulk import BulkRunner
from broker.engine.components.crons import CRON, CronScheduler
from broker.engine.components.dashboard import Dashboard
from broker.engine.components.deadletters import DeadLetterCommands
from broker.engine.components.dedup import DedupKeys
from broker.engine.components.flows import Flows
from broker.engine.components.groups import Groups
from broker.engine.components.info import BrokerInfo
from broker.engine.components.jobs import JobCommands
from broker.engine.components.lifecycle import Lifecycle
from broker.engine.components.pulls import Pulls
from broker.engine.components.settings import QueueSettings
from broker.engine.components.webhooks import WebhookRegistry
from broker.engine.components.workers import WorkerRegistry
from broker.engine.errors import EngineError
from broker.engine.routing import AnyHandler, Command, Reply, Routes
from broker.engine.rules.deadlines import GROUP_WAKE, WAIT_JOB, fire_timers
from broker.engine.runtime.stored import StoresRecords, WorkInProgress
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from protocol import CommandError
from protocol import commands as cmd

log = logging.getLogger(__name__)


class Engine:
    """The broker's single writer: the components over one EngineState, and the router."""

    def __init__(self, state: EngineState | None = None) -> None:
        self.state = state if state is not None else EngineState()
        self.info = BrokerInfo()
        state = self.state
        self.bulks = BulkRunner(state)  # large commands in progress (bulk.py)
        self.jobs = JobCommands(state, self.bulks)
        self.pulls = Pulls(state)
        self.lifecycle = Lifecycle(state)
        self.flows = Flows(state, self.bulks)
        self.settings = QueueSettings(state)
        self.groups = Groups(state)
        self.dead_letters = DeadLetterCommands(state, self.pulls, self.bulks)
        self.dedup = DedupKeys(state)
        self.crons = CronScheduler(state)
        self.workers = WorkerRegistry()
        self.webhooks = WebhookRegistry()
        self.workers.announce = self.webhooks.announce = state.announce
        self.admin = QueueAdmin(state, self.pulls, self.info, self.bulks)
        self.dashboard = Dashboard(state, self.admin, self.jobs, self.workers, self.crons)
        # What is stored as records (stored.py), in the order start-up restores it: the actor
        # commits and restores through this list and names none of them.
        self.stored: list[StoresRecords] = [
            WorkInProgress(state, self.bulks), self.crons, self.settings, self.webhooks
        ]
        routes = Routes()
        for component in (
            self.jobs, self.pulls, self.lifecycle, self.flows, self.settings, self.groups,
            self.dead_letters, self.dedup, self.crons, self.workers, self.webhooks, self.admin,
            self.dashboard,
        ):  # fmt: skip
            routes.merge(component.routes())
        routes.add(cmd.SubscribeEvents, self.connection_only)
        routes.add(cmd.UnsubscribeEvents, self.connection_only)
        self._handlers: dict[type, AnyHandler] = routes.table

    def handles(self, kind: type) -> bool:
        """Whether commands of type `kind` have a handler here."""
        return kind in self._handlers

    @property
    def started_ms(self) -> float:
        """When the broker started (epoch ms; the actor sets it)."""
        return self.info.started_ms

    @started_ms.setter
    def started_ms(self, value: float) -> None:
        self.info.started_ms = value

    @property
    def prometheus(self) -> Callable[[], str] | None:
        """Renders the Prometheus exposition (the app sets it), or None."""
        return self.info.prometheus

    @prometheus.setter
    def prometheus(self, render: Callable[[], str] | None) -> None:
        self.info.prometheus = render

    def connection_only(self, session: ReplySink, command: Command, now: float) -> Reply:
        """A command the TCP connection answers itself, reaching the engine from another
        transport (WebSocket clients subscribe with `Subscribe`)."""
        name = type(command).__name__
        raise EngineError(f"{name} is only available over TCP (WebSocket: use Subscribe)")

    # -- the actor's entry points --------------------------------------------------------------

    def execute(self, session: ReplySink, command: Command, now: float) -> None:
        """Run one command and send its reply to `session` (unless it was parked)."""
        try:
            reply = self._handlers[type(command)](session, command, now)
        except (EngineError, CommandError) as exc:
            reply = {"ok": False, "error": str(exc)}
        except Exception:  # a bug must cost one command, not the broker
            log.exception("command %s failed", type(command).__name__)
            reply = {"ok": False, "error": "Internal server error"}
        if reply is not None:
            session.stage_reply(reply, command.reqId)

    def tick(self, now: float) -> None:
        """Fire due timers and answer long polls that can now be served or have timed out.

        As in `execute`, a bug costs one timer or one queue's waiters, never the broker: the
        failure is logged and the rest of the tick goes on (a stopped broker whose cause is
        stored would stop again at every restart)."""
        state = self.state
        state.now = now
        timers = state.wheel.heap  # `wheel.next_deadline() <= now`, inline (every served poll)
        if timers and timers[0].at_ms <= now:
            self._fire_due(now)
        changes = state.changes
        if changes.dirty_queues:  # (read: the change log empties it, `next_dirty`)
            next_dirty = changes.next_dirty
            while (queue := next_dirty()) is not None:
                try:
                    self.pulls.serve_waiters(queue, now)
                except Exception:  # named, not shown: a queue's repr holds every ready job
                    log.exception("serving the long polls of queue %s failed", queue.name)
        if state.observers.finished:
            try:
                self.lifecycle.answer_job_waiters()
            except Exception:
                # Those answers are lost once: kept, they would fail (and log) every pass.
                state.observers.drop_finished()
                log.exception("answering WaitJob failed")

    def _fire_due(self, now: float) -> None:
        """Apply the due timers; handle those that are the engine's (polls, WaitJob, crons)."""
        for kind, target, _token in fire_timers(self.state, now):
            try:
                if kind == WAIT_JOB:
                    self.lifecycle.wait_timed_out(target)
                elif kind == GROUP_WAKE:
                    self.state.changes.note_dirty(target)
                elif kind == CRON:
                    self.crons.fire(target, now)
                else:
                    self.pulls.poll_timed_out(target)
            except Exception:
                log.exception("a %s timer failed; dropped", kind)

    def next_deadline(self) -> float:
        """When `tick` next has work to do, in epoch ms (inf when never)."""
        return self.state.wheel.next_deadline()

    def disconnect(self, session: ReplySink, now: float) -> None:
        """A connection closed: requeue the jobs it pulled without a lease and did not settle."""
        self.state.requeue_holdings(session, now)
        self.workers.disconnect(session)

    def answer_parked(self) -> None:
        """Answer every parked long poll with no job (the broker is shutting down)."""
        self.pulls.answer_parked()
