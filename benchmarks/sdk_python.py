"""One timed row of ``python -m benchmarks.sdk`` through the official Python SDK (PyPI
``bunqueue-client``): push N jobs with ``Queue.add_bulk`` of 100, one call after another, then a
``Worker`` (concurrency 50, batch size 20, no heartbeats, the SDK's default one ACK per job)
processes them; timed until every job completed once.

    python -m benchmarks.sdk_python HOST PORT QUEUE JOBS

It speaks the same stdin/stdout handshake as ``sdk_client.ts``: prints ``ready`` once connected,
waits for one line on stdin, runs the timed part and prints one JSON line ``{jobs, seconds,
pushSeconds}``, then closes. It runs in a process of its own (the SDK is thread-based), so the
harness reads the server's CPU time around exactly the timed part.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

BULK = 100
CONCURRENCY = 50
BATCH_SIZE = 20
POLL_TIMEOUT_MS = 500  # the worker's close() waits for its parked PULLB; the row is timed before
DEADLINE_S = 600.0
PAYLOAD = "x" * 100


class Completions:
    """The ids a Worker reported completed; wakes the waiter at the last one or on an error."""

    def __init__(self, expected: int) -> None:
        """Wait for ``expected`` distinct completions."""
        self.expected = expected
        self.ids: set[str] = set()
        self.problems: list[str] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def completed(self, job: Any, _result: Any) -> None:
        """A 'completed' event: a second completion of one job is a problem."""
        with self._lock:
            if job.id in self.ids:
                self.problems.append(f"job {job.id} completed twice")
            self.ids.add(job.id)
            if len(self.ids) >= self.expected or self.problems:
                self.done.set()

    def failed(self, job: Any, exc: BaseException) -> None:
        """A 'failed' or 'error' event ends the row."""
        with self._lock:
            self.problems.append(f"job {getattr(job, 'id', job)} failed: {exc}")
            self.done.set()

    def error(self, exc: BaseException) -> None:
        """An 'error' event of the worker ends the row."""
        self.failed("(worker)", exc)


def push_bulk(queue: Any, count: int) -> list[str]:
    """Push ``count`` jobs with ``add_bulk`` of ``BULK``; return their ids."""
    ids: list[str] = []
    for start in range(0, count, BULK):
        size = min(BULK, count - start)
        batch = [
            {"name": "bulk-job", "data": {"data": PAYLOAD, "i": start + i}} for i in range(size)
        ]
        added = queue.add_bulk(batch)
        if len(added) != size:
            raise RuntimeError(f"add_bulk of {size} returned {len(added)} ids")
        ids.extend(str(job_id) for job_id in added)
    return ids


def run(host: str, port: int, queue_name: str, jobs: int) -> int:
    """The handshake and the timed row; returns the exit status."""
    from bunqueue import Queue, Worker

    queue = Queue(queue_name, host=host, port=port)
    queue.get_job_counts()  # connect outside the timed part
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.perf_counter()
    pushed = push_bulk(queue, jobs)
    push_seconds = time.perf_counter() - began
    seen = Completions(jobs)
    worker = Worker(
        queue_name,
        lambda job: None,
        host=host,
        port=port,
        concurrency=CONCURRENCY,
        batch_size=BATCH_SIZE,
        poll_timeout_ms=POLL_TIMEOUT_MS,
        heartbeat_interval_s=0,
        autorun=False,
    )
    worker.on("completed", seen.completed)
    worker.on("failed", seen.failed)
    worker.on("error", seen.error)
    worker.start()
    finished = seen.done.wait(DEADLINE_S)
    seconds = time.perf_counter() - began
    try:
        if not finished:
            print(f"timed out: {len(seen.ids)} of {jobs} completed", file=sys.stderr)
            return 1
        if seen.problems:
            print("; ".join(seen.problems[:5]), file=sys.stderr)
            return 1
        if len(set(pushed)) != jobs or seen.ids != set(pushed):
            print(
                f"pushed {len(set(pushed))} distinct ids, completed {len(seen.ids)}",
                file=sys.stderr,
            )
            return 1
        print(
            json.dumps({"jobs": jobs, "seconds": seconds, "pushSeconds": push_seconds}), flush=True
        )
        return 0
    finally:
        worker.close(timeout=5)
        queue.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point: HOST PORT QUEUE JOBS."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    host, port, queue_name, jobs = args
    return run(host, int(port), queue_name, int(jobs))


if __name__ == "__main__":
    raise SystemExit(main())
