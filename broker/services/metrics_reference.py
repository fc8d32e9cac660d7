"""The reference's Prometheus names (`bunqueue_*`), beside trioq's own (metrics.py).

Dashboards and alerts written for bunqueue read these: job counts by state (all queues, and
per queue for at most MAX_QUEUE_SERIES queues, as the reference caps them), totals since start,
uptime, crons, workers, webhooks, storage health, connections by transport, build identity and
the standard `process_*` collector. Everything is read from the engine when scraped.

What trioq does not have is left out rather than invented: the JavaScript heap gauges
(`bunqueue_process_heap_*`, `process_heap_bytes`) and the per-operation latency histograms
(`bunqueue_push/pull/ack_duration_seconds`; trioq times push-to-start and processing instead,
`trioq_*_seconds`). The S3 backup gauges are served with the values of a broker without
backups (trioq has none), so alerts on them stay quiet rather than missing.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__
from ..engine.components.workers import WORKER_TIMEOUT_MS
from ..engine.state.model import ACTIVE, COMPLETED, DELAYED, FAILED, PRIORITIZED, WAITING

MAX_QUEUE_SERIES = 100
"""Queues with labelled `bunqueue_queue_jobs_*` series, first by name (the reference's
default `METRICS_MAX_QUEUES`); the rest are counted in `bunqueue_queue_metrics_omitted`."""

# (name suffix, trioq state, help) of the broker-wide job gauges, in the reference's order.
JOB_GAUGES = (
    ("waiting", WAITING, "Number of jobs waiting in queue"),
    ("prioritized", PRIORITIZED, "Number of prioritized jobs (priority > 0)"),
    ("delayed", DELAYED, "Number of delayed jobs"),
    ("active", ACTIVE, "Number of jobs being processed"),
    ("dlq", FAILED, "Number of jobs in dead letter queue"),
    ("completed", COMPLETED, "Number of completed jobs"),
)
QUEUE_GAUGES = JOB_GAUGES[:5]  # per queue: no completed series, as the reference
TOTALS = ("pushed", "pulled", "completed", "failed")
BACKUP_GAUGES = (
    "enabled", "scheduler_running", "in_progress", "interval_seconds", "retention",
    "consecutive_failures", "last_success_timestamp_seconds",
    "last_failure_timestamp_seconds", "last_duration_seconds", "last_size_bytes",
)  # fmt: skip
BACKUP_COUNTERS = ("attempts", "successes", "failures", "overlap_rejections")
TRANSPORTS = ("tcp", "websocket", "sse")


class ReferenceCollector(Collector):
    """Yields the reference's metric families from the engine at scrape time.

    `engine` is the broker's Engine, `now_ms` its clock, `transports` the open connections by
    transport (tcp, websocket, sse), `db_path` the SQLite file (None: memory or PostgreSQL).
    """

    def __init__(
        self,
        engine: Any,
        now_ms: Callable[[], float],
        transports: Callable[[], dict[str, int]],
        db_path: str | None = None,
    ) -> None:
        self.engine = engine
        self.now_ms = now_ms
        self.transports = transports
        self.db_path = db_path

    def collect(self) -> Iterator[Any]:
        """Yield the current values."""
        queues = self.engine.state.queues
        totals = dict.fromkeys((state for _, state, _ in JOB_GAUGES), 0)
        for queue in queues.values():
            for state in totals:
                totals[state] += queue.counts.get(state, 0)
        for suffix, state, text in JOB_GAUGES:
            yield gauge(f"bunqueue_jobs_{suffix}", text, totals[state])
        for key in TOTALS:
            count = self.engine.state.observers.totals[key]
            yield counter(f"bunqueue_jobs_{key}", f"Total jobs {key}", count)
        uptime = whole_seconds(self.now_ms() - self.engine.started_ms)
        yield gauge("bunqueue_uptime_seconds", "Server uptime in seconds", uptime)
        crons = len(self.engine.crons.crons)
        yield gauge("bunqueue_cron_jobs_registered", "Number of registered cron jobs", crons)
        yield from self._workers()
        yield from self._webhooks()
        yield from self._storage()
        yield from self._queues(queues)
        yield from self._identity()
        yield from backup_families()

    def _workers(self) -> Iterator[Any]:
        now = self.now_ms()
        workers = self.engine.workers.summaries(now)
        live = [w for w in workers if now - w["lastSeen"] < WORKER_TIMEOUT_MS]
        yield gauge("bunqueue_workers_registered", "Number of registered workers", len(workers))
        yield gauge("bunqueue_workers_active", "Number of active workers", len(live))
        yield gauge(
            "bunqueue_worker_active_jobs", "Number of jobs currently processed by workers",
            sum(w["activeJobs"] or 0 for w in workers),
        )  # fmt: skip
        yield gauge(
            "bunqueue_worker_concurrency_slots", "Configured worker concurrency capacity",
            sum(w.get("concurrency") or 0 for w in live),
        )  # fmt: skip
        yield counter(
            "bunqueue_workers_processed", "Total jobs processed by workers",
            sum(w["processedJobs"] or 0 for w in workers),
        )  # fmt: skip
        yield counter(
            "bunqueue_workers_failed", "Total jobs failed by workers",
            sum(w["failedJobs"] or 0 for w in workers),
        )  # fmt: skip

    def _webhooks(self) -> Iterator[Any]:
        listed = self.engine.webhooks.list_all(None, None, self.now_ms())["data"]["stats"]
        yield gauge(
            "bunqueue_webhooks_registered", "Number of registered webhooks", listed["total"]
        )
        yield gauge("bunqueue_webhooks_enabled", "Number of enabled webhooks", listed["enabled"])

    def _storage(self) -> Iterator[Any]:
        # A trioq whose store fails stops (fail-stop): one that answers is not degraded.
        yield gauge("bunqueue_storage_degraded", "Whether persistent storage is degraded", 0)
        yield gauge(
            "bunqueue_storage_disk_full", "Whether persistent storage reported a full disk", 0
        )
        yield gauge(
            "bunqueue_process_resident_memory_bytes", "Process resident memory size in bytes",
            resident_bytes(),
        )  # fmt: skip
        if self.db_path is not None:
            yield gauge(
                "bunqueue_sqlite_database_size_bytes", "SQLite database file size in bytes",
                database_bytes(self.db_path),
            )  # fmt: skip

    def _queues(self, queues: dict[str, Any]) -> Iterator[Any]:
        names = sorted(queues)
        shown = names[:MAX_QUEUE_SERIES]
        for suffix, state, _ in QUEUE_GAUGES:
            family = GaugeMetricFamily(
                f"bunqueue_queue_jobs_{suffix}",
                f"Number of {suffix} jobs per queue",
                labels=["queue"],
            )
            for name in shown:
                family.add_metric([name], queues[name].counts.get(state, 0))
            yield family
        yield gauge(
            "bunqueue_queue_metrics_exported", "Queue names included in labelled Prometheus series",
            len(shown),
        )  # fmt: skip
        yield gauge(
            "bunqueue_queue_metrics_omitted",
            "Queue names omitted by the Prometheus cardinality limit", len(names) - len(shown),
        )  # fmt: skip

    def _identity(self) -> Iterator[Any]:
        info = GaugeMetricFamily(
            "bunqueue_build_info", "Build and runtime identity",
            labels=["python_version", "version"],
        )  # fmt: skip
        info.add_metric([platform.python_version(), __version__], 1)
        yield info
        connections = GaugeMetricFamily(
            "bunqueue_connections", "Current server connections by bounded transport",
            labels=["transport"],
        )  # fmt: skip
        counts = self.transports()
        for transport in TRANSPORTS:
            connections.add_metric([transport], counts.get(transport, 0))
        yield connections


def backup_families() -> Iterator[Any]:
    """The reference's S3 backup metrics, as a broker without scheduled backups shows them."""
    for name in BACKUP_GAUGES:
        yield gauge(f"bunqueue_backup_{name}", f"S3 backup {name.replace('_', ' ')}", 0)
    for name in BACKUP_COUNTERS:
        yield counter(f"bunqueue_backup_{name}", f"S3 backup {name.replace('_', ' ')}", 0)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    """A gauge family with one unlabelled sample."""
    return GaugeMetricFamily(name, documentation, value=value)


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """A counter family with one unlabelled sample (`_total` is added to its name)."""
    return CounterMetricFamily(name, documentation, value=value)


def resident_bytes() -> int:
    """This process's resident memory in bytes (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def database_bytes(path: str) -> int:
    """The SQLite file's size with its write-ahead log (what the database takes on disk)."""
    size = 0
    for name in (path, path + "-wal"):
        with contextlib.suppress(OSError):
            size += os.stat(name).st_size
    return size


def whole_seconds(milliseconds: float) -> int:
    """Milliseconds as whole seconds, rounded down."""
    return math.floor(milliseconds / 1000)
