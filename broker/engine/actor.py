"""The engine actor: the one Trio task that owns the engine.

It receives batches of commands over a bounded memory channel, takes every batch already
waiting (so work from many connections shares one pass), runs them, fires due timers, commits
the pass's changes in one transaction, and only then sends the pass's replies. It sleeps
until the next timer deadline when idle. A full inbox makes connection readers wait, which
pushes back on clients through TCP.

Everything waiting in the inbox when a pass starts shares that pass and its transaction
(group commit). An idle actor lets a connection run its batch inline (see submit_inline), once per
turn of the scheduler: the other connections of that turn queue and share the actor's next pass.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from typing import Any

import attrs
import trio

from store import Store, StoreError, StoreUnavailable

from ..clock import Clock
from ..events import EventBus
from .core import Engine
from .housekeeping import PURGE, Purge, purged_ids
from .inflight import InFlightCommit
from .model import Job
from .records import RowLoader, job_to_row
from .sink import ReplySink
from .webhooks import Delivered

log = logging.getLogger(__name__)

INBOX_SIZE = 256
MAX_BATCHES_PER_PASS = 32
LOAD_SLICE = 10_000
"""Stored rows read at start-up between two checkpoints."""
BULK_YIELDS = 5
"""Turns of the scheduler the actor sits out after a pass that ran a large command's slice."""
COMMIT_RETRY_S = 0.2
"""While the database is unreachable, how often a withheld commit is tried again."""
LOADING_HOLD_S = 10.0
"""How long a command that arrives while the stored jobs load waits for the load to end
before it is refused with LOADING (the official TypeScript client gives up on a command
after 30 s)."""
LOADING = "Loading stored jobs: not serving yet, try again shortly"


@attrs.define(slots=True)  # not frozen: one is made per read, and frozen init costs more
class Batch:
    """Commands from one session, in arrival order."""

    session: ReplySink
    commands: list[Any]


ADVANCE = object()
"""A pass's last item while a large command is in progress: run one slice of it (bulk.py)."""
QUEUED = (Batch, Delivered)
"""Inbox items `submit` sends: while any is queued, nothing runs inline (it could overtake)."""


class _NewTurn(trio.abc.Instrument):
    """Re-allows inline passes on every turn of Trio's scheduler: its hook runs just before the
    scheduler waits for I/O, between one batch of runnable tasks and the next. Measured with
    callgrind, this replaced a task woken after each inline pass, which cost a second scheduler
    round (and an extra epoll_wait) per sequential request."""

    def __init__(self, actor: EngineActor) -> None:
        self.actor = actor

    def before_io_wait(self, timeout: float) -> None:
        """A new turn starts: the next idle-actor batch may run inline again."""
        self.actor._inline_spent = False


@attrs.frozen
class Disconnect:
    """A session closed: requeue the jobs it held without a lease, forget its workers."""

    session: ReplySink


@attrs.frozen
class Wake:
    """Nothing to do but re-arm the actor's sleep (a timer was added while it slept)."""


@attrs.frozen
class AnswerParked:
    """Shutdown: answer every parked long poll now, with no job."""


