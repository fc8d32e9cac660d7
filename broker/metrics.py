"""Prometheus metrics: queue depths by state, totals, connections, latencies, pass sizes.

Depths and totals are read from the engine when scraped (nothing to keep in step); the
histograms are observed as jobs start and finish and as the actor runs its passes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 3600)
PASS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class EngineCollector(Collector):
    """Reads queue depths and totals from the engine at scrape time."""

    def __init__(self, state: Any, connections: Callable[[], int]) -> None:
        self.state = state
        self.connections = connections

    def collect(self) -> Iterator[Any]:
        """Yield the current values."""
        depth = GaugeMetricFamily(
            "trioq_jobs", "Jobs by queue and state", labels=["queue", "state"]
        )
        for name, queue in sorted(self.state.queues.items()):
            for state, count in queue.counts.items():
                depth.add_metric([name, state], count)
        yield depth
        for key in ("pushed", "pulled", "completed", "failed"):
            total = CounterMetricFamily(f"trioq_jobs_{key}", f"Jobs {key} since start")
            total.add_metric([], self.state.totals[key])
            yield total
        gauge = GaugeMetricFamily("trioq_connections", "Open client connections")
        gauge.add_metric([], self.connections())
        yield gauge


class FastHistogram:
    """Bucket counts kept in plain lists: observing costs a bisect and two additions, with no
    lock (everything runs on the event loop's thread), which matters on the engine's path."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count one value."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_ms(self, took_ms: float) -> None:
        """Count one duration given in milliseconds, in seconds (a negative one as 0): one call
        per job on the engine's path, where `observe` behind a converting method made two."""
        seconds = took_ms / 1000 if took_ms > 0 else 0.0
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def family(self) -> HistogramMetricFamily:
        """The histogram as Prometheus wants it (cumulative buckets)."""
        cumulative, running = [], 0
        for bound, count in zip([*self.bounds, math.inf], self.counts, strict=True):
            running += count
            cumulative.append(("+Inf" if math.isinf(bound) else repr(float(bound)), running))
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], cumulative, sum_value=self.total)
        return family


class HistogramCollector(Collector):
    """Exposes FastHistograms."""

    def __init__(self, histograms: list[FastHistogram]) -> None:
        self.histograms = histograms

    def collect(self) -> Iterator[Any]:
        """Yield each histogram."""
        for histogram in self.histograms:
            yield histogram.family()


class RoleCollector(Collector):
    """`trioq_role{role="active"|"standby"} 1`: this broker's role at scrape time."""

    def __init__(self, role: Callable[[], str]) -> None:
        self.role = role

    def collect(self) -> Iterator[Any]:
        """Yield the role."""
        gauge = GaugeMetricFamily("trioq_role", "This broker's role (PostgreSQL)", labels=["role"])
        gauge.add_metric([self.role()], 1)
        yield gauge


class Metrics:
    """The broker's metrics registry and the histograms it observes."""

    def __init__(
        self, state: Any, connections: Callable[[], int], role: Callable[[], str] | None = None
    ) -> None:
        self.connections = connections  # open TCP connections, for /dashboard too
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(state, connections))
        if role is not None:  # several brokers on PostgreSQL: which one is active
            self.registry.register(RoleCollector(role))
        self.push_to_start = FastHistogram(
            "trioq_push_to_start_seconds", "From a job's run time to its start", LATENCY_BUCKETS
        )
        self.processing = FastHistogram(
            "trioq_processing_seconds", "From a job's start to its completion", LATENCY_BUCKETS
        )
        self.pass_commands = FastHistogram(
            "trioq_engine_pass_commands", "Commands run in one engine pass", PASS_BUCKETS
        )
        histograms = [self.push_to_start, self.processing, self.pass_commands]
        self.registry.register(HistogramCollector(histograms))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
