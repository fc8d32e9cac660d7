"""Interop: the reference's Prometheus names, read from trioq by the official TypeScript SDK
(its TCP pool sends `Prometheus` after a Queue added jobs; see ts/metrics.ts)."""

from __future__ import annotations

from tests.support.typescript import run_script


def test_the_sdk_reads_the_reference_metric_names(broker_address: tuple[str, int]) -> None:
    report = run_script("metrics.ts", broker_address)
    samples, queue = report["samples"], report["queue"]
    assert samples[f'bunqueue_queue_jobs_waiting{{queue="{queue}"}}'] == 2
    assert samples[f'bunqueue_queue_jobs_prioritized{{queue="{queue}"}}'] == 1
    assert samples[f'bunqueue_queue_jobs_delayed{{queue="{queue}"}}'] == 1
    # the broker is shared with other tests: the broker-wide series count at least these jobs
    assert samples["bunqueue_jobs_waiting"] >= 2 and samples["bunqueue_jobs_delayed"] >= 1
    assert samples["bunqueue_jobs_pushed_total"] >= 4
    for name in ("bunqueue_jobs_active", "bunqueue_jobs_completed", "bunqueue_uptime_seconds"):
        assert name in samples
    assert samples['bunqueue_connections{transport="tcp"}'] >= 1
