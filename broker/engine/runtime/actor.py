"""The engine actor: the one Trio task that owns the engine.

It receives batches of commands over a bounded memory channel, takes every batch already
waiting (so work from many connections shares one pass), runs them, fires due timers, commits
the pass's changes in one transaction, and only then sends the pass's replies. It sleeps
until the next timer deadline when idle. A full inbox makes connection readers wait, which
pushes back on clients through TCP.

Everything waiting in the inbox when a pass starts shares that pass and its transaction
(group commit). An idle actor lets a connection run its batch inline (see submit_inline), once per
turn of the scheduler: the other connections of that turn queue and share the actor's next pass.

The actor schedules; the rest is its helpers': the commit pipeline (commits.py: on the loop, on
a worker thread, withheld in an outage), the fan-out of replies and events (fanout.py), and
start-up (startup.py, over the components that store records, stored.py).
"""

from __future__ import annotations

import contextlib
import gc
import math
from typing import Any

import attrs
import trio

from broker.clock import Clock
from broker.engine.components.webhooks import Delivered
from broker.engine.core import Engine
from broker.engine.runtime import startup
from broker.engine.runtime.commits import CommitPipeline
from broker.engine.runtime.fanout import Fanout
from broker.engine.sink import ReplySink
from broker.events import EventBus
from store import Store, StoreError

