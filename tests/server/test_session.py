"""A TCP session's flow control when replies go straight to the socket (no writer task): a
reader stopped by a full in-flight budget reads again as soon as a reply is out, and a
shutdown waiting for the connection to drain is released."""

from __future__ import annotations

import trio
import trio.testing

from broker.server.frontdoor import InFlight
from broker.server.session import Session
from broker.server.unsent import UnsentBytes


def full_session(sent: list[bytes]) -> Session:
    """A session whose socket takes every byte, with every in-flight slot taken."""

    def send(data: bytearray) -> int:
        sent.append(bytes(data))
        return len(data)

    budget = InFlight(limit=2)
    budget.take(2)
    return Session(set(), budget, direct_send=send)


async def test_a_reply_sent_directly_lets_a_full_reader_read_again() -> None:
    sent: list[bytes] = []
    session = full_session(sent)
    room: list[int] = []

    async def reader() -> None:
        room.append(await session.wait_capacity())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert room == []  # stopped: the budget is full
        session.stage_reply({"ok": True}, "r1")
        session.send_staged()
        await trio.testing.wait_all_tasks_blocked()
        assert room == [1] and len(sent) == 1
        nursery.cancel_scope.cancel()  # a reader still parked would otherwise hang the test


async def test_a_drain_ends_when_the_last_reply_is_sent_directly() -> None:
    sent: list[bytes] = []
    session = full_session(sent)
    drained = trio.Event()

    async def drain() -> None:
        await session.wait_flushed()
        drained.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await trio.testing.wait_all_tasks_blocked()
        for req_id in ("r1", "r2"):
            session.stage_reply({"ok": True}, req_id)
        session.send_staged()
        await trio.testing.wait_all_tasks_blocked()
        assert drained.is_set() and len(sent) == 1  # both replies in one send
        nursery.cancel_scope.cancel()


def test_replies_detached_for_a_commit_in_flight_stay_weighed_until_released() -> None:
    unsent = UnsentBytes(per_connection=100_000)
    session = Session(set(), InFlight(), direct_send=lambda data: 0, unsent=unsent)  # full socket
    session.stage_reply({"ok": True, "data": "x" * 150_000}, "r1")
    assert session.full and unsent.total > 150_000
    release = session.take_staged()  # the pass's commit runs on a thread meanwhile
    assert session.full and session.unsent_bytes() == unsent.total > 150_000
    release()  # stored: the socket takes nothing, so the bytes wait for the writer
    assert session.full and session.unsent_bytes() == unsent.total > 150_000
    session.close()
    assert not session.full and unsent.total == 0


def test_a_session_closed_with_a_commit_in_flight_leaves_nothing_in_the_total() -> None:
    unsent = UnsentBytes()
    session = Session(set(), InFlight(), direct_send=len, unsent=unsent)
    session.stage_reply({"ok": True, "data": "x" * 1000}, "r1")
    release = session.take_staged()
    session.close()
    release()
    session.stage_reply({"ok": True}, "r2")  # the engine may still answer a gone client
    session.send_staged()
    assert unsent.total == 0 and session.unsent_bytes() == 0
