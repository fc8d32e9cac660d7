"""Observers: what the engine tells those who watch it, collected during a pass.

Job events for subscribers and webhooks (only while someone listens), the jobs
that finished for WaitJob, the running totals and per-queue minute counts for Metrics, and the
latency hooks a served broker wires to its histograms. The actor takes the events and the
finished jobs after each pass (`state.observers.events`...); the lists are emptied in place,
never replaced (the fan-out may hold them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.engine.state.model import Job
from broker.engine.state.telemetry import QueueTelemetry


class Observers:
    """Events, finished jobs, totals and latency hooks of the engine."""

    def __init__(self, max_queues: int) -> None:
        # Job events of the pass, recorded only while someone listens (EngineState.emitting).
        self.events: list[tuple[str, Job | None, dict[str, Any]]] = []
        # Jobs that completed, failed or were removed since the engine last looked (WaitJob).
        self.finished: list[Job] = []
        self.totals = {"pushed": 0, "pulled": 0, "completed": 0, "failed": 0}
        # Per-queue minute counts (Metrics {queue, type}), for as many queues as may exist.
        self.telemetry = QueueTelemetry(max_queues)
        # Latency observers (metrics): called with ms waited before a start, ms of processing.
        self.on_start: Callable[[float], Any] | None = None
        self.on_complete: Callable[[float], Any] | None = None
        # The recorder of finished jobs, as a bound method (no second call on hot paths).
        self.finish = self.finished.append
        self.record = self.events.append  # an event tuple (kind, job or None, fields)
        self.record_many = self.events.extend
        self.finish_many = self.finished.extend
        # Forget the jobs finished so far (nobody waits for them): the actor calls it after
        # every ACK, a bound method of the list costs no Python frame.
        self.drop_finished = self.finished.clear

    def watch_latency(
        self,
        on_start: Callable[[float], Any] | None,
        on_complete: Callable[[float], Any] | None,
    ) -> None:
        """Call `on_start` with the ms a job waited before it started, `on_complete` with the
        ms it was processed (a served broker's histograms)."""
        self.on_start = on_start
        self.on_complete = on_complete

    def take_events(self) -> list[tuple[str, Job | None, dict[str, Any]]]:
        """The events recorded since the last look (and forget them)."""
        events = list(self.events)
        self.events.clear()
        return events

    def take_finished(self) -> list[Job]:
        """The jobs finished since the last look (and forget them)."""
        finished = list(self.finished)
        self.finished.clear()
        return finished
