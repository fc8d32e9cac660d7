"""The REST routes: the reference's route table, statuses, reason phrases, /health, /stats."""

from __future__ import annotations

import json
import re

import trio
import trio.testing

from broker.node.app import App
from broker.server.routes import ROUTES, match
from tests.support.http import exchange, get, http

JSON = "application/json"


async def test_queue_control_routes_run_their_commands(app: App, nursery: trio.Nursery) -> None:
    for i in range(3):
        await http(app, nursery, "POST", "/queues/oq/jobs", {"data": i})
    status, _, body = await http(app, nursery, "GET", "/queues/oq/count")
    assert (status, json.loads(body)["count"]) == (200, 3)
    assert (await http(app, nursery, "POST", "/queues/oq/pause"))[0] == 200
    status, _, body = await http(app, nursery, "GET", "/queues/oq/paused")
    assert json.loads(body)["paused"] is True
    status, _, body = await http(app, nursery, "POST", "/queues/oq/obliterate")
    assert (status, json.loads(body)["ok"]) == (200, True)
    status, _, body = await http(app, nursery, "GET", "/queues/oq/count")
    assert json.loads(body)["count"] == 0


async def test_job_routes_take_fields_from_path_and_body(app: App, nursery: trio.Nursery) -> None:
    _, _, body = await http(app, nursery, "POST", "/queues/jq/jobs", {"data": 1, "attempts": 5})
    job_id = json.loads(body)["id"]
    _, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}")
    assert json.loads(body)["job"]["maxAttempts"] == 5
    status, _, body = await http(app, nursery, "PUT", f"/jobs/{job_id}/priority", {"priority": 7})
    assert status == 200
    _, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}/state")
    assert json.loads(body)["state"] == "prioritized"
    _, _, body = await http(
        app, nursery, "POST", "/queues/jq/jobs/bulk", {"jobs": [{"data": 2}, {"data": 3}]}
    )
    assert len(json.loads(body)["ids"]) == 2
    _, _, body = await http(app, nursery, "GET", "/queues/jq/jobs/list?state=waiting,prioritized")
    assert len(json.loads(body)["jobs"]) == 3
    status, _, body = await http(app, nursery, "DELETE", f"/jobs/{job_id}")
    assert (status, json.loads(body)["ok"]) == (200, True)


async def test_an_unknown_job_is_404_and_statuses_carry_reason_phrases(
    app: App, nursery: trio.Nursery
) -> None:
    status, _, body = await http(app, nursery, "GET", "/jobs/unknown")
    assert (status, json.loads(body)["ok"]) == (404, False)
    raw = await exchange(app, nursery, get("/jobs/unknown"))
    assert raw.startswith(b"HTTP/1.1 404 Not Found\r\n")
    raw = await exchange(app, nursery, get("/health"))
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


