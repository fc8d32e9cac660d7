"""Crons: named schedules that push a job each time they fire.

A cron fires on the timer wheel at its `nextRun`; firing pushes a job (named `jobName`, else
the cron's name) and moves `nextRun` on, in the same pass, so both are committed together. With
`preventOverlap` (the default) the job carries the unique key `cron:<name>`, so a fire while
the previous run is still queued or active adds nothing; an upsert removes a run of the old
definition that is still queued (one that started runs on). After `maxLimit` fires the cron
deletes itself. On restart a `nextRun` that passed while the broker was down moves to the next
future time (`skipMissedOnRestart`, the default) or fires once at once. A cron keeps its queue
(QueueState.crons): the queue exists, listed, from the cron's creation to its end.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import msgspec

from broker.engine.errors import EngineError
from broker.engine.routing import Routes
from broker.engine.rules.schedule import ScheduleError, check_pattern, next_every, next_fire, zone
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.ids import uuid7
from broker.engine.state.keys import UNIQUE
from broker.engine.state.model import QUEUED_STATES, Job
from protocol import crons as cmd
from store import Record

CRON = "cron"
CRON_NOT_FOUND = "Cron job not found"
Reply = dict[str, Any]

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(dict[str, Any]).decode


@attrs.define(slots=True, eq=False)
class Cron:
    """One cron and its progress."""

    name: str
    queue: str
    data: bytes
    schedule: str | None
    repeat_every: float | None
    priority: float
    max_limit: float | None  # whole; a float beyond 32 bits (protocol.values.integer)
    timezone: str | None
    unique_key: str | None
    prevent_overlap: bool
    skip_missed_on_restart: bool
    next_run: float
    executions: int = 0
    job_name: str | None = None  # its jobs' name; None: the cron's own (stored before it was)

    def following(self, after: float, now: float) -> float:
        """The fire time after `after` (a fire at `after` just happened, or is missed)."""
        if self.schedule is not None:
            return next_fire(self.schedule, self.timezone, max(after, now), after)
        assert self.repeat_every is not None
        return next_every(self.repeat_every, after, now)

    def summary(self) -> Reply:
        """The cron as Cron/CronGet/CronList show it."""
        return {
            "name": self.name,
            "jobName": self.job_name or self.name,
            "queue": self.queue,
            "schedule": self.schedule,
            "repeatEvery": self.repeat_every,
            "nextRun": self.next_run,
            "timezone": self.timezone,
            "executions": self.executions,
            "maxLimit": self.max_limit,
        }

    def to_record(self) -> Record:
        """The stored form."""
        return Record(CRON, self.name, _encode(attrs.asdict(self)))


def _job_name(cron: Cron) -> str:
    """The name of the jobs a cron pushes."""
    return cron.job_name or cron.name


def _overlap_key(cron: Cron) -> str | None:
    """The unique key a cron's jobs carry: its own, or `cron:<name>` with preventOverlap."""
    return cron.unique_key or (f"cron:{cron.name}" if cron.prevent_overlap else None)


def cron_from_record(record: Record) -> Cron:
    """A stored cron."""
    return Cron(**_decode(record.body))


