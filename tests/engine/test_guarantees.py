"""The engine's promises to clients: a reply means the change is stored, and a store that fails
stops the broker instead of answering `ok` for a change it could not keep."""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.core import Engine
from broker.engine.runtime.actor import Batch, EngineActor
from broker.node.app import App
from broker.node.config import Config
from store import LeaseLost, StoreError
from tests.support.actor import LoggingSession, command
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.stores import FailingStore, FencedStore, FlakyStore, RecordingStore


def logged_actor() -> tuple[EngineActor, LoggingSession, list[str]]:
    log: list[str] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), RecordingStore(log))
    return actor, LoggingSession(actor.outbox, log), log


async def test_a_batch_run_inline_is_committed_before_its_reply() -> None:
    actor, session, log = logged_actor()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()  # the actor is parked: batches run inline
        await actor.submit(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
        actor.inbox.close()
    assert log == ["commit", "reply"]


async def test_a_batch_from_the_inbox_is_committed_before_its_reply() -> None:
    actor, session, log = logged_actor()
    actor.inbox.send_nowait(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
    actor.inbox.close()
    await actor.run()  # takes the batch from its inbox, then sees the inbox closed
    assert log == ["commit", "reply"]


class TidyingStore(RecordingStore):
    """Also writes "tidy" into the log when asked for its upkeep (a SQLite store checkpoints
    then, which took 36-280 ms: replies must not wait for it)."""

    def tidy(self) -> None:
        self.log.append("tidy")


async def test_a_stores_upkeep_comes_after_the_replies_inline_and_from_the_inbox() -> None:
    for inline in (True, False):
        log: list[str] = []
        actor = EngineActor(Engine(), Clock(EPOCH_MS), TidyingStore(log))
        session = LoggingSession(actor.outbox, log)
        batch = Batch(session, [command(cmd="PUSH", queue="q", data=1)])
        if inline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(actor.run)
                await trio.testing.wait_all_tasks_blocked()  # parked: the batch runs inline
                await actor.submit(batch)
                actor.inbox.close()
        else:
            actor.inbox.send_nowait(batch)
            actor.inbox.close()
            await actor.run()
        assert log == ["commit", "reply", "tidy"], inline


async def test_a_store_failure_stops_the_broker_and_the_client_is_not_told_ok(
    autojump_clock,
) -> None:
    store = FailingStore()
    replies: list[Any] = []
    with pytest.RaisesGroup(
        pytest.RaisesExc(StoreError, match="disk full"), flatten_subgroups=True
    ):
        async with trio.open_nursery() as nursery:
            app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
            await nursery.start(app.run)
            client = await memory_connector(app, nursery)()
            assert (await client.call("PUSH", queue="q", data=1))["ok"] is True
            store.broken = True
            await client.send({"cmd": "PUSH", "queue": "q", "data": 2, "reqId": "lost"})
            # The broker stops (cancelling this) or closes the connection; under MockClock a
            # broker that carries on fails the test at once.
            with contextlib.suppress(EOFError), trio.fail_after(60):
                while True:
                    replies.append(await client.receive())
    assert replies == []
    assert len(store.rows) == 1  # only the job whose push was answered


async def test_a_unique_key_is_free_again_after_a_final_failure(
    client: FrameClient, autojump_clock
) -> None:
    failed = await push(client, uniqueKey="k", maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=failed, error="boom")
    assert await state_of(client, failed) == "failed"
    after_fail = await push(client, uniqueKey="k", maxAttempts=1)
    assert after_fail != failed
    await client.call("PULL", queue="q", owner="w", lockTtl=1000)
    await trio.sleep(10)  # the lease runs out three times: the job stalls for good
    for _ in range(2):
        await client.call("PULL", queue="q", owner="w", lockTtl=1000)
        await trio.sleep(10)
    assert await state_of(client, after_fail) == "failed"
    assert await push(client, uniqueKey="k") not in (failed, after_fail)


async def test_an_unreachable_database_withholds_replies_until_the_commit_is_stored(
    autojump_clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store = FlakyStore()
    async with trio.open_nursery() as nursery:
        app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
        await nursery.start(app.run)
        client = await memory_connector(app, nursery)()
        assert (await client.call("PUSH", queue="q", data=1))["ok"] is True
        await trio.sleep(10)  # the broker ran a while: the outage is timed from its own start
        store.down = True
        await client.send({"cmd": "PUSH", "queue": "q", "data": 2, "reqId": "held"})
        await client.send({"cmd": "PUSH", "queue": "q", "data": 3, "reqId": "behind"})
        with trio.move_on_after(5):  # five seconds of outage: no reply, retried all along
            await client.receive()
            pytest.fail("a reply came before its commit was stored")
        assert store.attempts > 10 and len(store.rows) == 1
        store.down = False
        replies = [await client.receive(), await client.receive()]
        assert [(r["reqId"], r["ok"]) for r in replies] == [("held", True), ("behind", True)]
        assert len(store.rows) == 3
        outage_logs = [r for r in caplog.records if "cannot commit" in r.getMessage()]
        assert len(outage_logs) == 1 and "connection refused" in outage_logs[0].getMessage()
        assert outage_logs[0].levelname == "WARNING"  # the operator should look at the database
        recovered = [r.getMessage() for r in caplog.records if "stored again" in r.getMessage()]
        assert len(recovered) == 1
        # The end of the outage is normal again: nothing to act on.
        assert [r.levelname for r in caplog.records if "stored again" in r.getMessage()] == ["INFO"]
        match = re.fullmatch(r"commits stored again after (\d+\.\d) s", recovered[0])
        assert match is not None and 5 <= float(match[1]) < 7, recovered
        app.shutdown()


async def test_a_lost_lease_in_an_inline_pass_ends_the_actor_not_the_callers_task() -> None:
    log: list[str] = []
    store = FencedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    session = LoggingSession(actor.outbox, log)
    submitted = False
    with pytest.RaisesGroup(pytest.RaisesExc(LeaseLost), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            await trio.testing.wait_all_tasks_blocked()  # parked: the batch runs inline
            store.fenced = True
            await actor.submit(Batch(session, [command(cmd="PUSH", queue="q", data=1)]))
            submitted = True  # an HTTP request or a connection must not be the one to fail
            await trio.sleep_forever()
    assert submitted and log == []  # the actor stopped, and no reply was released


