"""A failure in one HTTP connection ends that connection, never the broker: HEAD requests,
values JSON cannot hold, numbers and nesting JSON allows but MessagePack does not, stalled and
slow clients, and the shared budget for buffered request bodies."""

from __future__ import annotations

import contextlib
import json
import logging

import h11
import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from broker.server import http as http_module
from store import StoreError
from tests.support.app import EPOCH_MS, Connect, start_app
from tests.support.http import exchange, get, http
from tests.support.payloads import ODD_AS_JSON, ODD_DATA, frame_with_raw
from tests.support.stores import FailingStore


def open_connection(app: App, nursery: trio.Nursery) -> trio.testing.MemoryStreamPair:
    client, server = trio.testing.memory_stream_pair()
    assert app.http is not None
    nursery.start_soon(app.http.serve_stream, server)
    return client


async def read_until_closed(stream: trio.abc.Stream) -> bytes:
    """Everything the server sends until it closes (failing if it never does)."""
    received = b""
    with trio.fail_after(http_module.IDLE_TIMEOUT_S + http_module.REQUEST_TIMEOUT_S + 1):
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


@pytest.mark.parametrize("path", ["/health", "/nope", "/stats"])
async def test_head_answers_headers_without_a_body(nursery: trio.Nursery, path: str) -> None:
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({"t"}))
    app = await start_app(nursery, config)
    head = f"HEAD {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer t\r\n\r\n".encode()
    raw = await exchange(app, nursery, head + get("/healthz"))
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.split(b"\r\n")[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found")
    assert b"content-length: " in first and int(first.split(b"content-length: ")[1][:2]) > 2
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(b"\r\n\r\nOK")
    app.shutdown()


async def test_data_json_cannot_hold_is_shown_not_fatal(
    app: App, nursery: trio.Nursery, connect: Connect
) -> None:
    client = await connect()
    await client.send_raw(
        frame_with_raw({"cmd": "PUSH", "queue": "xq", "reqId": "1"}, data=ODD_DATA)
    )
    job_id = (await client.receive_for("1"))["id"]
    _, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}")
    assert json.loads(body)["job"]["data"] == ODD_AS_JSON
    _, _, body = await http(app, nursery, "GET", "/queues/xq/jobs/list")
    assert json.loads(body)["jobs"][0]["data"] == ODD_AS_JSON
    pulled = await client.call("PULL", queue="xq")
    await client.send_raw(
        frame_with_raw({"cmd": "ACK", "id": pulled["job"]["id"], "reqId": "2"}, result=ODD_DATA)
    )
    assert (await client.receive_for("2"))["ok"] is True
    _, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}")
    assert json.loads(body)["job"]["returnvalue"] == ODD_AS_JSON


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"data": 1000000000000000000000000000000}', "Numbers must fit in 64 bits"),
        (
            b'{"data": 1, "priority": 1000000000000000000000000000000}',
            "Numbers must fit in 64 bits",
        ),
        (b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "Invalid JSON body"),
        (b'{"data": 1', "Invalid JSON body"),
        (b"[1]", "Body must be a JSON object"),
    ],
    ids=["big-data", "big-priority", "deep", "truncated", "not-an-object"],
)
async def test_json_msgpack_cannot_carry_is_a_clear_400(
    app: App, nursery: trio.Nursery, body: bytes, error: str
) -> None:
    head = f"POST /queues/q/jobs HTTP/1.1\r\nhost: t\r\ncontent-length: {len(body)}\r\n"
    raw = await exchange(app, nursery, head.encode() + b"connection: close\r\n\r\n" + body)
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert json.loads(raw.partition(b"\r\n\r\n")[2]) == {"ok": False, "error": error}
    assert (await http(app, nursery, "GET", "/queues/q/count"))[2] == b'{"ok":true,"count":0}'