class EngineActor:
    """Owns an Engine and serialises all access to it."""

    def __init__(self, engine: Engine, clock: Clock, store: Store | None = None) -> None:
        self.engine = engine
        self.clock = clock
        self.store = store
        self.bus = EventBus()
        engine.started_ms = clock.now_ms()
        self.bus.on_change = self._listening
        self.inbox, self._receive = trio.open_memory_channel[Any](INBOX_SIZE)
        # Sessions with staged replies register here; their replies are sent after the commit.
        self.outbox: set[ReplySink] = set()
        self.on_pass: Any = None  # observes how many commands each pass ran (metrics)
        # The deadline the actor sleeps until while parked on an empty inbox; None when busy.
        self._armed_deadline: float | None = None
        # Batches sent to the inbox and not yet taken by the actor: while there are any, no
        # batch runs inline (it could overtake one of its own session's).
        self._queued_batches = 0
        # One inline pass per turn of Trio's scheduler: many busy connections would otherwise
        # each run (and commit) a pass of their own in the same turn, one commit per connection
        # instead of one for all of them, and new clients would wait behind all those commits.
        self._inline_spent = False
        self._restored = False
        self.loaded = trio.Event()
        """Set once the stored jobs are loaded (`restore`); commands wait for it (`submit`)."""
        self._frozen = False  # whether `restore` froze the objects it loaded (gc.freeze)
        # A pass's writes the store could not take (StoreUnavailable): its replies wait until
        # they are stored, and no other pass runs meanwhile (writes stay in order).
        self._unstored: tuple[Any, ...] | None = None
        # A store failure met in an inline pass: raised again in the actor's own task, so it
        # ends the engine (fail-stop, or a step-down in ha.py), not the caller's connection.
        self._failure: StoreError | None = None
        # A store that opts in (`commit_in_thread`, PostgreSQL: a commit is a network round
        # trip) is committed on a worker thread while the next pass runs (_serve_pipelined).
        self._threaded = bool(getattr(store, "commit_in_thread", False))
        self._in_flight: InFlightCommit | None = None
        # Commands of sessions whose clients have not read their replies (`ReplySink.full`),
        # in arrival order, and the sessions that have room for them again (see _run_batch).
        self._held_unread: dict[ReplySink, list[Any]] = {}
        self._resumable: list[ReplySink] = []
        # Large commands in progress (bulk.py): the runner, and its two collections, read on
        # every pass (never replaced, so held here). `_held_for_bulk`: the items of sessions
        # waiting for their large command's reply.
        self._bulks = engine.bulks
        self._running = engine.bulks.running
        self._held_for_bulk = engine.bulks.held

    async def restore(self) -> None:
        """Start-up step, before `run`: rebuild the engine from the store (nothing without one).

        The ports are open meanwhile: the task checkpoints every LOAD_SLICE rows and restored
        jobs, so Ping, `/health` and `/ready` (503) answer, while commands wait for `loaded`
        (`submit`). Rows are decoded as they are read (never all held at once, which doubled
        the start-up's peak memory), into the memory layout of jobs pushed live (RowLoader).
        Rows a stored tombstone lists (a large removal cut short) are skipped and that removal
        resumes. `run` calls it itself when nobody did: an engine that serves without having
        restored would track no changes, and so store none.

        The cyclic garbage collector is off while it runs, and what it loaded is then frozen
        (`gc.freeze`) until the engine stops (`run` returns): every object a load makes lives
        on, and the collector's passes over them (20 for a million jobs, 0.6 to 1 s here, or
        one as long once it is on again) freed nothing. Restored jobs are freed as any job
        is, when the last reference goes (jobs form no reference cycles).
        """
        self._restored = True
        collecting = gc.isenabled()
        gc.disable()
        try:
            if self.store is not None:
                await self._load(self.store)
                self._frozen = collecting
        finally:
            if self._frozen:
                gc.freeze()
            if collecting:
                gc.enable()
        self.loaded.set()

    async def _load(self, store: Store) -> None:
        engine = self.engine
        now = self.clock.now_ms()
        records = store.load_records()
        skipped = purged_ids(records)
        jobs: list[Job] = []
        held: set[str] = set()
        load = RowLoader().load
        for n, body in enumerate(store.scan_bodies(), 1):
            if n % LOAD_SLICE == 0:
                await trio.lowlevel.checkpoint()
            job, was_held = load(body)
            if skipped and job.id in skipped:
                continue
            jobs.append(job)
            if was_held:
                held.add(job.id)
        for _ in engine.state.restore(jobs, held, now):
            await trio.lowlevel.checkpoint()
        del jobs
        engine.state.restore_purges([Purge.resumed(r) for r in records if r.kind == PURGE])
        engine.bulks.restore(records)  # committed large commands go on from where they got
        engine.crons.restore(records, now)
        engine.settings.restore(records, now)
        engine.webhooks.restore(records)
        self._commit_to(store)  # what the restart itself changed (requeued, expired)

    def answer_parked_message(self) -> AnswerParked:
        """The inbox message that answers every parked long poll (used at shutdown)."""
        return AnswerParked()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until the inbox is closed (every sender gone), then return."""
        if not self._restored:
            await self.restore()
        # The scheduler's turns re-allow inline passes (see _NewTurn).
        new_turn = _NewTurn(self)
        trio.lowlevel.add_instrument(new_turn)
        task_status.started()
        try:
            if self._threaded:
                await self._serve_pipelined(self._receive)
            else:
                await self._serve(self._receive)
        finally:
            trio.lowlevel.remove_instrument(new_turn)
            if self._frozen:  # the engine's objects may become garbage now (a step-down)
                self._frozen = False
                gc.unfreeze()

    async def _serve(self, receive: Any) -> None:
        async with receive:
            while True:
                items: list[Any] = []
                try:
                    await self._wait_for_work(items)
                except trio.EndOfChannel:
                    return
                if self._failure is not None:
                    raise self._failure
                await self._store_withheld()  # an inline pass the database did not take
                while len(items) < MAX_BATCHES_PER_PASS:
                    try:
                        items.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                self._queued_batches -= sum(isinstance(item, QUEUED) for item in items)
                self._execute(items)
                self._commit()
                await self._store_withheld()
                self._send_replies()
                if self.store is not None:
                    self.store.tidy()  # after the replies: a due checkpoint delays none of them
                if self._queued_batches:
                    # More work is already waiting: let other tasks (new connections, a Ping,
                    # the accept loop) have their turn before the next pass.
                    await trio.lowlevel.checkpoint()

    async def _serve_pipelined(self, receive: Any) -> None:
        """`_serve` for a store that commits on a worker thread: each pass's commit is started
        on a thread and the next pass runs while it is in flight (the loop reads, decodes and
        executes meanwhile). At most one commit is in flight: after running a pass, the actor
        waits for the previous pass's commit, releases that pass's replies and events, and only
        then starts this pass's commit, so replies still go out strictly in commit order and
        never before their commit returned. Failures are `_serve`'s: LeaseLost and StoreError
        end the actor with the replies unsent, StoreUnavailable withholds and retries.

        Measured against committing on the loop (`python -m benchmarks.loadgen --compare --modes
        postgres --baseline <main> --baseline <threaded, next pass waiting>`, 5 interleaved runs,
        a 2-core machine at load 12-17): pipelined / on the loop 1.31x PUSH 16x8, 1.42x PULL+ACK,
        1.13x producers+workers, 1.07x sequential PUSH; push-to-start at 500 jobs/s p50 53 ms
        against 311 ms, p99 186 against 933 ms. A thread that only let the loop read meanwhile
        (the next pass waiting for the commit) came out between the two.
        """
        async with receive:
            while True:
                if self._in_flight is not None and self._in_flight.done:
                    await self._settle()  # stored while idle: release before sleeping
                items: list[Any] = []
                try:
                    await self._wait_for_work(items)
                except trio.EndOfChannel:
                    await self._settle()
                    return
                while len(items) < MAX_BATCHES_PER_PASS:
                    try:
                        items.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                self._queued_batches -= sum(isinstance(item, QUEUED) for item in items)
                self._execute(items)  # while the previous pass's commit is in flight
                await self._settle()
                self._launch()
                if self._queued_batches:
                    await trio.lowlevel.checkpoint()  # as in _serve: let the others run

    def _launch(self) -> None:
        """Start the pass's commit on a worker thread, its replies and events detached until
        it returns; with nothing to write, release them at once (the previous is settled)."""
        outbox = self.outbox
        releases = [session.take_staged() for session in outbox]
        outbox.clear()
        state = self.engine.state
        events = list(state.events)
        state.events.clear()
        writes = self._take_writes()
        if writes is None:
            self._release(releases, events)
            return
        self._in_flight = InFlightCommit(writes, releases, events, self._wake_if_parked)
        self._in_flight.start(self._write)

    async def _settle(self) -> None:
        """Wait for the commit in flight, if any, and release its replies and events. An
        unreachable database withholds them, retrying (`_store_withheld`); LeaseLost or a
        StoreError is raised, the replies never released."""
        in_flight = self._in_flight
        if in_flight is None:
            return
        try:
            await in_flight.wait()
        except StoreUnavailable as exc:
            self._unstored = in_flight.writes
            self._outage(exc)
            await self._store_withheld()
        self._in_flight = None
        self._release(in_flight.releases, in_flight.events)

    def _wake_if_parked(self) -> None:
        """A commit returned (or held commands may run): an actor asleep on its empty inbox
        wakes to release its replies."""
        if self._armed_deadline is not None:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError,
                                     trio.ClosedResourceError):  # fmt: skip
                self.inbox.send_nowait(Wake())

    def _release(self, releases: list[Any], events: list[Any]) -> None:
        """Send a stored pass's replies, then publish its events (as `_send_replies`)."""
        for release in releases:
            release()
        self._publish(events)

    async def submit(self, batch: Batch | Delivered) -> None:
        """Run a session's batch (or apply a webhook delivery's outcome): at once in the
        caller's task when the actor is idle (see `submit_inline`), else through the inbox
        (waiting while it is full), behind everything sent before it. While the stored jobs
        load, a batch waits for the load to end, at most LOADING_HOLD_S, and is then refused
        (`_held_until_loaded`)."""
        if self._run_inline([batch]):  # `submit_inline`, without its call
            return
        await self._queue(batch)

    async def submit_all(self, batches: list[Batch]) -> None:
        """Run the batches of several sessions (in order) as one pass: at once in the caller's
        task when the actor is idle (see `submit_inline`), else through the inbox, waiting
        only while it is full. The read hub (server/hub.py) submits one turn's reads so."""
        if self._run_inline(batches):
            return
        if not self.loaded.is_set():  # the read hub waits for the load: only if that changed
            for batch in batches:
                await self._queue(batch)
            return
        for batch in batches:
            try:
                self.inbox.send_nowait(batch)  # no checkpoint per batch while there is room
            except trio.WouldBlock:
                await self._queue(batch)
            else:
                self._queued_batches += 1

    async def _queue(self, item: Batch | Delivered) -> None:
        """Send `item` to the inbox (waiting while it is full), counted as queued once sent."""
        if not self.loaded.is_set() and not await self._held_until_loaded(item):
            return
        self._queued_batches += 1
        try:
            await self.inbox.send(item)
        except BaseException:
            self._queued_batches -= 1  # not sent
            raise

    async def _held_until_loaded(self, item: Batch | Delivered) -> bool:
        """Wait for the stored jobs to be loaded, at most LOADING_HOLD_S; True once they are.
        Else a batch's commands are answered LOADING (nothing ran) and False is returned.

        Held rather than refused at once: a client that reconnects right after a restart (a
        worker, a producer) then sees a slow first reply instead of an error to handle; the
        bound keeps a load longer than a client's own timeout from looking like a dead
        broker. The memory held meanwhile is bounded as always: each connection's in-flight
        budget (tcp.py), and its reader waits here."""
        with trio.move_on_after(LOADING_HOLD_S):
            await self.loaded.wait()
            return True
        if isinstance(item, Batch):
            session = item.session
            for command in item.commands:
                session.stage_reply({"ok": False, "error": LOADING}, command.reqId)
            session.send_staged()
        return False

    def submit_inline(self, batch: Batch | Delivered) -> bool:
        """Run `batch` at once in the caller's task if the actor is idle; else return False.

        When the actor is parked on an empty inbox nothing else can be touching the engine
        (Trio is cooperative and a pass, commit included, never awaits), so the caller may
        lend it its own time slice: the pass is the same pass, in the same order, and it saves
        a task switch and a scheduler round per command. If the pass armed an earlier timer
        than the one the actor sleeps on, or left housekeeping to do, the actor is woken.
        """
        return self._run_inline([batch])

    def _run_inline(self, items: list[Any]) -> bool:
        """`submit_inline` of one pass of several items."""
        armed = self._armed_deadline
        busy = self._queued_batches or self._inline_spent or self._unstored or self._failure
        # An inline pass cannot wait for a threaded commit: it goes through the inbox.
        busy = busy or self._threaded
        if armed is None or busy:
            return False
        self._inline_spent = True
        self._execute(items)
        try:
            if self.store is not None:  # memory mode: not even the call
                self._commit()
        except StoreError as exc:  # the actor raises it; the replies are never released
            self._failure = exc
        if self._unstored is not None or self._failure is not None:
            # The actor retries the writes (it may wait) and then replies, or raises the failure.
            self._armed_deadline = None
            self.inbox.send_nowait(Wake())
            return True
        self._send_replies()
        if self.store is not None:
            self.store.tidy()  # as in _serve
        state = self.engine.state
        timers = state.wheel.heap
        # `wheel.next_deadline() < armed or state.housekeeping_due()`, inline (every request).
        earlier = timers and timers[0].at_ms < armed
        if earlier or state.untidy or state.purges or state.graveyard.lots or self._running:
            self._armed_deadline = None
            self.inbox.send_nowait(Wake())
        return True

    async def _wait_for_work(self, items: list[Any]) -> None:
        """Receive one inbox item into `items`, or return empty-handed when a timer is due.

        Work already queued is taken without yielding. Were the actor to yield holding an item
        while it looks idle, a batch submitted meanwhile would run inline ahead of the item, and
        one connection's commands could run out of order.
        With housekeeping left (housekeeping.py) or a large command in progress (bulk.py), the
        actor does not sleep: it lets the other tasks run, then returns with whatever arrived
        meanwhile, and the pass does one more slice of it.
        """
        try:
            items.append(self._receive.receive_nowait())
            return
        except trio.WouldBlock:
            pass
        if self._resumable:  # held commands may run again: a pass runs them
            return
        if self.engine.state.housekeeping_due() or self._running:
            # Between two slices of a large command, the others get several turns of the
            # scheduler, not one: a new client's connect + Ping takes four or five (accept,
            # the read hub, its task), and the actor would otherwise run a pass in each.
            for _ in range(BULK_YIELDS if self._running else 1):
                await trio.lowlevel.checkpoint()
            with contextlib.suppress(trio.WouldBlock):
                items.append(self._receive.receive_nowait())
            return
        deadline = self.engine.next_deadline()
        self._armed_deadline = deadline
        try:
            if deadline == math.inf:  # no timers: skip the cancel scope (the common idle case)
                items.append(await self._receive.receive())
                return
            with trio.move_on_at(self.clock.trio_time(deadline)):
                items.append(await self._receive.receive())
        finally:
            self._armed_deadline = None

    def _execute(self, items: list[Any]) -> None:
        """One pass: due timers, then every item in order, then one slice of a large command
        in progress (bulk.py) and what its client held back, then what they made ready.

        A session with a large command in progress (`BulkRunner.held`) runs nothing else
        until its reply: its later items wait there, and so does the rest of a batch whose
        command started one."""
        engine = self.engine
        state = engine.state
        now = self.clock.now_ms()
        state.now = now
        # Each tick only when it has something to do (what `tick` looks at): most passes
        # find no parked poll to serve, no finished job and no deadline passed. The timer
        # check reads the wheel's heap inline: this runs for every pass.
        timers = state.wheel.heap
        if state.dirty_queues or state.finished or (timers and timers[0].at_ms <= now):
            engine.tick(now)
        if self._running:  # a slice after the items; what it releases runs in this loop too
            items = [*items, ADVANCE]
        for_bulk = self._held_for_bulk
        commands = self._resume_held(now) if self._resumable else 0
        for item in items:
            if isinstance(item, Batch):
                session, batch = item.session, item.commands
                if for_bulk and session in for_bulk:
                    for_bulk[session].append(item)  # after its large command's reply
                elif len(batch) == 1 and not (self._held_unread or session.full):
                    engine.execute(session, batch[0], now)  # the usual batch: `_run_batch`, inline
                    commands += 1
                else:
                    commands += self._run_batch(session, batch, now)
            elif isinstance(item, Disconnect):
                if for_bulk and item.session in for_bulk:
                    for_bulk[item.session].append(item)  # after its large command's reply
                    continue
                self._held_unread.pop(item.session, None)
                engine.disconnect(item.session, now)
            elif isinstance(item, Delivered):
                engine.webhooks.record_delivery(item)
            elif isinstance(item, AnswerParked):
                engine.answer_parked()
            elif item is ADVANCE:
                items += self._bulks.advance(now)  # (a list of this pass's own)
        timers = state.wheel.heap  # `compact` may have replaced the list
        finished = state.finished
        if finished and not engine.lifecycle.job_waiters:
            finished.clear()  # `answer_job_waiters` with nobody waiting, inline (every ACK)
        if state.dirty_queues or finished or (timers and timers[0].at_ms <= now):
            engine.tick(now)
        if state.untidy or state.purges or state.graveyard.lots:  # `housekeeping_due`, inline
            state.housekeep()
        if self.on_pass is not None:
            self.on_pass(commands)

    def _run_batch(self, session: ReplySink, batch: list[Any], now: float) -> int:
        """Run a session's commands in order; returns how many ran.

        Once the session is `full` (its client has not read enough of its replies) the rest
        are held back, and so is every later batch of it, in order, until the session says it
        has room (`_resume`): a client that does not read gets at most one reply past its
        budget, whatever it sent. The actor itself never waits for a client. A command that
        starts a large command (bulk.py) holds the rest back until that command's reply."""
        held = self._held_unread
        if held and session in held:
            held[session].extend(batch)
            return 0
        execute = self.engine.execute
        for_bulk = self._held_for_bulk
        ran = 0
        for command in batch:
            if session.full:
                held[session] = batch[ran:]
                session.notify_room(self._resume)
                break
            execute(session, command, now)
            ran += 1
            if for_bulk and session in for_bulk:  # it started a large command
                rest = batch[ran:]
                if rest:
                    for_bulk[session].append(Batch(session, rest))
                break
        return ran

    def _resume(self, session: ReplySink) -> None:
        """A session whose commands are held back has room again (called by the session, in
        any task): the next pass runs them."""
        if not self._resumable:
            self._wake_if_parked()
        self._resumable.append(session)

    def _resume_held(self, now: float) -> int:
        """Run the held commands of the sessions that have room again (before anything that
        arrived since); returns how many ran."""
        sessions, self._resumable = self._resumable, []
        ran = 0
        for session in sessions:
            batch = self._held_unread.pop(session, None)
            if batch is not None:
                ran += self._run_batch(session, batch, now)
        return ran

    def _commit(self) -> None:
        """Store the pass's changes in one transaction.

        The commit runs on the event loop: measured here for SQLite, a worker thread cost more
        in hand-off and GIL contention than it won in overlap (PostgreSQL, whose commit is a
        network round trip, commits on a thread instead: `_serve_pipelined`). A store failure
        stops the broker (fail-stop): the pass's replies have not been sent, so no client was
        told `ok` for a change that is not stored, and a restart resumes from the last commit.
        An unreachable database (StoreUnavailable) is the exception: the writes are kept and
        `_store_withheld` retries them, replies still withheld, until they are stored or the
        broker steps down (ha.py cancels the actor).
        """
        if self.store is None:
            return
        writes = self._take_writes()
        if writes is None:
            return
        rows, deleted, sync, records, record_deletes = writes
        try:
            self.store.commit(rows, deleted, sync=sync, records=records,
                              record_deletes=record_deletes)  # fmt: skip
        except StoreUnavailable as exc:
            self._unstored = writes
            self._outage(exc)

    def _write(self, writes: tuple[Any, ...]) -> None:
        """`Store.commit` of `_take_writes`'s tuple (the body of a threaded commit)."""
        assert self.store is not None
        rows, deleted, sync, records, record_deletes = writes
        self.store.commit(rows, deleted, sync=sync, records=records,
                          record_deletes=record_deletes)  # fmt: skip

    async def _store_withheld(self) -> None:
        """Retry the withheld writes every COMMIT_RETRY_S until the store takes them. A lost
        lease (LeaseLost) ends the actor, the replies unsent."""
        store = self.store
        if self._unstored is None or store is None:
            return
        started = trio.current_time()  # the failed commit was just now: the outage began
        while True:
            await trio.sleep(COMMIT_RETRY_S)
            try:
                if self._threaded:  # a reconnect may wait: not on the loop
                    await trio.to_thread.run_sync(self._write, self._unstored)
                else:
                    self._write(self._unstored)
            except StoreUnavailable:
                continue  # the outage was logged once, at its first failure (`_outage`)
            break
        self._unstored = None
        log.info("commits stored again after %.1f s", trio.current_time() - started)

    def _outage(self, exc: StoreUnavailable) -> None:
        """Log an outage's start with its cause (the retries that follow are not logged)."""
        log.warning("cannot commit; replies withheld, retrying: %s", exc)

    def _take_writes(self) -> tuple[Any, ...] | None:
        """The pass's writes as `Store.commit` arguments, or None when there are none."""
        engine = self.engine
        state = engine.state
        records_changed = (
            engine.crons.changed_crons or state.changed_settings or engine.webhooks.changed_hooks
            or state.purge_records
        )  # fmt: skip
        if not records_changed:
            # Jobs only (a pass of pushes, pulls or acks): the four calls below, each finding
            # nothing, cost 8.5k of the 160k instructions of a PUSH committed to SQLite.
            if not (state.changed or state.deleted):
                return None
            jobs, deleted, sync = state.take_changes()
            return [job_to_row(job) for job in jobs], deleted, sync, (), ()
        changed, deleted, sync = state.take_changes()
        records, record_deletes = self.engine.crons.take_writes()
        state_writes = (self.engine.settings.take_writes(), self.engine.webhooks.take_writes())
        for more, fewer in (*state_writes, self.engine.state.take_purge_writes()):
            records += more
            record_deletes += fewer
        # Some record changed, so there is something to write (a changed cron, setting or
        # hook is written or deleted; a purge's tombstone likewise).
        rows = [job_to_row(job) for job in changed]  # encoded here, where the jobs live
        return rows, deleted, sync, records, record_deletes

    def _commit_to(self, store: Store) -> None:
        writes = self._take_writes()
        if writes is not None:
            rows, deleted, sync, records, record_deletes = writes
            store.commit(rows, deleted, sync=sync, records=records, record_deletes=record_deletes)

    def _send_replies(self) -> None:
        outbox = self.outbox
        for session in outbox:
            session.send_staged()
        outbox.clear()
        state = self.engine.state
        if state.events:
            self._publish(state.events)
        else:  # `_publish` with nothing to publish, inline: most passes emit no event
            state.emitting = self.bus.listening()

    def _publish(self, events: list[Any]) -> None:
        """A pass is committed: now subscribers and webhooks may hear of its events."""
        if events:
            now = self.clock.now_ms()
            self.bus.publish_recorded(events, now)
            events.clear()
        self.engine.state.emitting = self.bus.listening()  # webhooks may have come or gone

    def _listening(self, listening: bool) -> None:
        self.engine.state.emitting = listening
