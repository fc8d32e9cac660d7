"""A TCP session's flow control when replies go straight to the socket (no writer task): a
reader stopped by a full in-flight budget reads again as soon as a reply is out, and a
shutdown waiting for the connection to drain is released."""

from __future__ import annotations

import trio
import trio.testing

from broker.server.frontdoor import InFlight
from broker.server.session import Session


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
