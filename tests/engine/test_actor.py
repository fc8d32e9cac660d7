"""The engine actor: one connection's commands run in the order they came, however busy it is."""

from __future__ import annotations

from typing import Any

import msgspec
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.core import Engine
from broker.engine.runtime.actor import (
    INBOX_SIZE,
    LOADING,
    LOADING_HOLD_S,
    Batch,
    Disconnect,
    EngineActor,
)
from tests.support.actor import RecordingSession, command
from tests.support.app import EPOCH_MS

ATTEMPTS = 20  # Trio shuffles who runs first in a round: each attempt has even odds


async def test_a_batch_never_overtakes_one_the_actor_took_from_its_inbox() -> None:
    for _ in range(ATTEMPTS):
        actor = EngineActor(Engine(), Clock(EPOCH_MS))
        session = RecordingSession(actor.outbox)
        actor.inbox.send_nowait(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)  # it takes the PUSH from its inbox...
            await trio.lowlevel.checkpoint()
            # ...and the same session's PULL, sent now, must still run after it.
            await actor.submit(Batch(session, [command(cmd="PULL", queue="q")]))
            await trio.testing.wait_all_tasks_blocked()
            actor.inbox.close()
        first, second = session.replies
        assert "job" not in first, "the PULL ran before the PUSH it followed"
        assert second["job"]["id"] == first["id"]


async def test_batches_of_many_connections_in_one_scheduler_turn_share_one_pass() -> None:
    # Were each connection's batch to run inline while the actor looks idle, every one would
    # commit on its own and a busy broker would serve a turn of the scheduler per commit.
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    sessions = [RecordingSession(actor.outbox) for _ in range(10)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # the actor is idle, parked on its inbox
        passes: list[int] = []
        actor.on_pass = passes.append
        async with trio.open_nursery() as clients:
            for session in sessions:
                batch = Batch(session, [command(cmd="PUSH", queue="q", data=1)])
                clients.start_soon(actor.submit, batch)
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    assert all(len(session.replies) == 1 for session in sessions)
    assert sum(passes) == 10 and len(passes) <= 2  # one inline, the other nine together


def push_batch(session: RecordingSession) -> Batch:
    return Batch(session, [command(cmd="PUSH", queue="q", data=1)])


async def test_an_idle_actor_lends_one_batch_per_scheduler_turn_its_pass_inline() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    await actor.restore()  # nothing stored: loaded (else the sends wait for the load first)
    session = RecordingSession(actor.outbox)
    # Sent before the actor runs, and one send cancelled: all three go through the inbox.
    for _ in range(2):
        await actor.submit(push_batch(session))
    with trio.CancelScope() as cancelled:
        cancelled.cancel()
        await actor.submit(push_batch(session))
    assert actor.submit_inline(push_batch(session)) is False  # not parked: not running yet
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # the inbox is drained, the actor parked
        assert len(session.replies) == 2
        assert actor.submit_inline(push_batch(session)) is True
        assert len(session.replies) == 3  # run in this task, before it yields
        assert actor.submit_inline(push_batch(session)) is False  # once per turn
        await trio.testing.wait_all_tasks_blocked()
        assert actor.submit_inline(push_batch(session)) is True  # the next turn: again
        actor.inbox.close()
    assert len(session.replies) == 4


async def test_after_an_inline_pass_woke_the_actor_nothing_runs_inline_until_it_slept() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    session = RecordingSession(actor.outbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # parked, no timer: asleep for good
        delayed = Batch(session, [command(cmd="PUSH", queue="q", data=1, delay=1000)])
        assert actor.submit_inline(delayed) is True  # its timer is earlier: the actor is woken
        actor._inline_spent = False  # as on the scheduler's next turn, before the actor ran
        assert actor.submit_inline(push_batch(session)) is False  # its sleep is stale
        await trio.testing.wait_all_tasks_blocked()
        assert actor.submit_inline(push_batch(session)) is True  # re-armed: inline again
        actor.inbox.close()
    assert len(session.replies) == 2


async def test_batches_submitted_together_run_as_one_inline_pass_in_their_order() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    first, second = RecordingSession(actor.outbox), RecordingSession(actor.outbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # parked: the next pass may run inline
        passes: list[int] = []
        actor.on_pass = passes.append
        pushed = Batch(first, [command(cmd="PUSH", queue="q", data=1)])
        pulled = Batch(second, [command(cmd="PULL", queue="q"), command(cmd="Count", queue="q")])
        await actor.submit_all([pushed, pulled])
        assert passes == [3]  # one pass, before submit_all returned
        assert second.replies[0]["job"]["id"] == first.replies[0]["id"]  # the PUSH ran first
        actor.inbox.close()


async def test_batches_submitted_together_to_a_busy_actor_queue_in_their_order() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    sessions = [RecordingSession(actor.outbox) for _ in range(3)]
    # The actor is not running yet: nothing runs inline, and more batches than the inbox holds
    # make the last ones wait for room.
    batches = [
        Batch(sessions[n % 3], [command(cmd="PUSH", queue="q", data=n)])
        for n in range(INBOX_SIZE + 5)
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.submit_all, batches)
        await trio.testing.wait_all_tasks_blocked()
        assert not any(session.replies for session in sessions)
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    ids = [reply["id"] for session in sessions for reply in session.replies]
    assert len(ids) == INBOX_SIZE + 5 and actor._queued_batches == 0
    for number, session in enumerate(sessions):  # each session's replies in its own order
        jobs = [actor.engine.state.jobs[reply["id"]] for reply in session.replies]
        numbers = [msgspec.msgpack.decode(job.data) for job in jobs]
        assert numbers == list(range(number, INBOX_SIZE + 5, 3))


async def test_batches_submitted_together_to_a_loaded_actor_wait_for_room_in_their_order() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    await actor.restore()  # loaded: the batches go straight to the inbox while it has room
    session = RecordingSession(actor.outbox)
    batches = [
        Batch(session, [command(cmd="PUSH", queue="q", data=n)]) for n in range(INBOX_SIZE + 3)
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.submit_all, batches)
        await trio.testing.wait_all_tasks_blocked()  # the inbox is full: the last ones wait
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    jobs = [actor.engine.state.jobs[reply["id"]] for reply in session.replies]
    assert [msgspec.msgpack.decode(job.data) for job in jobs] == list(range(INBOX_SIZE + 3))


async def test_batches_submitted_together_while_jobs_load_are_refused_past_the_bound(
    autojump_clock: Any,
) -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))  # never restored: still loading
    session = RecordingSession(actor.outbox)
    started = trio.current_time()
    await actor.submit_all([Batch(session, [command(cmd="Count", queue="q", reqId="c")])])
    assert trio.current_time() - started == LOADING_HOLD_S
    assert session.replies == [{"ok": False, "error": LOADING}]


async def test_batches_whose_send_was_cancelled_are_not_counted_as_queued() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    await actor.restore()  # nothing stored: loaded (else batches wait for the load first)
    session = RecordingSession(actor.outbox)
    batches = [push_batch(session) for _ in range(INBOX_SIZE + 2)]
    with trio.CancelScope() as waiting:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.submit_all, batches)
            await trio.testing.wait_all_tasks_blocked()  # the inbox is full: it waits for room
            waiting.cancel()
    assert actor._queued_batches == INBOX_SIZE  # the two never sent are not counted
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        assert len(session.replies) == INBOX_SIZE
        assert actor.submit_inline(push_batch(session)) is True  # nothing counted as waiting
        actor.inbox.close()