INBOX_SIZE = 256
MAX_BATCHES_PER_PASS = 32
LOAD_SLICE = 10_000
"""Stored rows read at start-up between two checkpoints (startup.py)."""
BULK_YIELDS = 5
"""Turns of the scheduler the actor sits out after a pass that ran a large command's slice."""
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
        self.fanout = Fanout(engine.state, clock, self.bus)
        self.inbox, self._receive = trio.open_memory_channel[Any](INBOX_SIZE)
        # Sessions with staged replies register here; their replies are sent after the commit.
        self.outbox: set[ReplySink] = self.fanout.outbox
        self.commits = CommitPipeline(
            store, engine.state, engine.stored, self.fanout, self._wake_if_parked
        )
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
        # A store failure met in an inline pass: raised again in the actor's own task, so it
        # ends the engine (fail-stop, or a step-down in ha.py), not the caller's connection.
        self._failure: StoreError | None = None
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
        """Start-up step, before `run`: rebuild the engine from the store (nothing without one)
        and store what the restart changed (startup.py).

        The ports are open meanwhile: the load checkpoints every LOAD_SLICE rows and restored
        jobs, so Ping, `/health` and `/ready` (503) answer, while commands wait for `loaded`
        (`submit`). `run` calls it itself when nobody did: an engine that serves without having
        restored would track no changes, and so store none. What it loaded stays frozen
        (`gc.freeze`) until the engine stops (`run` returns).
        """
        self._restored = True
        if self.store is not None:
            self._frozen = await startup.frozen_after(self._load(self.store))
        self.loaded.set()

    async def _load(self, store: Store) -> None:
        """Load what `store` holds, then commit what the restart itself changed (requeued,
        expired jobs): nothing is served before that is stored."""
        now = self.clock.now_ms()
        await startup.load(self.engine, store, now, LOAD_SLICE)
        self.commits.commit_or_raise()

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
            if self.commits.threaded:
                await self._serve_pipelined(self._receive)
            else:
                await self._serve(self._receive)
        finally:
            trio.lowlevel.remove_instrument(new_turn)
            if self._frozen:  # the engine's objects may become garbage now (a step-down)
                self._frozen = False
                gc.unfreeze()

    async def _serve(self, receive: Any) -> None:
        commits = self.commits
        async with receive:
            while True:
                items: list[Any] = []
                try:
                    await self._wait_for_work(items)
                except trio.EndOfChannel:
                    return
                if self._failure is not None:
                    raise self._failure
                await commits.store_withheld()  # an inline pass the database did not take
                self._take_queued(items, receive)
                self._execute(items)
                commits.commit()
                await commits.store_withheld()
                self.fanout.send_replies()
                if self.store is not None:
                    self.store.tidy()  # after the replies: a due checkpoint delays none of them
                if self._queued_batches:
                    # More work is already waiting: let other tasks (new connections, a Ping,
                    # the accept loop) have their turn before the next pass.
                    await trio.lowlevel.checkpoint()

    def _take_queued(self, items: list[Any], receive: Any) -> None:
        """Add what waits in the inbox to a pass's `items`, up to MAX_BATCHES_PER_PASS."""
        while len(items) < MAX_BATCHES_PER_PASS:
            try:
                items.append(receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self._queued_batches -= sum(isinstance(item, QUEUED) for item in items)

    async def _serve_pipelined(self, receive: Any) -> None:
        """`_serve` for a store that commits on a worker thread: each pass's commit is started
        on a thread and the next pass runs while it is in flight (the loop reads, decodes and
        executes meanwhile). At most one commit is in flight: after running a pass, the actor
        waits for the previous pass's commit, releases that pass's replies and events, and only
        then starts this pass's commit, so replies still go out strictly in commit order and
        never before their commit returned. Failures are `_serve`'s: LeaseLost and StoreError
        end the actor with the replies unsent, StoreUnavailable withholds and retries.

        Why a thread, measured: commits.py.
        """
        commits = self.commits
        async with receive:
            while True:
                if commits.returned:
                    await commits.settle()  # stored while idle: release before sleeping
                items: list[Any] = []
                try:
                    await self._wait_for_work(items)
                except trio.EndOfChannel:
                    await commits.settle()
                    return
                self._take_queued(items, receive)
                self._execute(items)  # while the previous pass's commit is in flight
                await commits.settle()
                commits.launch()
                if self._queued_batches:
                    await trio.lowlevel.checkpoint()  # as in _serve: let the others run

    def _wake_if_parked(self) -> None:
        """A commit returned (or held commands may run): an actor asleep on its empty inbox
        wakes to release its replies."""
        if self._armed_deadline is not None:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError,
                                     trio.ClosedResourceError):  # fmt: skip
                self.inbox.send_nowait(Wake())

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
        commits = self.commits
        busy = self._queued_batches or self._inline_spent or commits.withheld or self._failure
        # An inline pass cannot wait for a threaded commit: it goes through the inbox.
        busy = busy or commits.threaded
        if armed is None or busy:
            return False
        self._inline_spent = True
        self._execute(items)
        try:
            if self.store is not None:  # memory mode: not even the call
                commits.commit()
        except StoreError as exc:  # the actor raises it; the replies are never released
            self._failure = exc
        if commits.withheld is not None or self._failure is not None:
            # The actor retries the writes (it may wait) and then replies, or raises the failure.
            self._armed_deadline = None
            self.inbox.send_nowait(Wake())
            return True
        self.fanout.send_replies()
        if self.store is not None:
            self.store.tidy()  # as in _serve
        state = self.engine.state
        timers = state.wheel.heap
        # `wheel.next_deadline() < armed or state.housekeeping_due()`, inline (every request).
        earlier = timers and timers[0].at_ms < armed
        upkeep = state.upkeep
        if earlier or upkeep.untidy or upkeep.purges or upkeep.graveyard.lots or self._running:
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
        changes, observers = state.changes, state.observers
        if changes.dirty_queues or observers.finished or (timers and timers[0].at_ms <= now):
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
        finished = observers.finished
        if finished and not engine.lifecycle.job_waiters:
            observers.drop_finished()  # `answer_job_waiters` with nobody waiting (every ACK)
        if changes.dirty_queues or finished or (timers and timers[0].at_ms <= now):
            engine.tick(now)
        upkeep = state.upkeep
        if upkeep.untidy or upkeep.purges or upkeep.graveyard.lots:  # `housekeeping_due`, inline
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
