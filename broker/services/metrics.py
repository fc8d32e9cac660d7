"""Prometheus metrics: queue depths by state, totals, connections, latencies, pass sizes.

Depths and totals are read from the engine when scraped (nothing to keep in step); the
histograms are observed as jobs start and finish and as the actor runs its passes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .metrics_reference import ReferenceCollector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 3600)
PASS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
FOLD_AT = 4096
"""Recorded values a histogram may hold uncounted after a pass (sorting 4096 floats takes well
under a millisecond)."""


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
            total.add_metric([], self.state.observers.totals[key])
            yield total
        gauge = GaugeMetricFamily("trioq_connections", "Open client connections")
        gauge.add_metric([], self.connections())
        yield gauge


class FastHistogram:
    """A histogram whose values are counted into buckets in bulk.

    `record` is the bound `append` of a list: the engine calls it for every job it starts and
    completes, and a C method call costs a fraction of a Python one (callgrind, PULLB 100 +
    ACKB: about 5.5k instructions a job went to the two per-job observations). The recorded
    values are sorted and counted by `fold`, before every read and once `backlog` holds
    FOLD_AT of them (`Metrics.after_pass` checks after each pass), so they stay bounded.
    Values are in the unit of `per_second` per second (1000: milliseconds); a negative one
    (a clock step back) counts as 0.
    """

    def __init__(
        self, name: str, documentation: str, buckets: tuple[float, ...], per_second: float = 1.0
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        self.per_second = per_second
        self._counts = [0] * (len(buckets) + 1)
        self._total = 0.0
        self.backlog: list[float] = []
        self.record: Callable[[float], None] = self.backlog.append

    @property
    def counts(self) -> list[int]:
        """How many values fell in each bucket (the last: above every bound), not cumulative."""
        self.fold()
        return self._counts

    @property
    def total(self) -> float:
        """The sum of the values, in seconds."""
        self.fold()
        return self._total

    def fold(self) -> None:
        """Count the recorded values into their buckets and the total."""
        backlog = self.backlog
        if not backlog:
            return
        backlog.sort()
        per_second = self.per_second

        def seconds(value: float) -> float:
            return value / per_second if value > 0 else 0.0

        below = 0  # values in the buckets counted so far
        for index, bound in enumerate(self.bounds):
            upto = bisect.bisect_right(backlog, bound, lo=below, key=seconds)
            self._counts[index] += upto - below
            below = upto
        self._counts[-1] += len(backlog) - below
        self._total += sum(backlog[bisect.bisect_right(backlog, 0) :]) / per_second
        backlog.clear()

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
        # Open WebSocket and SSE connections; the HTTP port sets it (bunqueue_connections).
        self.http_transports: Callable[[], tuple[int, int]] = lambda: (0, 0)
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(state, connections))
        if role is not None:  # several brokers on PostgreSQL: which one is active
            self.registry.register(RoleCollector(role))
        self.push_to_start = FastHistogram(
            "trioq_push_to_start_seconds", "From a job's run time to its start",
            LATENCY_BUCKETS, per_second=1000,
        )  # fmt: skip
        self.processing = FastHistogram(
            "trioq_processing_seconds", "From a job's start to its completion",
            LATENCY_BUCKETS, per_second=1000,
        )  # fmt: skip
        self.pass_commands = FastHistogram(
            "trioq_engine_pass_commands", "Commands run in one engine pass", PASS_BUCKETS
        )
        self.histograms = [self.push_to_start, self.processing, self.pass_commands]
        self.registry.register(HistogramCollector(self.histograms))
        # The three backlogs, unpacked by `after_pass` on every pass without attribute chains.
        self._backlogs = tuple(histogram.backlog for histogram in self.histograms)

    def add_reference(self, engine: Any, now_ms: Callable[[], float], db_path: str | None) -> None:
        """Serve the reference's names too (metrics_reference.py), read from `engine`, with
        the standard `process_*` collector; `db_path` is the SQLite file, if any."""
        self.registry.register(ReferenceCollector(engine, now_ms, self._transports, db_path))
        self.registry.register(ProcessCollector(registry=None))

    def _transports(self) -> dict[str, int]:
        websocket, sse = self.http_transports()
        return {"tcp": self.connections(), "websocket": websocket, "sse": sse}

    def after_pass(self, commands: int) -> None:
        """The actor ran a pass of `commands` commands: record it, and count the values
        recorded so far once a histogram holds FOLD_AT uncounted ones (bounded memory: a pass
        records one value a job it starts or completes). Runs for every pass."""
        starts, completions, passes = self._backlogs
        passes.append(commands)
        if len(starts) >= FOLD_AT or len(completions) >= FOLD_AT or len(passes) >= FOLD_AT:
            for histogram in self.histograms:
                histogram.fold()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
