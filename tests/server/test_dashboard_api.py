"""The HTTP API the dashboard uses, tested without a browser: its static files, the
`/dashboard...` JSON, `/heapstats`, `/gc`, and server-sent events on `/events`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from broker.node.app import App
from broker.node.config import Config
from broker.server import sse
from broker.server.http import store_kind
from store import MemoryStore
from tests.support.app import memory_connector, start_app
from tests.support.http import SseClient, http

TOKEN = "s3cret"


async def push(app: App, nursery: trio.Nursery, queue: str, data: Any = 1) -> str:
    """Push one job over HTTP; its id."""
    status, _, body = await http(app, nursery, "POST", f"/queues/{queue}/jobs", {"data": data})
    assert status == 200, body
    return str(json.loads(body)["id"])


async def get_json(app: App, nursery: trio.Nursery, path: str, method: str = "GET") -> Any:
    """(status, decoded JSON body) of one request."""
    status, _, body = await http(app, nursery, method, path)
    return status, json.loads(body)


# -- the page ----------------------------------------------------------------------------------


async def test_the_page_and_its_files_are_served_from_the_package(
    app: App, nursery: trio.Nursery
) -> None:
    status, content_type, body = await http(app, nursery, "GET", "/")
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    assert b'<script type="module" src="/ui/app.js">' in body
    status, content_type, body = await http(app, nursery, "GET", "/ui/app.js")
    assert (status, content_type) == (200, "text/javascript; charset=utf-8")
    assert b"innerHTML" not in body.replace(b"innerHTML is never used", b"")
    assert (await http(app, nursery, "GET", "/ui/app.css"))[1] == "text/css; charset=utf-8"
    assert (await http(app, nursery, "GET", "/ui/"))[0] == 200


@pytest.mark.parametrize(
    "path", ["/ui/nope.js", "/ui/../pyproject.toml", "/ui/__init__.py", "/app.js"]
)
async def test_only_the_dashboards_own_files_are_served(
    app: App, nursery: trio.Nursery, path: str
) -> None:
    assert (await http(app, nursery, "GET", path))[0] == 404


async def test_with_a_token_the_page_is_open_but_its_data_is_not(nursery: trio.Nursery) -> None:
    app = await start_app(
        nursery, Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    )
    assert (await http(app, nursery, "GET", "/"))[0] == 200
    for path in ("/dashboard", "/dashboard/queues", "/dashboard/queues/q", "/heapstats"):
        status, _, body = await http(app, nursery, "GET", path)
        assert (status, json.loads(body)) == (401, {"ok": False, "error": "Unauthorized"})
        assert (await http(app, nursery, "GET", path, token=TOKEN))[0] == 200
    assert (await http(app, nursery, "POST", "/gc"))[0] == 401
    app.shutdown()


# -- dashboard JSON ------------------------------------------------------------------------------


async def test_dashboard_overview_has_counts_and_broker_health(
    app: App, nursery: trio.Nursery
) -> None:
    await push(app, nursery, "mail")
    status, reply = await get_json(app, nursery, "/dashboard")
    assert status == 200
    data = reply["data"]
    assert (data["stats"]["waiting"], data["stats"]["totalPushed"]) == (1, 1)
    broker = data["broker"]
    assert broker["store"] == "memory"
    assert broker["role"] == "active"  # a broker of its own is the active one, as in HA mode
    assert broker["connections"] == {"tcp": 0, "websocket": 0, "sse": 0}
    assert isinstance(broker["version"], str) and isinstance(broker["uptime"], int)


async def test_dashboard_uptimes_are_both_whole_seconds(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    await trio.sleep(2.7504)
    data = (await get_json(app, nursery, "/dashboard"))[1]["data"]
    assert (data["stats"]["uptime"], data["broker"]["uptime"]) == (2, 2)
    assert isinstance(data["stats"]["uptime"], int)


@pytest.mark.parametrize(
    ("store", "kind"),
    [(None, "memory"), (MemoryStore(), "memory"), (object(), "sqlite")],
)
def test_the_store_is_named_by_its_kind(store: object, kind: str) -> None:
    assert store_kind(store) == kind


async def test_dashboard_queues_pages_with_limit_and_offset(
    app: App, nursery: trio.Nursery
) -> None:
    for name in ("a", "b", "c"):
        await push(app, nursery, name)
    await http(app, nursery, "PUT", "/queues/b/rate-limit", {"limit": 5})
    status, reply = await get_json(app, nursery, "/dashboard/queues?limit=2")
    assert status == 200
    assert [q["name"] for q in reply["data"]["queues"]] == ["a", "b"]
    assert (reply["data"]["total"], reply["data"]["limit"], reply["data"]["offset"]) == (3, 2, 0)
    assert reply["data"]["queues"][1]["limits"]["rateLimit"] == 5
    _, reply = await get_json(app, nursery, "/dashboard/queues?limit=2&offset=2")
    assert [q["name"] for q in reply["data"]["queues"]] == ["c"]
    _, reply = await get_json(app, nursery, "/dashboard/queues")
    assert reply["data"]["limit"] == 100


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=0", "limit must be a whole number from 1 to 500"),
        ("limit=501", "limit must be a whole number from 1 to 500"),
        ("limit=ten", "limit must be a whole number from 1 to 500"),
        ("offset=-1", "offset must be a whole number of at least 0"),
        # Digits str.isdigit accepts but int refuses, and more digits than int reads: a 500 before.
        ("limit=%C2%B9", "limit must be a whole number from 1 to 500"),
        ("offset=%C2%B2", "offset must be a whole number of at least 0"),
        ("offset=" + "9" * 5000, "offset must be a whole number of at least 0"),
    ],
)
async def test_dashboard_queues_refuses_bad_paging(
    app: App, nursery: trio.Nursery, query: str, message: str
) -> None:
    status, reply = await get_json(app, nursery, f"/dashboard/queues?{query}")
    assert (status, reply) == (400, {"ok": False, "error": message})


async def test_dashboard_queue_includes_jobs_by_state_on_request(
    app: App, nursery: trio.Nursery
) -> None:
    job_id = await push(app, nursery, "mail")
    status, reply = await get_json(app, nursery, "/dashboard/queues/mail")
    assert status == 200
    assert reply["data"]["counts"]["waiting"] == 1
    assert reply["data"]["limits"]["concurrencyLimit"] is None
    assert "jobs" not in reply["data"]
    _, reply = await get_json(app, nursery, "/dashboard/queues/mail?includeJobs=true")
    assert [job["id"] for job in reply["data"]["jobs"]["waiting"]] == [job_id]
    assert reply["data"]["jobs"]["failed"] == []


async def test_dashboard_queue_refuses_a_bad_queue_name(app: App, nursery: trio.Nursery) -> None:
    status, reply = await get_json(app, nursery, "/dashboard/queues/bad%20name")
    assert (status, reply["ok"]) == (400, False)
    assert reply["error"] == "Queue name contains invalid characters"


# -- heapstats and gc ------------------------------------------------------------------------


async def test_heapstats_reports_memory_and_collector_counters(
    app: App, nursery: trio.Nursery
) -> None:
    status, reply = await get_json(app, nursery, "/heapstats")
    assert status == 200
    data = reply["data"]
    assert data["rssBytes"] > 0 and data["allocatedBlocks"] > 0
    assert len(data["gc"]["generations"]) == 3
    assert len(data["gc"]["pending"]) == 3


async def test_gc_runs_at_most_once_per_ten_seconds(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    status, reply = await get_json(app, nursery, "/gc", "POST")
    assert status == 200
    assert {"collected", "durationMs", "rssBeforeBytes", "rssAfterBytes"} <= set(reply["data"])
    status, reply = await get_json(app, nursery, "/gc", "POST")
    assert (status, reply["error"]) == (429, "A collection ran less than 10 s ago")
    await trio.sleep(10)
    assert (await get_json(app, nursery, "/gc", "POST"))[0] == 200


# -- server-sent events ------------------------------------------------------------------------


def auth(token: str = TOKEN) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def test_sse_greets_then_streams_job_events(app: App, nursery: trio.Nursery) -> None:
    client = await SseClient.open(app, nursery)
    assert client.status == 200
    assert client.headers[b"content-type"] == b"text/event-stream"
    greeting = (await client.message()).split("\n")
    assert greeting[0] == f"retry: {sse.RETRY_MS}"
    hello = json.loads(greeting[1].removeprefix("data: "))
    assert hello["connected"] is True and isinstance(hello["clientId"], str)
    job_id = await push(app, nursery, "mail")
    event_id, name, data = await client.job_event()
    assert (event_id, name) == ("1", "job:pushed")
    timestamp = data.pop("timestamp")  # the reference's form: the event's data, flat
    assert data == {"queue": "mail", "jobId": job_id}
    assert isinstance(timestamp, float | int) and timestamp > 0
    assert app.http is not None and app.http.sse_clients == 1


async def test_sse_on_one_queue_gets_only_that_queues_events(
    app: App, nursery: trio.Nursery
) -> None:
    client = await SseClient.open(app, nursery, "/events/queues/mail")
    await client.message()
    await push(app, nursery, "other")
    job_id = await push(app, nursery, "mail")
    event_id, _, data = await client.job_event()
    assert int(event_id) >= 2 and data["jobId"] == job_id  # event 1 was the other queue's


async def test_sse_replays_from_last_event_id(app: App, nursery: trio.Nursery) -> None:
    first = await SseClient.open(app, nursery)
    await first.message()
    ids = [await push(app, nursery, "mail") for _ in range(3)]
    for _ in ids:
        await first.job_event()
    again = await SseClient.open(app, nursery, headers=[("last-event-id", "1")])
    await again.message()
    replayed = [(await again.job_event())[2]["jobId"] for _ in range(2)]
    assert replayed == ids[1:]


async def test_sse_sends_the_periodic_snapshots_while_nothing_happens(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client = await SseClient.open(app, nursery)
    await client.message()
    started = trio.current_time()
    names = []
    for _ in range(3):
        lines = dict(line.split(": ", 1) for line in (await client.message()).split("\n"))
        names.append((lines["event"], trio.current_time() - started))
    assert names[0] == ("stats:snapshot", pytest.approx(5))
    assert sorted(names[1:]) == [  # both fall due at 10 s, in either order
        ("health:status", pytest.approx(10)), ("stats:snapshot", pytest.approx(10)),
    ]  # fmt: skip


async def test_an_sse_stream_without_events_sends_heartbeats(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ring, sent = sse.EventRing(), []

    async def send(data: bytes) -> None:
        sent.append((data, trio.current_time()))

    with trio.move_on_after(sse.HEARTBEAT_S * 2.5):
        await sse.stream_events(ring, ring.last_id, None, send)
    assert sent == [(sse.HEARTBEAT, sse.HEARTBEAT_S), (sse.HEARTBEAT, 2 * sse.HEARTBEAT_S)]


async def test_sse_needs_the_token_and_refuses_past_the_client_limit(nursery: trio.Nursery) -> None:
    app = await start_app(
        nursery, Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    )
    refused = await SseClient.open(app, nursery)
    assert refused.status == 401
    assert app.http is not None
    app.http.sse_clients = sse.MAX_CLIENTS
    busy = await SseClient.open(app, nursery, headers=auth())
    assert busy.status == 503
    app.http.sse_clients = 0
    assert (await SseClient.open(app, nursery, headers=auth())).status == 200
    app.shutdown()


async def test_a_client_that_stops_reading_is_dropped(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client = await SseClient.open(app, nursery, stream_pair=trio.testing.lockstep_stream_pair)
    await client.message()
    await push(app, nursery, "mail")  # its event cannot be written: the client reads nothing
    await client.served.wait()
    assert trio.current_time() >= sse.SEND_TIMEOUT_S
    assert app.http is not None and app.http.sse_clients == 0


async def test_a_client_that_falls_a_ring_behind_is_dropped() -> None:
    ring = sse.EventRing(size=2)
    for n in range(3):
        ring.append({"event": "job:pushed", "data": {"queue": "q", "jobId": str(n)}})
    assert ring.since(0) is None  # event 1 was overwritten
    assert [event_id for event_id, _ in ring.since(1) or []] == [2, 3]
    assert ring.start_cursor("0") == 1  # a too-old Last-Event-ID replays what is left
    assert ring.start_cursor("junk") == 3
    assert ring.start_cursor("²") == 3  # isdigit, but not a number int reads


async def test_a_client_that_leaves_is_forgotten(app: App, nursery: trio.Nursery) -> None:
    client = await SseClient.open(app, nursery)
    await client.message()
    assert app.http is not None and app.http.sse_clients == 1
    await client.stream.aclose()
    await client.served.wait()
    assert app.http.sse_clients == 0
    assert not app.actor.bus.listening()


async def test_a_batch_nobody_listened_to_leaves_no_event_for_a_later_client(
    app: App, nursery: trio.Nursery
) -> None:
    worker = await memory_connector(app, nursery)()
    ids = [await push(app, nursery, "mail") for _ in range(2)]
    assert len((await worker.call("PULLB", queue="mail", count=2))["jobs"]) == 2
    assert (await worker.call("ACKB", ids=ids))["ok"] is True
    client = await SseClient.open(app, nursery)
    await client.message()
    job_id = await push(app, nursery, "mail")
    event_id, name, data = await client.job_event()
    assert (event_id, name, data["jobId"]) == ("1", "job:pushed", job_id)
