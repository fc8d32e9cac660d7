"""What operators and subscribers see: liveness, readiness through a graceful shutdown and its
grace window, the REST fail path, and job events (failed, stalled, removed) over WebSocket."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
import trio_websocket

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from store import open_postgres
from tests.support.app import EPOCH_MS, memory_connector, start_app
from tests.support.client import FrameClient
from tests.support.http import http
from tests.support.postgres import PrivateServer
from tests.support.websocket import call, connect

GRACE_S = 5.0


async def test_live_answers_ok(app: App, nursery: trio.Nursery) -> None:
    assert await http(app, nursery, "GET", "/live") == (200, "text/plain", b"OK")


class GatedStream(trio.abc.Stream):
    """The broker's end of a connection whose client reads nothing until `gate` is set (a
    congested network): the broker's writes wait for the gate."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self.gate = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Wait for the gate, then send."""
        await self.gate.wait()
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """Wait for the gate."""
        await self.gate.wait()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Receive as the wrapped stream does."""
        return bytes(await self._stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        """Close the wrapped stream."""
        await self._stream.aclose()


def gated_client(app: App) -> tuple[FrameClient, trio.Event]:
    """A TCP client whose replies reach it only once the returned event is set."""
    client, server = trio.testing.memory_stream_pair()
    gated = GatedStream(server)
    assert app.tcp is not None
    app.tcp.adopt(gated)
    return FrameClient(client), gated.gate


async def test_ready_turns_503_at_shutdown_and_in_flight_replies_get_the_grace_window(
    autojump_clock,
) -> None:
    with trio.fail_after(GRACE_S * 10):
        async with trio.open_nursery() as probes:  # outlives the app, as a prober's would
            async with trio.open_nursery() as nursery:
                config = Config(port=0, http_port=0, shutdown_grace_s=GRACE_S)
                app = await start_app(nursery, config)
                assert (await http(app, probes, "GET", "/ready"))[0] == 200
                (slow, slow_gate), (stuck, _) = gated_client(app), gated_client(app)
                await slow.send({"cmd": "PUSH", "queue": "q", "data": 1, "reqId": "slow"})
                await stuck.send({"cmd": "PUSH", "queue": "q", "data": 2, "reqId": "stuck"})
                await trio.testing.wait_all_tasks_blocked()  # both replies wait on the network
                started = trio.current_time()
                app.shutdown()
                await trio.testing.wait_all_tasks_blocked()
                status, _, body = await http(app, probes, "GET", "/ready")
                assert (status, json.loads(body)) == (503, {"ok": False, "ready": False})
                await trio.sleep(GRACE_S - 0.1)
                slow_gate.set()  # the network clears within the grace window
                reply = await slow.receive()
                assert (reply["reqId"], reply["ok"]) == ("slow", True)
            # The broker stopped when the window closed, without the stuck client's reply.
            assert trio.current_time() - started == pytest.approx(GRACE_S)
            with pytest.raises(EOFError):
                await stuck.receive()


async def test_ready_turns_503_at_shutdown_on_postgresql_too(
    postgres_server: PrivateServer, pg_schema: str, autojump_clock
) -> None:
    # The role loop (ha.py) runs a PostgreSQL broker: its active term must say not ready as
    # soon as the shutdown begins, while in-flight replies still get their grace window.
    store = open_postgres(postgres_server.url, pg_schema)
    try:
        with trio.fail_after(GRACE_S * 10):
            async with trio.open_nursery() as probes, trio.open_nursery() as nursery:
                config = Config(port=0, http_port=0, shutdown_grace_s=GRACE_S,
                                postgres_url=postgres_server.url, pg_schema=pg_schema)  # fmt: skip
                app = App(config, store, clock=Clock(EPOCH_MS))
                await nursery.start(app.run)
                assert app.http is not None and app.actor is not None  # the active term's
                await app.actor.loaded.wait()
                await trio.testing.wait_all_tasks_blocked()  # then the engine runs: ready
                assert (await http(app, probes, "GET", "/ready"))[0] == 200
                slow, slow_gate = gated_client(app)
                await slow.send({"cmd": "PUSH", "queue": "q", "data": 1, "reqId": "slow"})
                await trio.testing.wait_all_tasks_blocked()  # the reply waits on the network
                app.shutdown()
                await trio.testing.wait_all_tasks_blocked()
                status, _, body = await http(app, probes, "GET", "/ready")
                assert (status, json.loads(body)) == (503, {"ok": False, "ready": False})
                slow_gate.set()  # within the grace window
                reply = await slow.receive()
                assert (reply["reqId"], reply["ok"]) == ("slow", True)
    finally:
        store.close()


async def test_a_parked_long_poll_is_answered_with_no_job_at_shutdown(autojump_clock) -> None:
    with trio.fail_after(GRACE_S * 10):
        async with trio.open_nursery() as nursery:
            app = await start_app(nursery, Config(port=0, http_port=0, shutdown_grace_s=GRACE_S))
            assert app.tcp is not None
            client_end, server_end = trio.testing.memory_stream_pair()
            app.tcp.adopt(server_end)
            client = FrameClient(client_end)
            await client.send({"cmd": "PULL", "queue": "q", "timeout": 60_000, "reqId": "p"})
            await trio.testing.wait_all_tasks_blocked()  # parked
            started = trio.current_time()
            app.shutdown()
            reply = await client.receive()
            assert (reply["reqId"], reply["ok"], reply["job"]) == ("p", True, None)
            assert trio.current_time() - started < 1  # answered by the shutdown, not its timeout


async def test_rest_fail_retries_then_fails_for_good(
    app: App, nursery: trio.Nursery, autojump_clock
) -> None:
    status, _, body = await http(
        app, nursery, "POST", "/queues/rq/jobs", {"name": "n", "data": 1, "maxAttempts": 2}
    )
    job_id = json.loads(body)["id"]
    for _ in range(2):  # the long poll waits out the retry's backoff
        status, _, body = await http(app, nursery, "GET", "/queues/rq/jobs?timeout=60000")
        assert json.loads(body)["job"]["id"] == job_id
        status, _, body = await http(
            app, nursery, "POST", f"/jobs/{job_id}/fail", {"error": "boom"}
        )
        assert (status, json.loads(body)["ok"]) == (200, True)
    status, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}")
    job = json.loads(body)["job"]
    assert (job["state"], job["attempts"], job["failedReason"]) == ("failed", 2, "boom")


async def next_event(socket: trio_websocket.WebSocketConnection) -> tuple[str, str]:
    with trio.fail_after(60):  # under MockClock a missing event fails at once
        message = json.loads(await socket.get_message())
    return message["event"], message["data"]["jobId"]


async def test_failed_stalled_and_removed_events_reach_subscribers(
    app: App, nursery: trio.Nursery, autojump_clock
) -> None:
    watcher = await connect(app, nursery)
    events = ["job:failed", "job:stalled", "job:removed"]
    assert (await call(watcher, cmd="Subscribe", events=events, reqId="s"))["ok"] is True
    worker = await memory_connector(app, nursery)()
    doomed = (await worker.call("PUSH", queue="q", data=1, maxAttempts=1))["id"]
    await worker.call("PULL", queue="q")
    await worker.call("FAIL", id=doomed, error="boom")
    assert await next_event(watcher) == ("job:failed", doomed)
    stalling = (await worker.call("PUSH", queue="q", data=2))["id"]
    await worker.call("PULL", queue="q", owner="w", lockTtl=1000)
    await trio.sleep(1.5)  # the lease runs out
    assert await next_event(watcher) == ("job:stalled", stalling)
    assert (await worker.call("Cancel", id=stalling))["ok"] is True
    assert await next_event(watcher) == ("job:removed", stalling)
    await watcher.aclose()


async def test_unsubscribe_stops_the_events(app: App, nursery: trio.Nursery) -> None:
    watcher = await connect(app, nursery)
    await call(watcher, cmd="Subscribe", events=["job:pushed"], reqId="s")
    worker = await memory_connector(app, nursery)()
    first = (await worker.call("PUSH", queue="q", data=1))["id"]
    assert await next_event(watcher) == ("job:pushed", first)
    assert (await call(watcher, cmd="Unsubscribe", reqId="u"))["ok"] is True
    await worker.call("PUSH", queue="q", data=2)
    await trio.testing.wait_all_tasks_blocked()  # an event, were one due, is written by now
    await watcher.send_message(json.dumps({"cmd": "Ping", "reqId": "last"}))
    assert json.loads(await watcher.get_message())["reqId"] == "last"
    await watcher.aclose()
