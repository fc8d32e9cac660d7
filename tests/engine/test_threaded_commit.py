"""A store that commits on a worker thread (`commit_in_thread`, as PostgreSQL does): the next pass
runs while the commit is in flight, and still no reply is released before its commit returned."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.core import Engine
from broker.engine.runtime.actor import Batch, EngineActor, Wake
from broker.engine.runtime.inflight import InFlightCommit
from broker.node.app import App
from broker.node.config import Config
from store import LeaseLost
from tests.support.actor import LoggingSession, RecordingSession, command
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.stores import FencedStore, FlakyStore, RecordingStore

BLOCKED_LOOP_S = 10
"""How long a gated commit waits for the test to open the gate: were the commit run on the
loop, the test could never open it (the guard only keeps such a failure from hanging)."""


class Session(LoggingSession):
    """A logging session whose staged replies can be detached while their commit is in flight."""

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result logs "reply" for them."""
        staged, self.staged = self.staged, []
        return lambda: self.log.append("reply") if staged else None


class GatedStore(RecordingStore):
    """A recording store committed on a worker thread, each commit held until `gate` opens."""

    commit_in_thread = True

    def __init__(self, log: list[str]) -> None:
        super().__init__(log)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Wait for the gate, then commit (and log "commit")."""
        self.entered.set()
        if not self.gate.wait(BLOCKED_LOOP_S):
            self.log.append("the commit blocked the loop")
        super().commit(*args, **kwargs)


async def test_replies_wait_for_a_commit_in_flight_on_a_worker_thread() -> None:
    log: list[str] = []
    store = GatedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    session = Session(actor.outbox, log)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        await actor.submit(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
        await trio.to_thread.run_sync(store.entered.wait)
        # The commit is in flight and this task runs: the loop is free, and nothing was sent.
        await trio.testing.wait_all_tasks_blocked()
        assert log == []
        store.gate.set()
        actor.inbox.close()
    assert log == ["commit", "reply"]


async def test_the_next_pass_runs_while_a_commit_is_in_flight_and_waits_for_it() -> None:
    log: list[str] = []
    store = GatedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    first, second = Session(actor.outbox, log), Session(actor.outbox, log)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        await actor.submit(Batch(first, [command(cmd="PUSH", queue="q", data=1)]))
        await trio.to_thread.run_sync(store.entered.wait)
        pushes = [command(cmd="PUSH", queue="q", data=data) for data in (2, 3)]
        await actor.submit(Batch(second, pushes))  # sent while the first commit is in flight...
        await trio.testing.wait_all_tasks_blocked()
        assert len(second.staged) == 2 and log == []  # ...run meanwhile, and held
        store.gate.set()
        actor.inbox.close()
    # One commit for the first pass, one for the batch run meanwhile; each pass's replies
    # after its own commit.
    assert log == ["commit", "reply", "commit", "reply"]
    assert len(store.rows) == 3


class ThreadedFencedStore(FencedStore):
    """A fenced store committed on a worker thread."""

    commit_in_thread = True


async def test_a_lease_lost_in_a_threaded_commit_ends_the_actor_and_releases_nothing() -> None:
    log: list[str] = []
    store = ThreadedFencedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    session = Session(actor.outbox, log)
    with pytest.RaisesGroup(pytest.RaisesExc(LeaseLost), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            await trio.testing.wait_all_tasks_blocked()
            store.fenced = True
            await actor.submit(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
            await trio.sleep_forever()
    assert log == []


class ThreadedFlakyStore(FlakyStore):
    """A flaky store committed on a worker thread; `retried` is set after ten attempts."""

    commit_in_thread = True

    def __init__(self) -> None:
        super().__init__()
        self.retried = threading.Event()

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Count the attempt, then commit or fail as FlakyStore does."""
        try:
            super().commit(*args, **kwargs)
        finally:
            if self.attempts > 10:
                self.retried.set()


async def test_a_threaded_commit_withholds_replies_through_an_outage(
    autojump_clock, caplog: pytest.LogCaptureFixture
) -> None:
    # Progress is counted in attempts, not in seconds: the mock clock jumps while a worker
    # thread runs (every task then waits), so a window of virtual time says nothing here.
    store = ThreadedFlakyStore()
    received: list[tuple[object, object, bool]] = []
    async with trio.open_nursery() as nursery:
        app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
        await nursery.start(app.run)
        client = await memory_connector(app, nursery)()
        assert (await client.call("PUSH", queue="q", data=1))["ok"] is True
        store.down = True

        async def receive_two(done: trio.Event) -> None:
            for _ in range(2):
                reply = await client.receive()
                received.append((reply["reqId"], reply["ok"], store.down))
            done.set()

        both = trio.Event()
        nursery.start_soon(receive_two, both)
        await client.send({"cmd": "PUSH", "queue": "q", "data": 2, "reqId": "held"})
        await client.send({"cmd": "PUSH", "queue": "q", "data": 3, "reqId": "behind"})
        await trio.to_thread.run_sync(store.retried.wait)  # retried all along, nothing stored
        assert len(store.rows) == 1 and received == []
        store.down = False
        await both.wait()
        assert received == [("held", True, False), ("behind", True, False)]
        assert len(store.rows) == 3
        app.shutdown()
    # The operator hears of the outage once, with its cause, not once per attempt.
    outage_logs = [r.getMessage() for r in caplog.records if "cannot commit" in r.getMessage()]
    assert len(outage_logs) == 1 and outage_logs[0].endswith(": connection refused")