async def test_an_unexpected_error_answers_500_once_logged(
    app: App,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> bytes:
        raise RuntimeError("boom")

    assert app.http is not None
    monkeypatch.setattr(app.http.metrics, "render", broken)
    with caplog.at_level(logging.ERROR):
        status, _, body = await http(app, nursery, "GET", "/metrics")
    assert (status, json.loads(body)) == (500, {"ok": False, "error": "Internal server error"})
    assert [record.exc_info is not None for record in caplog.records] == [True]
    assert (await http(app, nursery, "GET", "/healthz"))[0] == 200


async def test_an_error_outside_a_request_closes_only_that_connection(
    app: App,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(head: bytes) -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr(http_module, "is_websocket_upgrade", broken)
    with caplog.at_level(logging.ERROR):
        assert await exchange(app, nursery, get("/healthz")) == b""
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
    monkeypatch.undo()
    assert (await http(app, nursery, "GET", "/healthz"))[0] == 200


async def test_a_stalled_body_is_answered_408_and_closed(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client = open_connection(app, nursery)
    await client.send_all(
        b"POST /queues/q/jobs HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n{"
    )
    raw = await read_until_closed(client)
    assert raw.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert app.http is not None and app.http.budget.used == 0


async def test_a_slow_head_is_answered_408_and_closed(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client = open_connection(app, nursery)
    received = b""
    with trio.move_on_after(http_module.REQUEST_TIMEOUT_S * 3):
        for byte in b"GET /health HTTP/1.1\r\nhost: t\r\n":  # one byte a second
            await client.send_all(bytes([byte]))
            await trio.sleep(1)
        received = await read_until_closed(client)
    assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n")


async def test_an_idle_keep_alive_connection_is_closed(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client = open_connection(app, nursery)
    await client.send_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
    start = trio.current_time()
    raw = await read_until_closed(client)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and raw.endswith(b"OK")
    assert trio.current_time() - start == pytest.approx(http_module.IDLE_TIMEOUT_S)


async def test_buffered_bodies_share_one_budget(
    app: App, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert app.http is not None
    monkeypatch.setattr(app.http.budget, "limit", 1000)
    head = b"POST /queues/q/jobs HTTP/1.1\r\nhost: t\r\ncontent-length: 900\r\n\r\n"
    first = open_connection(app, nursery)
    await first.send_all(head + b'{"data": "' + b"x" * 600)
    await trio.testing.wait_all_tasks_blocked()
    second = open_connection(app, nursery)
    await second.send_all(head + b'{"data": "' + b"x" * 600)
    raw = await read_until_closed(second)
    assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    await first.send_all(b"x" * 288 + b'"}')
    assert (await first.receive_some(65536)).startswith(b"HTTP/1.1 200 OK\r\n")
    await trio.testing.wait_all_tasks_blocked()
    assert app.http.budget.used == 0
    await first.aclose()


async def test_a_body_declared_too_large_is_413_before_reading_it(
    app: App, nursery: trio.Nursery
) -> None:
    size = http_module.MAX_BODY + 1
    head = f"POST /queues/q/jobs HTTP/1.1\r\nhost: t\r\ncontent-length: {size}\r\n\r\n"
    raw = await exchange(app, nursery, head.encode())
    assert raw.startswith(b"HTTP/1.1 413 Content Too Large\r\n") or raw.startswith(
        b"HTTP/1.1 413 Request Entity Too Large\r\n"
    )


async def test_a_store_failure_met_by_an_http_request_stops_the_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # As on TCP (fail-stop): a commit that fails while an HTTP request runs its command is not
    # contained like a bug of that connection; the client is never told `ok`.
    store = FailingStore()
    answers: list[tuple[int, str, bytes]] = []
    with pytest.RaisesGroup(
        pytest.RaisesExc(StoreError, match="disk full"), flatten_subgroups=True
    ):
        async with trio.open_nursery() as nursery:
            app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
            await nursery.start(app.run)
            answers.append(await http(app, nursery, "POST", "/queues/q/jobs", {"data": 1}))
            store.broken = True
            # The broker stops (cancelling this), or its connection closes unanswered; under
            # MockClock a broker that carries on fails the test at once.
            with contextlib.suppress(h11.RemoteProtocolError), trio.fail_after(60):
                answers.append(await http(app, nursery, "POST", "/queues/q/jobs", {"data": 2}))
                await trio.sleep_forever()
    assert [status for status, _, _ in answers] == [200]
    assert len(store.rows) == 1  # only the job whose push was answered


async def test_connections_beyond_the_cap_are_refused_503(
    app: App, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each open connection may hold an unauthenticated request head; their number bounds that.
    monkeypatch.setattr(http_module, "MAX_CONNECTIONS", 2)
    silent = [open_connection(app, nursery) for _ in range(2)]  # they never send a byte
    await trio.testing.wait_all_tasks_blocked()
    refused = await read_until_closed(open_connection(app, nursery))
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    await silent[0].aclose()
    await trio.testing.wait_all_tasks_blocked()
    served = open_connection(app, nursery)
    await served.send_all(get("/healthz"))
    assert (await served.receive_some(65536)).startswith(b"HTTP/1.1 200 OK\r\n")

