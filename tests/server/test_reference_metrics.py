"""The reference's Prometheus names (`bunqueue_*`) beside trioq's own, on `GET /metrics` and the
`Prometheus` command: what a dashboard written for bunqueue reads."""

from __future__ import annotations

import os
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from broker.services.metrics_reference import MAX_QUEUE_SERIES
from store import open_sqlite
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.client import FrameClient
from tests.support.http import http


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(app: App, nursery: trio.Nursery) -> dict[Any, float]:
    status, _, body = await http(app, nursery, "GET", "/metrics")
    assert status == 200
    return samples(body.decode())


async def test_job_counts_totals_and_uptime_carry_the_reference_names(
    app: App, nursery: trio.Nursery, client: FrameClient, autojump_clock: object
) -> None:
    await client.call("PUSH", queue="mail", data={}, name="plain")
    await client.call("PUSH", queue="mail", data={}, priority=5)
    await client.call("PUSH", queue="mail", data={}, delay=60_000)
    for _ in range(3):
        await client.call("PUSH", queue="jobs", data={})
    pulled = [(await client.call("PULL", queue="jobs"))["job"]["id"] for _ in range(3)]
    await client.call("ACK", id=pulled[0])
    await client.call("FAIL", id=pulled[1], error="boom", unrecoverable=True)
    await trio.sleep(7)
    found = await scrape(app, nursery)
    expected = {
        "bunqueue_jobs_waiting": 1,
        "bunqueue_jobs_prioritized": 1,
        "bunqueue_jobs_delayed": 1,
        "bunqueue_jobs_active": 1,
        "bunqueue_jobs_dlq": 1,
        "bunqueue_jobs_completed": 1,
        "bunqueue_jobs_pushed_total": 6,
        "bunqueue_jobs_pulled_total": 3,
        "bunqueue_jobs_completed_total": 1,
        "bunqueue_jobs_failed_total": 1,
        "bunqueue_uptime_seconds": 7,
        "bunqueue_storage_degraded": 0,
        "bunqueue_storage_disk_full": 0,
    }
    assert {name: found[(name, ())] for name in expected} == expected
    per_queue = {
        (name, labels[0][1]): value
        for (name, labels), value in found.items()
        if name.startswith("bunqueue_queue_jobs_")
    }
    assert per_queue == {
        ("bunqueue_queue_jobs_waiting", "mail"): 1,
        ("bunqueue_queue_jobs_prioritized", "mail"): 1,
        ("bunqueue_queue_jobs_delayed", "mail"): 1,
        ("bunqueue_queue_jobs_active", "mail"): 0,
        ("bunqueue_queue_jobs_dlq", "mail"): 0,
        ("bunqueue_queue_jobs_waiting", "jobs"): 0,
        ("bunqueue_queue_jobs_prioritized", "jobs"): 0,
        ("bunqueue_queue_jobs_delayed", "jobs"): 0,
        ("bunqueue_queue_jobs_active", "jobs"): 1,
        ("bunqueue_queue_jobs_dlq", "jobs"): 1,
    }
    # trioq's own names stay beside them
    assert found[("trioq_jobs", (("queue", "mail"), ("state", "waiting")))] == 1
    assert found[("trioq_jobs_pushed_total", ())] == 6


async def test_workers_crons_webhooks_and_connections(
    app: App, nursery: trio.Nursery, client: FrameClient
) -> None:
    await client.call("RegisterWorker", name="w1", queues=["q"], concurrency=4)
    await client.call("RegisterWorker", name="w2", queues=["q"], concurrency=2)
    await client.call("Heartbeat", id="w1", activeJobs=3, processed=10, failed=2)
    await client.call("Cron", name="tick", queue="q", data={}, repeatEvery=60_000)
    hook = await client.call("AddWebhook", url="https://example.com/hook", events=["job.failed"])
    await client.call("AddWebhook", url="https://example.com/other", events=["job.failed"])
    await client.call("SetWebhookEnabled", id=hook["data"]["webhookId"], enabled=False)
    found = await scrape(app, nursery)
    expected = {
        "bunqueue_workers_registered": 2,
        "bunqueue_workers_active": 2,
        "bunqueue_worker_active_jobs": 3,
        "bunqueue_worker_concurrency_slots": 6,
        "bunqueue_workers_processed_total": 10,
        "bunqueue_workers_failed_total": 2,
        "bunqueue_cron_jobs_registered": 1,
        "bunqueue_webhooks_registered": 2,
        "bunqueue_webhooks_enabled": 1,
    }
    assert {name: found[(name, ())] for name in expected} == expected
    assert found[("bunqueue_connections", (("transport", "tcp"),))] == 1
    assert found[("bunqueue_connections", (("transport", "websocket"),))] == 0
    assert found[("bunqueue_connections", (("transport", "sse"),))] == 0
    assert found[("bunqueue_process_resident_memory_bytes", ())] > 0
    assert found[("process_resident_memory_bytes", ())] > 0
    assert ("process_cpu_seconds_total", ()) in found
    build = [labels for name, labels in found if name == "bunqueue_build_info"]
    assert len(build) == 1 and dict(build[0])["version"]


async def test_per_queue_series_stop_at_the_reference_cap(
    app: App, nursery: trio.Nursery, client: FrameClient
) -> None:
    names = [f"q{index:03}" for index in range(MAX_QUEUE_SERIES + 2)]
    for name in names:
        await client.call("PUSH", queue=name, data={})
    found = await scrape(app, nursery)
    labelled = {
        dict(labels)["queue"] for name, labels in found if name == "bunqueue_queue_jobs_waiting"
    }
    assert labelled == set(names[:MAX_QUEUE_SERIES])  # the first by name
    assert found[("bunqueue_queue_metrics_exported", ())] == MAX_QUEUE_SERIES
    assert found[("bunqueue_queue_metrics_omitted", ())] == 2
    assert found[("bunqueue_jobs_waiting", ())] == len(names)  # totals count every queue


async def test_the_prometheus_command_answers_the_reference_names(client: FrameClient) -> None:
    await client.call("PUSH", queue="q", data={})
    reply = await client.call("Prometheus")
    found = samples(reply["data"]["metrics"])
    assert found[("bunqueue_jobs_waiting", ())] == 1
    assert found[("bunqueue_jobs_pushed_total", ())] == 1
    assert found[("bunqueue_queue_jobs_waiting", (("queue", "q"),))] == 1


async def test_sqlite_mode_reports_the_database_size(tmp_path: Any) -> None:
    path = str(tmp_path / "trioq.db")
    store = open_sqlite(path)
    try:
        async with trio.open_nursery() as nursery:
            app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
            await nursery.start(app.run)
            client = await memory_connector(app, nursery)()
            await client.call("PUSH", queue="q", data={"blob": "x" * 10_000})
            found = await scrape(app, nursery)
            on_disk = sum(os.stat(name).st_size for name in (path, path + "-wal"))
            assert found[("bunqueue_sqlite_database_size_bytes", ())] == on_disk > 10_000
            app.shutdown()
    finally:
        store.close()


async def test_memory_mode_has_no_database_size(app: App, nursery: trio.Nursery) -> None:
    assert not any(
        name == "bunqueue_sqlite_database_size_bytes" for name, _ in await scrape(app, nursery)
    )
