"""The HTTP port: health, readiness, Prometheus metrics, stats and the REST surface."""

from __future__ import annotations

import json

import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from broker.node.app import App
from broker.node.config import Config
from tests.support.app import start_app
from tests.support.http import http


async def test_liveness_readiness_and_health(app: App, nursery: trio.Nursery) -> None:
    assert await http(app, nursery, "GET", "/healthz") == (200, "text/plain", b"OK")
    status, kind, body = await http(app, nursery, "GET", "/ready")
    assert (status, kind, json.loads(body)) == (
        200,
        "application/json",
        {"ok": True, "ready": True},
    )
    status, _, body = await http(app, nursery, "GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "healthy"
    assert (await http(app, nursery, "GET", "/nope"))[0] == 404


async def test_metrics_parse_as_prometheus_text(app: App, nursery: trio.Nursery) -> None:
    await http(app, nursery, "POST", "/queues/mq/jobs", {"name": "n", "data": {"x": 1}})
    status, kind, body = await http(app, nursery, "GET", "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    families = {family.name: family for family in text_string_to_metric_families(body.decode())}
    depth = {
        (sample.labels["queue"], sample.labels["state"]): sample.value
        for sample in families["trioq_jobs"].samples
    }
    assert depth[("mq", "waiting")] == 1
    assert families["trioq_jobs_pushed"].samples[0].value == 1
    assert "trioq_push_to_start_seconds" in families and "trioq_engine_pass_commands" in families


async def test_rest_push_pull_ack_get(app: App, nursery: trio.Nursery) -> None:
    status, _, body = await http(
        app, nursery, "POST", "/queues/rq/jobs", {"name": "n", "data": {"v": 1}}
    )
    job_id = json.loads(body)["id"]
    assert status == 200
    status, _, body = await http(app, nursery, "GET", "/queues/rq/jobs?timeout=100")
    assert json.loads(body)["job"]["data"] == {"v": 1}
    status, _, body = await http(app, nursery, "POST", f"/jobs/{job_id}/ack", {"result": "done"})
    assert (status, json.loads(body)["ok"]) == (200, True)
    status, _, body = await http(app, nursery, "GET", f"/jobs/{job_id}")
    job = json.loads(body)["job"]
    assert (job["state"], job["returnvalue"]) == ("completed", "done")
    status, _, body = await http(app, nursery, "GET", "/stats")
    assert json.loads(body)["stats"]["completed"] == 1


async def test_rest_validates_like_tcp(app: App, nursery: trio.Nursery) -> None:
    status, _, body = await http(
        app, nursery, "POST", "/queues/rq/jobs", {"data": 1, "timeout": -1}
    )
    assert (status, json.loads(body)) == (400, {"ok": False, "error": "timeout must be at least 0"})
    status, _, body = await http(app, nursery, "POST", "/jobs/ghost/fail", {"error": "x"})
    assert status == 400
    assert json.loads(body)["error"] == "Job not found or not in processing state: ghost"


async def test_http_needs_a_bearer_token_when_tokens_are_set(nursery: trio.Nursery) -> None:
    config = Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({"s3cret"}))
    app = await start_app(nursery, config)
    assert (await http(app, nursery, "GET", "/stats"))[0] == 401
    assert (await http(app, nursery, "GET", "/stats", token="wrong"))[0] == 401
    assert (await http(app, nursery, "GET", "/stats", token="s3cret"))[0] == 200
    assert (await http(app, nursery, "GET", "/healthz"))[0] == 200  # liveness stays open
    app.shutdown()


async def test_metrics_time_each_job_from_push_to_start_and_to_completion(
    app: App, nursery: trio.Nursery
) -> None:
    _, _, body = await http(app, nursery, "POST", "/queues/tq/jobs", {"name": "n", "data": 1})
    await http(app, nursery, "GET", "/queues/tq/jobs?timeout=100")
    await http(app, nursery, "POST", f"/jobs/{json.loads(body)['id']}/ack", {})
    _, _, body = await http(app, nursery, "GET", "/metrics")
    families = {family.name: family for family in text_string_to_metric_families(body.decode())}
    for name in ("trioq_push_to_start_seconds", "trioq_processing_seconds"):
        samples = {sample.name: sample.value for sample in families[name].samples}
        assert samples[f"{name}_count"] == 1, name
        assert 0 <= samples[f"{name}_sum"] < 60, name
