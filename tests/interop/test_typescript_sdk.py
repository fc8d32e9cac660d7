"""Interop: the official TypeScript SDK (npm `bunqueue` 2.9.5, run with `bun`) against trioq.

`make test` installs both from the npm registry into tests/interop/ts (see the Makefile).
Each script prints what happened as one JSON line: flow.ts builds a FlowProducer graph (one
PUSHF) and runs workers for the children and the parent; locks.ts runs a `useLocks: false`
worker (empty lock tokens, event subscription) and reads Queue.getMetrics().
"""

from __future__ import annotations

from tests.support.typescript import run_script


def test_flow_producer_children_run_first_and_parent_reads_them(
    broker_address: tuple[str, int],
) -> None:
    report = run_script("flow.ts", broker_address)
    assert report["order"][2] == "parent:release"
    assert sorted(report["order"][:2]) == ["child:sdk", "child:unit"]
    values = report["childValues"]
    assert sorted(values.values()) == [10, 20]
    assert {key.split(":", 1)[1] for key in values} == set(report["childIds"])


def test_worker_without_locks_settles_every_job_once_and_metrics_count_them(
    broker_address: tuple[str, int],
) -> None:
    report = run_script("locks.ts", broker_address)
    assert report["runs"] == 6  # five jobs, the first one tried twice: no ACK was lost
    counts = report["counts"]
    assert (counts["completed"], counts["active"], counts["waiting"]) == (5, 0, 0)
    completed = report["completedMetrics"]
    assert completed["meta"]["count"] == 5
    assert sum(completed["data"]) == 5
    assert report["failedMetrics"]["meta"]["count"] == 0  # the failure was retried, not final
