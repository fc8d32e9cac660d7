"""A broker loading its stored jobs (issue 29): both ports open at once, Ping, `/health` and
`/ready` (503) answered, commands held until the load ends (at most LOADING_HOLD_S, then refused
with a clear error, nothing done), HTTP commands answered 503 at once."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.runtime.actor import LOADING, LOADING_HOLD_S, EngineActor
from broker.node.app import App
from broker.node.config import Config
from store import open_postgres
from store.memory import MemoryStore
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.client import FrameClient
from tests.support.http import http
from tests.support.jobs import stored_job


class Gate:
    """Holds every start-up's load (EngineActor._load) until `open` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = trio.Event()
        self.loading = trio.Event()
        load: Callable[[EngineActor, Any], Awaitable[None]] = EngineActor._load

        async def gated(actor: EngineActor, store: Any) -> None:
            self.loading.set()
            await self.open.wait()
            await load(actor, store)

        monkeypatch.setattr(EngineActor, "_load", gated)


async def loading_app(nursery: trio.Nursery, gate: Gate) -> App:
    """A broker with one stored job (`stored`), started and held in its load."""
    store = MemoryStore()
    store.rows["stored"] = stored_job("stored")
    app = App(Config(host="127.0.0.1", port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
    nursery.start_soon(app.run)
    await gate.loading.wait()
    return app


async def test_while_jobs_load_ping_is_answered_and_a_command_waits_for_the_load(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, autojump_clock
) -> None:
    gate = Gate(monkeypatch)
    app = await loading_app(nursery, gate)
    client = await memory_connector(app, nursery)()
    await client.send({"cmd": "GetState", "id": "stored", "reqId": "held"})
    await trio.testing.wait_all_tasks_blocked()
    other = await memory_connector(app, nursery)()  # a connection's commands stay in order:
    # its own Ping would wait behind the held command; another connection's does not
    assert (await other.call("Ping"))["ok"] is True
    await trio.sleep(LOADING_HOLD_S - 1)
    gate.open.set()
    started = trio.current_time()
    reply = await client.receive()
    assert (reply["reqId"], reply["ok"], reply["state"]) == ("held", True, "waiting")
    assert trio.current_time() - started < 1  # answered by the load's end
    app.shutdown()


async def test_a_command_held_past_the_bound_is_refused_with_its_reqid_and_not_run(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, autojump_clock
) -> None:
    gate = Gate(monkeypatch)
    app = await loading_app(nursery, gate)
    client = await memory_connector(app, nursery)()
    started = trio.current_time()
    await client.send({"cmd": "PUSH", "queue": "late", "data": 1, "reqId": "p"})
    assert await client.receive() == {"ok": False, "error": LOADING, "reqId": "p"}
    assert trio.current_time() - started == pytest.approx(LOADING_HOLD_S)
    gate.open.set()
    assert (await client.call("Count", queue="late"))["count"] == 0  # the PUSH never ran
    app.shutdown()


async def test_http_answers_health_and_not_ready_while_loading_and_commands_503(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, autojump_clock
) -> None:
    gate = Gate(monkeypatch)
    app = await loading_app(nursery, gate)
    status, _, body = await http(app, nursery, "GET", "/health")
    assert (status, json.loads(body)["status"]) == (200, "loading")
    status, _, body = await http(app, nursery, "GET", "/ready")
    assert (status, json.loads(body)) == (503, {"ok": False, "ready": False})
    for method, path in (("GET", "/jobs/stored/state"), ("GET", "/stats")):
        status, _, body = await http(app, nursery, method, path)
        assert (status, json.loads(body)) == (503, {"ok": False, "error": LOADING})
    gate.open.set()
    await trio.testing.wait_all_tasks_blocked()
    status, _, body = await http(app, nursery, "GET", "/health")
    assert (status, json.loads(body)["status"]) == (200, "healthy")
    assert (await http(app, nursery, "GET", "/ready"))[0] == 200
    app.shutdown()


async def test_the_tcp_port_accepts_and_answers_ping_on_real_sockets_while_loading(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real sockets: the read hub, which serves idle connections, waits for the load, so a
    # connection whose command is held holds up no other.
    gate = Gate(monkeypatch)
    store = MemoryStore()
    store.rows["stored"] = stored_job("stored")
    app = App(Config(host="127.0.0.1", port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
    with trio.fail_after(30):
        listeners = await nursery.start(app.run)  # reported while the load waits at the gate
        assert gate.loading.is_set() and not gate.open.is_set()
        port = listeners[0].socket.getsockname()[1]
        waiting = FrameClient(await trio.open_tcp_stream("127.0.0.1", port))
        await waiting.send({"cmd": "GetState", "id": "stored", "reqId": "held"})
        for _ in range(3):
            pinging = FrameClient(await trio.open_tcp_stream("127.0.0.1", port))
            assert (await pinging.call("Ping"))["ok"] is True
            await pinging.aclose()
        gate.open.set()
        reply = await waiting.receive()
        assert (reply["reqId"], reply["state"]) == ("held", "waiting")
        assert (await waiting.call("Ping"))["ok"] is True
        await waiting.aclose()
    app.shutdown()


async def test_a_postgresql_broker_taking_the_lease_answers_ping_while_it_loads(
    monkeypatch: pytest.MonkeyPatch, postgres_server: Any, pg_schema: str
) -> None:
    # Its active term takes TCP clients before it restores, as a single broker does.
    gate = Gate(monkeypatch)
    store = open_postgres(postgres_server.url, pg_schema)
    config = Config(host="127.0.0.1", port=0, http_port=0, postgres_url=postgres_server.url,
                    pg_schema=pg_schema)  # fmt: skip
    app = App(config, store, clock=Clock(EPOCH_MS))
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:  # ends when the broker has stopped
                listeners = await nursery.start(app.run)
                assert gate.loading.is_set() and not gate.open.is_set()
                place = listeners[0].socket.getsockname()
                client = FrameClient(await trio.open_tcp_stream(*place))
                assert (await client.call("Ping"))["ok"] is True
                await client.send({"cmd": "PUSH", "queue": "q", "data": 1, "reqId": "held"})
                gate.open.set()
                assert (await client.receive())["ok"] is True
                await client.aclose()
                app.shutdown()
    finally:
        store.close()