async def test_health_uptime_is_whole_seconds(
    app: App, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    await trio.sleep(2.5)
    _, _, body = await http(app, nursery, "GET", "/health")
    assert json.loads(body)["uptime"] == 2


async def test_stats_separates_stored_counts_from_since_start_totals(
    app: App, nursery: trio.Nursery
) -> None:
    _, _, body = await http(app, nursery, "POST", "/queues/sq/jobs", {"data": 1})
    job_id = json.loads(body)["id"]
    await http(app, nursery, "GET", "/queues/sq/jobs")
    await http(app, nursery, "POST", f"/jobs/{job_id}/ack", {})
    await http(app, nursery, "POST", "/queues/sq/obliterate")
    _, _, body = await http(app, nursery, "GET", "/stats")
    stats = json.loads(body)["stats"]
    assert (stats["completed"], stats["totalCompleted"], stats["totalPushed"]) == (0, 1, 1)
    assert "failed" not in stats  # only `totalFailed`, a since-start counter


def test_every_reference_route_is_in_the_table() -> None:
    reference = [
        ("POST", "/queues/q/jobs"), ("GET", "/queues/q/jobs"), ("POST", "/queues/q/jobs/bulk"),
        ("POST", "/queues/q/jobs/pull-batch"), ("GET", "/queues/q/jobs/list"),
        ("GET", "/jobs/i"), ("DELETE", "/jobs/i"), ("GET", "/jobs/custom/c"),
        ("POST", "/jobs/i/ack"), ("POST", "/jobs/i/fail"), ("POST", "/jobs/i/promote"),
        ("POST", "/jobs/i/discard"), ("POST", "/jobs/i/move-to-delayed"),
        ("POST", "/jobs/i/heartbeat"), ("POST", "/jobs/i/wait"), ("POST", "/jobs/i/extend-lock"),
        ("POST", "/jobs/i/move-to-wait"), ("PUT", "/jobs/i/data"), ("PUT", "/jobs/i/priority"),
        ("PUT", "/jobs/i/delay"), ("GET", "/jobs/i/state"), ("GET", "/jobs/i/result"),
        ("GET", "/jobs/i/progress"), ("GET", "/jobs/i/children"), ("GET", "/jobs/i/logs"),
        ("POST", "/jobs/i/progress"), ("POST", "/jobs/i/logs"), ("DELETE", "/jobs/i/logs"),
        ("POST", "/jobs/ack-batch"), ("POST", "/jobs/extend-locks"),
        ("POST", "/jobs/heartbeat-batch"), ("GET", "/queues"), ("GET", "/queues/q/counts"),
        ("GET", "/queues/q/count"), ("GET", "/queues/q/priority-counts"),
        ("GET", "/queues/q/paused"), ("POST", "/queues/q/pause"), ("POST", "/queues/q/resume"),
        ("POST", "/queues/q/drain"), ("POST", "/queues/q/obliterate"), ("POST", "/queues/q/clean"),
        ("POST", "/queues/q/promote-jobs"), ("POST", "/queues/q/retry-completed"),
        ("GET", "/queues/q/dlq"), ("POST", "/queues/q/dlq/retry"), ("POST", "/queues/q/dlq/purge"),
        ("PUT", "/queues/q/rate-limit"), ("DELETE", "/queues/q/rate-limit"),
        ("PUT", "/queues/q/concurrency"), ("DELETE", "/queues/q/concurrency"),
        ("GET", "/queues/q/stall-config"), ("PUT", "/queues/q/stall-config"),
        ("GET", "/queues/q/dlq-config"), ("PUT", "/queues/q/dlq-config"),
        ("GET", "/crons"), ("POST", "/crons"), ("GET", "/crons/n"), ("DELETE", "/crons/n"),
        ("GET", "/webhooks"), ("POST", "/webhooks"), ("DELETE", "/webhooks/w"),
        ("PUT", "/webhooks/w/enabled"), ("GET", "/workers"), ("POST", "/workers"),
        ("DELETE", "/workers/w"), ("POST", "/workers/w/heartbeat"), ("GET", "/ping"),
        ("GET", "/storage"),
    ]  # fmt: skip
    missing = [(method, path) for method, path in reference if match(method, path) is None]
    assert missing == []
    assert len({(r.method, r.pattern.pattern) for r in ROUTES}) == len(ROUTES)


async def test_every_route_answers_json_and_the_broker_stays_up(
    app: App, nursery: trio.Nursery
) -> None:
    for route in ROUTES:
        path = re.sub(r"\(\?P<\w+>\[\^/\]\+\)", "p", route.pattern.pattern)
        status, kind, body = await http(app, nursery, route.method, path, {})
        assert (status, kind) in ((200, JSON), (400, JSON), (404, JSON)), (route, body)
        assert isinstance(json.loads(body)["ok"], bool)
    assert (await http(app, nursery, "GET", "/healthz"))[0] == 200


async def test_ping_is_answered_by_the_http_port(app: App, nursery: trio.Nursery) -> None:
    status, _, body = await http(app, nursery, "GET", "/ping")
    assert (status, json.loads(body)["data"]["pong"]) == (200, True)


async def test_queue_summary_and_queue_workers(app: App, nursery: trio.Nursery) -> None:
    await http(app, nursery, "POST", "/queues/a/jobs", {"data": 1})
    await http(app, nursery, "POST", "/queues/b/pause")
    worker = {"name": "w", "queues": ["a"], "workerId": "w1"}
    assert (await http(app, nursery, "POST", "/workers", worker))[0] == 200
    _, _, body = await http(app, nursery, "GET", "/queues/summary")
    summary = {entry["name"]: entry for entry in json.loads(body)}
    assert (summary["a"]["counts"]["waiting"], summary["b"]["paused"]) == (1, True)
    _, _, body = await http(app, nursery, "GET", "/queues/a/workers")
    assert [w["id"] for w in json.loads(body)["workers"]] == ["w1"]
    _, _, body = await http(app, nursery, "GET", "/queues/b/workers")
    assert json.loads(body)["workers"] == []


async def test_dlq_stats_counts_failed_jobs(app: App, nursery: trio.Nursery) -> None:
    _, _, body = await http(app, nursery, "POST", "/queues/dq/jobs", {"data": 1, "attempts": 1})
    job_id = json.loads(body)["id"]
    await http(app, nursery, "GET", "/queues/dq/jobs")
    await http(app, nursery, "POST", f"/jobs/{job_id}/fail", {"error": "no"})
    status, _, body = await http(app, nursery, "GET", "/queues/dq/dlq/stats")
    assert (status, json.loads(body)["stats"]) == (200, {"total": 1, "byQueue": {"dq": 1}})
    assert (await http(app, nursery, "GET", "/queues/bad%20name/dlq/stats"))[0] == 400