class SealedSink:
    """A ReplySink whose fields cannot be written from outside: `closed` is read only and
    there is no room for anything else (slots), as the engine must not write a transport's
    fields."""

    __slots__ = ("_closed", "_outbox", "replies")

    def __init__(self, outbox: set[Any]) -> None:
        self._closed = False
        self._outbox = outbox
        self.replies: list[dict[str, Any]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def full(self) -> bool:
        return False

    def close(self) -> None:
        """What the transport does itself when its client goes."""
        self._closed = True

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        self.replies.append(msgspec.msgpack.decode(msgspec.msgpack.encode(reply)))  # as sent
        self._outbox.add(self)

    def send_staged(self) -> None:
        pass


async def test_a_closing_connection_gets_its_jobs_requeued_and_is_never_written_to() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    worker, other = SealedSink(actor.outbox), SealedSink(actor.outbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await actor.submit(Batch(worker, [command(cmd="PUSH", queue="q", data=1)]))
        await actor.submit(Batch(worker, [command(cmd="PULL", queue="q")]))  # no lease: held
        job_id = worker.replies[1]["job"]["id"]
        worker.close()
        await actor.inbox.send(Disconnect(worker))
        await trio.testing.wait_all_tasks_blocked()  # the actor took it (another connection's
        # batch may otherwise run inline first: nothing orders two connections)
        await actor.submit(Batch(other, [command(cmd="GetState", id=job_id)]))
        await actor.submit(Batch(other, [command(cmd="GetJob", id=job_id)]))
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    assert other.replies[-2]["state"] == "waiting"  # back in the queue, no attempt spent
    job = other.replies[-1]["job"]
    assert job["attempts"] == 0 and job["lastHeartbeat"] >= job["createdAt"]  # when requeued


def test_an_engine_without_metrics_observers_settles_jobs() -> None:
    # The app sets the latency observers; an engine used on its own has none.
    engine = Engine()
    session = RecordingSession(set())
    for fields in ({"cmd": "PUSH", "queue": "q", "data": 1}, {"cmd": "PULL", "queue": "q"}):
        engine.execute(session, command(**fields), EPOCH_MS)
    job_id = session.replies[1]["job"]["id"]
    engine.execute(session, command(cmd="ACK", id=job_id), EPOCH_MS + 5)
    assert session.replies[2] == {"ok": True}
    engine.execute(session, command(cmd="PUSH", queue="q", data=2), EPOCH_MS)
    engine.execute(session, command(cmd="PULLB", queue="q", count=5), EPOCH_MS)
    batch = [job["id"] for job in session.replies[4]["jobs"]]
    engine.execute(session, command(cmd="ACKB", ids=batch), EPOCH_MS + 5)
    assert session.replies[5] == {"ok": True}
    assert engine.state.jobs[batch[0]].state == "completed"


class UnreadSession(RecordingSession):
    """A session whose client reads nothing until told to: full once it holds `room` replies."""

    def __init__(self, outbox: set[Any], room: int) -> None:
        super().__init__(outbox)
        self.room = room
        self.unread = 0
        self.on_room: Any = None

    @property  # type: ignore[override]
    def full(self) -> bool:
        return self.unread >= self.room

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        self.unread += 1
        super().stage_reply(reply, req_id)

    def notify_room(self, callback: Any) -> None:
        self.on_room = callback

    def read_all(self) -> None:
        """The client reads every reply: the session has room, and says so."""
        self.unread = 0
        callback, self.on_room = self.on_room, None
        if callback is not None:
            callback(self)


def pushes(*names: str) -> list[Any]:
    return [command(cmd="PUSH", queue="q", data=name) for name in names]


async def test_a_full_session_has_its_commands_held_back_in_order_until_it_has_room() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    slow, other = UnreadSession(actor.outbox, room=2), RecordingSession(actor.outbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await actor.submit(Batch(slow, pushes("a", "b", "c")))
        await actor.submit(Batch(slow, pushes("d")))  # behind the held ones
        await actor.submit(Batch(other, [command(cmd="Count", queue="q")]))
        await trio.testing.wait_all_tasks_blocked()
        # Two replies unread: the rest wait, and the actor serves the others meanwhile.
        assert len(slow.replies) == 2 and slow.on_room is not None
        assert other.replies == [{"ok": True, "count": 2}]
        slow.read_all()
        await trio.testing.wait_all_tasks_blocked()
        assert len(slow.replies) == 4  # "c" ran, and "d" after it
        slow.read_all()
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    ids = [reply["id"] for reply in slow.replies]
    data = [actor.engine.state.jobs[job_id].data for job_id in ids]
    assert [msgspec.msgpack.decode(d) for d in data] == ["a", "b", "c", "d"]


async def test_the_commands_held_for_a_client_that_leaves_never_run() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    slow, other = UnreadSession(actor.outbox, room=1), RecordingSession(actor.outbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await actor.submit(Batch(slow, pushes("a", "b")))
        slow.closed = True
        await actor.inbox.send(Disconnect(slow))
        await trio.testing.wait_all_tasks_blocked()
        slow.read_all()  # too late: nothing of it is held any more
        await actor.submit(Batch(other, [command(cmd="Count", queue="q")]))
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    assert len(slow.replies) == 1 and other.replies == [{"ok": True, "count": 1}]


async def test_commands_held_for_several_sessions_run_in_one_pass_and_are_counted() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    slow = [UnreadSession(actor.outbox, room=1) for _ in range(2)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        for session in slow:
            await actor.submit(Batch(session, pushes("first", "held")))
        await trio.testing.wait_all_tasks_blocked()
        assert [len(session.replies) for session in slow] == [1, 1]
        passes: list[int] = []
        actor.on_pass = passes.append  # the metrics' commands per pass
        for session in slow:  # both clients read before the actor's next pass
            session.read_all()
        await trio.testing.wait_all_tasks_blocked()
        actor.inbox.close()
    assert [len(session.replies) for session in slow] == [2, 2]
    assert passes == [2]  # one pass ran the held command of each session


async def test_a_batch_behind_held_commands_runs_nothing_and_counts_nothing() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    slow = UnreadSession(actor.outbox, room=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await actor.submit(Batch(slow, pushes("a", "b")))  # "b" held: "a" is unread
        await trio.testing.wait_all_tasks_blocked()
        passes: list[int] = []
        actor.on_pass = passes.append  # the metrics' commands per pass
        await actor.submit(Batch(slow, pushes("c")))
        await trio.testing.wait_all_tasks_blocked()
        assert len(slow.replies) == 1 and passes == [0]  # "c" waits behind "b"
        actor.inbox.close()


async def test_a_full_sessions_next_single_command_is_held_until_it_has_room() -> None:
    actor = EngineActor(Engine(), Clock(EPOCH_MS))
    slow = UnreadSession(actor.outbox, room=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await actor.submit(Batch(slow, pushes("a")))  # its reply is unread: the session is full
        await actor.submit(Batch(slow, pushes("b")))  # nothing held yet: held now
        await trio.testing.wait_all_tasks_blocked()
        assert len(slow.replies) == 1 and slow.on_room is not None
        slow.read_all()
        await trio.testing.wait_all_tasks_blocked()
        assert len(slow.replies) == 2
        actor.inbox.close()