async def test_events_of_a_pass_committed_on_a_worker_thread_follow_its_commit() -> None:
    log: list[str] = []
    store = GatedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    actor.bus.add_listener(lambda message: log.append(str(message["event"])), lambda: True)
    session = Session(actor.outbox, log)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        await actor.submit(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
        await trio.to_thread.run_sync(store.entered.wait)
        await trio.testing.wait_all_tasks_blocked()
        assert log == []  # no listener hears of a job that is not stored yet
        store.gate.set()
        actor.inbox.close()
    assert log == ["commit", "reply", "job:pushed"]


@pytest.mark.parametrize("threaded", [False, True], ids=["on the loop", "threaded"])
async def test_a_pass_takes_at_most_32_waiting_batches_and_stores_each_pass_once(
    threaded: bool,
) -> None:
    log: list[str] = []
    store = RecordingStore(log)
    store.commit_in_thread = threaded  # type: ignore[attr-defined]
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    passes: list[int] = []
    actor.on_pass = passes.append
    session = Session(actor.outbox, log)
    for data in range(40):  # waiting before the actor runs: taken without yielding
        actor.inbox.send_nowait(Batch(session, [command(cmd="PUSH", queue="q", data=data)]))
    actor.inbox.close()
    await actor.run()
    assert passes == [32, 8]
    assert log == ["commit", "reply", "commit", "reply"]
    assert len(store.rows) == 40


async def run_threaded(store: RecordingStore, *commands: Any) -> None:
    """Run each command in a pass of its own on an actor committing on a worker thread."""
    store.commit_in_thread = True  # type: ignore[attr-defined]
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    session = Session(actor.outbox, [])
    for one in commands:
        actor.inbox.send_nowait(Batch(session, [one]))
    actor.inbox.close()
    await actor.run()


async def test_settings_and_record_deletions_are_stored_by_a_threaded_commit() -> None:
    store = RecordingStore([])
    cron = command(cmd="Cron", name="c", queue="cq", data=1, repeatEvery=10_000)
    await run_threaded(store, command(cmd="Pause", queue="q"), cron)
    assert ("cron", "c") in store.records
    await run_threaded(store, command(cmd="CronDelete", name="c"))
    assert ("cron", "c") not in store.records
    # A broker started on the same store finds the queue paused.
    store.commit_in_thread = False  # type: ignore[attr-defined]  # (replies recorded at once)
    restarted = EngineActor(Engine(), Clock(EPOCH_MS), store)
    asking = RecordingSession(restarted.outbox)
    restarted.inbox.send_nowait(Batch(asking, [command(cmd="IsPaused", queue="q")]))
    restarted.inbox.close()
    await restarted.run()
    assert asking.replies == [{"ok": True, "paused": True}]


async def test_a_commit_returning_while_the_inbox_is_full_or_closed_is_no_error() -> None:
    # The worker thread's result is delivered on the loop while the actor is parked; at that
    # moment the inbox may have filled up behind the item that woke it, or been closed by a
    # shutdown. The wake-up is then not needed, and must not crash the broker.
    actor = EngineActor(Engine(), Clock(EPOCH_MS), GatedStore([]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # parked on its empty inbox
        actor.inbox.send_nowait(Wake())  # handed to the parked actor, which has not run yet
        with pytest.raises(trio.WouldBlock):
            while True:
                actor.inbox.send_nowait(Wake())
        actor._wake_if_parked()  # the inbox is full
        actor.inbox.close()
        actor._wake_if_parked()  # the inbox is closed


def test_a_commit_returning_after_the_broker_stopped_is_dropped_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A broker cancelled while a commit is in flight (a crash elsewhere, a hard stop) ends its
    # Trio run before the worker thread returns. The result has nowhere to go then; delivering
    # it must raise nothing on the worker thread (which would print a traceback at exit).
    raised: list[BaseException] = []
    delivered = threading.Event()
    start_thread_soon = trio.lowlevel.start_thread_soon

    def watched(job: Callable[[], Any], deliver: Callable[[Any], None]) -> None:
        def deliver_watched(result: Any) -> None:
            try:
                deliver(result)
            except BaseException as exc:
                raised.append(exc)
            finally:
                delivered.set()

        start_thread_soon(job, deliver_watched)

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", watched)
    gate = threading.Event()

    def commit_once_the_gate_opens(writes: tuple[Any, ...]) -> None:
        gate.wait(BLOCKED_LOOP_S)

    async def stop_with_a_commit_in_flight() -> None:
        commit = InFlightCommit(("write",), [], [], wake=lambda: None)
        commit.start(commit_once_the_gate_opens)

    trio.run(stop_with_a_commit_in_flight)
    gate.set()  # the commit returns after the run ended
    assert delivered.wait(BLOCKED_LOOP_S)
    assert raised == []
