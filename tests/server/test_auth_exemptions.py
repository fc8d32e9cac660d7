"""With auth tokens set, probes and scrapes stay open (an orchestrator and Prometheus carry no
token), while everything that reads or changes jobs, over HTTP or WebSocket, needs a token."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
import trio_websocket

from broker.node.app import App
from broker.node.config import Config
from tests.support.app import start_app
from tests.support.http import http
from tests.support.websocket import call

TOKEN = "s3cret"
OPEN_PROBES = ["/health", "/healthz", "/live", "/ready", "/metrics", "/prometheus"]


@pytest.fixture
async def guarded(nursery: trio.Nursery) -> App:
    """A broker that wants a bearer token."""
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    return await start_app(nursery, config)


@pytest.mark.parametrize("path", OPEN_PROBES)
async def test_probes_and_scrapes_need_no_token(
    guarded: App, nursery: trio.Nursery, path: str
) -> None:
    assert (await http(guarded, nursery, "GET", path))[0] == 200
    guarded.shutdown()


async def test_job_routes_need_a_token(guarded: App, nursery: trio.Nursery) -> None:
    job = {"name": "n", "data": 1}
    assert (await http(guarded, nursery, "POST", "/queues/q/jobs", job))[0] == 401
    assert (await http(guarded, nursery, "GET", "/queues/q/jobs"))[0] == 401
    status, _, body = await http(guarded, nursery, "POST", "/queues/q/jobs", job, token=TOKEN)
    assert status == 200
    job_id = json.loads(body)["id"]
    assert (await http(guarded, nursery, "GET", f"/jobs/{job_id}"))[0] == 401
    assert (await http(guarded, nursery, "POST", f"/jobs/{job_id}/fail", {"error": "x"}))[0] == 401
    guarded.shutdown()


def leaves(group: BaseExceptionGroup) -> list:
    """The exceptions inside a (nested) exception group."""
    found: list = []
    for exc in group.exceptions:
        found += leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


async def open_websocket(
    app: App, nursery: trio.Nursery, token: str | None
) -> trio_websocket.WebSocketConnection:
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    return await trio_websocket.wrap_client_stream(
        nursery, client, "test", "/ws", extra_headers=headers
    )


@pytest.mark.parametrize("token", [None, "wrong"], ids=["no-token", "wrong-token"])
async def test_a_websocket_without_the_token_is_refused(
    guarded: App, nursery: trio.Nursery, token: str | None
) -> None:
    statuses: list[int] = []
    try:
        async with trio.open_nursery() as own:  # the client's reader task raises here too
            socket = await open_websocket(guarded, own, token)
            await socket.aclose()  # served: the token check is missing
            own.cancel_scope.cancel()
    except* trio_websocket.ConnectionRejected as refused:
        statuses = [exc.status_code for exc in leaves(refused)]
    assert statuses and set(statuses) == {401}
    assert guarded.actor is not None and guarded.actor.engine.state.queues == {}
    guarded.shutdown()


async def test_a_websocket_with_the_token_is_served(guarded: App, nursery: trio.Nursery) -> None:
    socket = await open_websocket(guarded, nursery, TOKEN)
    reply = await call(socket, cmd="PUSH", queue="wq", data=1, reqId="1")
    assert reply["ok"] is True
    await socket.aclose()
    guarded.shutdown()