class CronScheduler:
    """The crons: a component of the engine. Owns the crons and which of them changed since
    the last commit; answers Cron, CronGet, CronDelete, CronList (`routes`) and fires crons
    (`fire`, called by the engine for a due CRON timer). Of the rest of the engine it uses
    EngineState only: to push a run (`add`), look up and remove a queued run by its overlap
    key, and arm its timer on the wheel."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self.crons: dict[str, Cron] = {}
        # Names of the crons changed since the last `take_writes` (stored.py).
        self.unstored: set[str] = set()

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.CronUpsert, self.cron_upsert)
        routes.add(cmd.CronGet, self.cron_get)
        routes.add(cmd.CronDelete, self.cron_delete)
        routes.add(cmd.CronList, self.cron_list)
        return routes

    def summaries(self) -> list[Reply]:
        """Every cron as CronList shows it."""
        return [cron.summary() for cron in self.crons.values()]

    def cron_upsert(self, session: ReplySink, command: cmd.CronUpsert, now: float) -> Reply:
        """Cron: create or replace; executions carry over; `immediately` fires a new one now."""
        try:
            if command.schedule is not None:
                check_pattern(command.schedule, command.timezone)
            else:
                zone(command.timezone)
        except ScheduleError as exc:
            raise EngineError(str(exc)) from None
        old = self.crons.get(command.name)
        cron = Cron(
            command.name, command.queue, command.data, command.schedule,
            command.repeatEvery, command.priority, command.maxLimit, command.timezone,
            command.uniqueKey, command.preventOverlap, command.skipMissedOnRestart, now,
            old.executions if old else 0, command.jobName,
        )  # fmt: skip
        if not (command.immediately and old is None):
            cron.next_run = cron.following(now, now)
            if math.isinf(cron.next_run):
                raise EngineError("Cron schedule has no future run")
        self.state.queues.admit((cron.queue,), self.state.now)
        for previous in (old, cron):
            self._remove_queued_run(previous, now)
        if old is not None:
            self._let_queue_go(old)
        self._keep_queue(cron)
        self._arm_cron(cron)
        event: Reply = {"name": cron.name, "queue": cron.queue}
        if cron.schedule is not None:
            event["pattern"] = cron.schedule
        if cron.repeat_every is not None:
            event["every"] = cron.repeat_every
        event["nextRun"] = cron.next_run
        self.state.announce("cron:updated" if old else "cron:created", event)
        keys = ("name", "jobName", "queue", "schedule", "repeatEvery", "nextRun", "timezone")
        return {"ok": True, "cron": {key: cron.summary()[key] for key in keys}}

    def _remove_queued_run(self, cron: Cron | None, now: float) -> None:
        """An upsert retires the cron's earlier definition: a run of it that is still queued
        (not started) under the overlap key goes, so it neither runs with the old data nor
        holds the key against the new schedule. A started run is left to finish."""
        key = None if cron is None else _overlap_key(cron)
        if cron is None or key is None:
            return
        job_id = self.state.keys.owner((UNIQUE, cron.queue, key), now)
        job = self.state.jobs.get(job_id) if job_id is not None else None
        if job is not None and job.name == _job_name(cron) and job.state in QUEUED_STATES:
            self.state.remove(job)

    def cron_get(self, session: ReplySink, command: cmd.CronGet, now: float) -> Reply:
        """CronGet."""
        cron = self.crons.get(command.name)
        if cron is None:
            raise EngineError(CRON_NOT_FOUND)
        return {"ok": True, "cron": cron.summary()}

    def cron_delete(self, session: ReplySink, command: cmd.CronDelete, now: float) -> Reply:
        """CronDelete."""
        cron = self.crons.pop(command.name, None)
        if cron is None:
            raise EngineError(CRON_NOT_FOUND)
        self._let_queue_go(cron)
        self._cron_changed(command.name)
        self.state.announce("cron:deleted", {"name": command.name})
        return {"ok": True}

    def cron_list(self, session: ReplySink, command: cmd.CronList, now: float) -> Reply:
        """CronList."""
        return {"ok": True, "crons": self.summaries()}

    def _keep_queue(self, cron: Cron) -> None:
        """A cron now pushes into its queue: the queue is kept (made if new)."""
        self.state.queues.make(cron.queue).add_crons(1)

    def _let_queue_go(self, cron: Cron) -> None:
        """A cron no longer pushes into its queue: the queue may be idle now."""
        queue = self.state.queues[cron.queue]  # kept by the cron (Obliterate keeps it too)
        queue.add_crons(-1)
        self.state.queues.note_emptied(queue, self.state.now)

    def _cron_changed(self, name: str) -> None:
        if self.state.changes.tracking:  # only a store needs to hear of it
            self.unstored.add(name)

    def _arm_cron(self, cron: Cron) -> None:
        """Make `cron` the current one of its name and schedule its next fire. Each arming is
        a new Cron object or follows the fire of its only timer, so a timer is current exactly
        when its cron is still the one registered under its name (see `fire`)."""
        self.crons[cron.name] = cron
        self._cron_changed(cron.name)
        self.state.wheel.schedule(cron.next_run, CRON, cron)

    def fire(self, cron: Cron, now: float) -> None:
        """A cron's time came: push its job (unless the last one still runs), move on. A timer
        of a cron replaced by an upsert or deleted since is ignored."""
        if self.crons.get(cron.name) is not cron:
            return
        if cron.max_limit is not None and cron.executions >= cron.max_limit:
            del self.crons[cron.name]
            self._let_queue_go(cron)
            self._cron_changed(cron.name)
            return
        key = _overlap_key(cron)
        if key is None or self.state.keys.owner((UNIQUE, cron.queue, key), now) is None:
            job = Job(uuid7(), cron.queue, _job_name(cron), cron.data, now, now, unique_key=key)
            job.priority = cron.priority
            job.last_heartbeat = now
            self.state.add(job, now)
            cron.executions += 1
        cron.next_run = cron.following(cron.next_run, now)
        if math.isinf(cron.next_run):  # the schedule is over
            del self.crons[cron.name]
            self._let_queue_go(cron)
            self._cron_changed(cron.name)
            return
        self._arm_cron(cron)

    def restore(self, records: list[Record], now: float) -> None:
        """Load stored crons; a run missed while down is skipped or fired once (see above)."""
        for record in records:
            if record.kind != CRON:
                continue
            cron = cron_from_record(record)
            if cron.next_run < now and cron.skip_missed_on_restart:
                cron.next_run = cron.following(cron.next_run, now)
            if math.isinf(cron.next_run):
                self._cron_changed(cron.name)  # over while the broker was down: delete it
                continue
            self._keep_queue(cron)
            self._arm_cron(cron)

    def take_writes(self) -> tuple[list[Record], list[tuple[str, str]]]:
        """Crons to write and to delete since the last commit."""
        writes, deletes = [], []
        for name in self.unstored:
            cron = self.crons.get(name)
            if cron is None:
                deletes.append((CRON, name))
            else:
                writes.append(cron.to_record())
        self.unstored.clear()
        return writes, deletes
