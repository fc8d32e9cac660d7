"""OpenTelemetry: W3C trace context travels from `add()` to the handler; a span per job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import trioq
from tests.support.client_broker import Broker, Run


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider recording into memory, for this test only (the global provider
    can be set once per process, so the test swaps it in and out itself)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


def test_the_trace_context_goes_from_add_to_the_handler(
    run: Run, queue_name: str, memory_broker: Broker, spans: InMemorySpanExporter
) -> None:
    seen: dict[str, Any] = {}

    async def handler(job: trioq.Job[Any]) -> str:
        if job.data == "fail":
            raise RuntimeError("traced failure")
        seen[job.id] = trace.get_current_span().get_span_context()
        return "ok"

    async def main() -> None:
        tracer = trace.get_tracer("test")
        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            with tracer.start_as_current_span("request") as request:
                job = await queue.add("x", "ok", tags=["mine"])
                failing = await queue.add("x", "fail", attempts=1)
            seen["request"] = request.get_span_context()
            seen["job"] = job.id
            untraced = await queue.add("x", "ok")
            async with trioq.Worker(client, queue_name, handler):
                assert await job.wait(timeout=10) == "ok"
                with pytest.raises(trioq.JobFailed):
                    await failing.wait(timeout=10)
                await untraced.wait(timeout=10)
            stored = await client.get_job(job.id)
            assert stored is not None and stored.tags[0] == "mine"
            assert stored.tags[1].startswith("traceparent:00-")
            assert (await client.get_job(untraced.id)).tags == []  # type: ignore[union-attr]

    run(main)
    request = seen["request"]
    process = [s for s in spans.get_finished_spans() if s.name == f"process {queue_name}"]
    assert len(process) == 3
    traced = [s for s in process if s.parent is not None and s.parent.span_id == request.span_id]
    assert len(traced) == 2
    assert all(s.context.trace_id == request.trace_id for s in traced)
    assert all(s.kind == SpanKind.CONSUMER for s in process)
    ok = next(s for s in traced if s.status.status_code != StatusCode.ERROR)
    assert seen[seen["job"]].span_id == ok.context.span_id  # the handler ran inside its span
    failed = next(s for s in traced if s.status.status_code == StatusCode.ERROR)
    assert failed.events[0].name == "exception"
