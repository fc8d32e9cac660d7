"""A synchronous handle on an engine actor running in its own Trio run, for stateful tests.

Hypothesis calls a state machine's rules synchronously, so the actor lives in a Trio run in a
background thread, on a MockClock that moves only when a rule jumps it (no autojump: timers fire
exactly when the model says time passed). Every call goes in through the actor-level API
(`EngineActor.submit` with a `Batch` of decoded wire commands, `Disconnect`) and returns once the
Trio run is idle again, so each rule sees the engine after everything it caused.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.core import Engine
from broker.engine.runtime.actor import Batch, Disconnect, EngineActor
from protocol import decode_command
from store import MemoryStore, Store, open_sqlite
from tests.support.app import EPOCH_MS

as_sent = msgspec.msgpack.Decoder().decode
encode = msgspec.msgpack.Encoder().encode


class ModelSession:
    """A client connection (a `ReplySink`) that records every reply the engine gives it."""

    full = False  # never holds its commands back (ReplySink.full)

    def __init__(self, outbox: Callable[[], set[Any]]) -> None:
        self.closed = False
        self.replies: list[dict[str, Any]] = []
        self._outbox = outbox

    def stage_reply(self, reply: dict[str, Any], req_id: object) -> None:
        """Record `reply` as a client would decode it."""
        self.replies.append(as_sent(encode(reply)))
        self._outbox().add(self)

    def send_staged(self) -> None:
        """Nothing to send: replies are recorded when staged (the pass is committed by then)."""


class EngineHarness:
    """An engine actor on a store, in a Trio run of its own, driven one step at a time."""

    def __init__(self, store_kind: str, directory: Path) -> None:
        self.store_kind = store_kind
        self.path = str(directory / "model.db")
        self.store: Store = MemoryStore() if store_kind == "memory" else open_sqlite(self.path)
        self.clock = trio.testing.MockClock()
        self.actor: EngineActor | None = None
        self._jobs: queue.Queue[tuple[Callable[[], Any] | None, queue.Queue[Any]]] = queue.Queue()
        self._thread = threading.Thread(target=self._host, daemon=True)
        self._thread.start()
        self.run(self._start_actor)

    # -- what rules call ---------------------------------------------------------------------

    def session(self) -> ModelSession:
        """A new client connection."""
        return ModelSession(lambda: self._current_actor().outbox)

    def call(self, session: ModelSession, **fields: Any) -> dict[str, Any]:
        """Send one wire command from `session`; return its reply."""
        command = decode_command(encode(fields))

        async def submit() -> None:
            await self._current_actor().submit(Batch(session, [command]))

        before = len(session.replies)
        self.run(submit)
        assert len(session.replies) == before + 1, f"{fields} got {session.replies[before:]}"
        return session.replies[-1]

    def disconnect(self, session: ModelSession) -> None:
        """The client goes away."""
        session.closed = True

        async def send() -> None:
            await self._current_actor().inbox.send(Disconnect(session))

        self.run(send)

    def advance(self, seconds: float) -> None:
        """Move the clock on and let every timer due by then fire."""

        async def jump() -> None:
            self.clock.jump(seconds)

        self.run(jump)

    def restart(self) -> None:
        """Stop the actor, reopen the store (a fresh SQLite connection) and restore from it."""
        self.run(self._stop_actor)
        if self.store_kind == "sqlite":
            self.store.close()
            self.store = open_sqlite(self.path)
        self.run(self._start_actor)

    def close(self) -> None:
        """Stop the actor and the Trio run, and close the store."""
        self.run(self._stop_actor)
        self._jobs.put((None, queue.Queue()))  # None ends the host loop
        self._thread.join()
        self.store.close()

    def run(self, step: Callable[[], Any]) -> Any:
        """Run the async function `step` in the Trio run, then wait until it is idle."""
        done: queue.Queue[Any] = queue.Queue()
        self._jobs.put((step, done))
        outcome = done.get()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    # -- the Trio side -----------------------------------------------------------------------

    def _current_actor(self) -> EngineActor:
        assert self.actor is not None
        return self.actor

    def _host(self) -> None:
        trio.run(self._serve, clock=self.clock)

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._epoch = Clock(EPOCH_MS)
            while True:
                step, done = await trio.to_thread.run_sync(self._jobs.get)
                if step is None:
                    return
                try:
                    value = await step()
                    await trio.testing.wait_all_tasks_blocked()
                    done.put(value)
                except BaseException as error:  # handed to the rule, which fails the example
                    done.put(error)

    async def _start_actor(self) -> None:
        self.actor = EngineActor(Engine(), self._epoch, self.store)
        self._stopped = trio.Event()
        await self.actor.restore()

        async def serve(actor: EngineActor, task_status: Any) -> None:
            try:
                await actor.run(task_status=task_status)
            finally:
                self._stopped.set()

        await self._nursery.start(serve, self.actor)

    async def _stop_actor(self) -> None:
        actor = self._current_actor()
        await actor.inbox.send(actor.answer_parked_message())
        await actor.inbox.aclose()
        await self._stopped.wait()
