"""OpenTelemetry, when `opentelemetry-api` is installed: W3C trace context from `add()` to the
handler, and a span per job in the worker.

The context travels in the job's `tags`, as `traceparent:<value>` (and `tracestate:<value>`):
tags are stored and returned with the job by every bunqueue broker, and the payload stays the
user's own. Without the package (or without an active span) nothing is added.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

try:  # optional dependency
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised when the package is absent
    trace = None  # type: ignore[assignment]
    propagate = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]

ENABLED = trace is not None
PREFIXES = ("traceparent:", "tracestate:")
TRACER_NAME = "trioq"


def recording() -> bool:
    """Whether spans would be recorded: an SDK's tracer provider is set (the API alone
    makes no-op spans, not worth their cost on every job)."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def context_tags() -> list[str] | None:
    """The current trace context as tags, or None when there is no active span."""
    if trace is None or propagate is None:
        return None
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    tags = [f"{key}:{carrier[key]}" for key in ("traceparent", "tracestate") if carrier.get(key)]
    return tags or None


def with_context(tags: list[str] | None) -> list[str] | None:
    """`tags` with the current trace context added (None and unchanged without one)."""
    extra = context_tags()
    if extra is None:
        return tags
    return [*(tags or ()), *extra]


def carrier_of(tags: Sequence[str]) -> dict[str, str]:
    """The trace context carried by a job's tags."""
    carrier: dict[str, str] = {}
    for tag in tags:
        if tag.startswith(PREFIXES):
            key, _, value = tag.partition(":")
            carrier[key] = value
    return carrier


@contextlib.contextmanager
def job_span(
    queue: str, job_id: str, name: str, attempts: int, tags: Sequence[str]
) -> Iterator[Any]:
    """A CONSUMER span around one job's handler, child of the context the job carries."""
    if trace is None or propagate is None or otel_context is None:
        yield None
        return
    parent = propagate.extract(carrier_of(tags)) if tags else None
    tracer = trace.get_tracer(TRACER_NAME)
    attributes: dict[str, str | int] = {
        "messaging.system": "bunqueue",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "messaging.operation.type": "process",
        "trioq.job.name": name,
        "trioq.job.attempts": attempts,
    }
    with tracer.start_as_current_span(
        f"process {queue}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


def record_failure(span: Any, error: BaseException) -> None:
    """Mark the job's span as failed with the handler's exception."""
    if span is None or trace is None:
        return
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
