"""The official Python SDK of bunqueue (PyPI `bunqueue-client`) against trioq.

    pip install bunqueue-client==0.1.5      # `make test`'s venv has it: .venv/bin/python
    python examples/python_sdk.py [HOST:PORT]     # default 127.0.0.1:6789

A Queue adds three emails to `emails`; a Worker runs them on its threads: it leases jobs with
PULLB (`lock_ttl_ms`), sends ACK with the function's return value, and FAIL with the error and
its stack when the function raises. One address is bad: its job is tried twice, 100 ms apart,
and ends `failed`. The script waits for the three outcomes, closes the worker and prints each
job's state.

The SDK puts the job's name inside its data (`{"name": "welcome", "to": ...}`), as the
TypeScript SDK does. A short `poll_timeout_ms` lets `Worker.close()` return quickly (it waits
for the long poll in flight; README: "Closing a Python SDK worker quickly").
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from bunqueue import Job, Queue, Worker

QUEUE = "emails"
TIMEOUT_S = 30.0


def send_email(job: Job) -> dict[str, Any]:
    """The work itself: here it only checks the address. Raising makes the SDK send FAIL."""
    to = job.data["to"]
    if "@" not in to:
        raise ValueError(f"not an email address: {to!r}")
    return {"sent": True, "to": to}


def main() -> None:
    """Add the jobs, work them until each has an outcome, print their states."""
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:6789").rpartition(":")
    queue = Queue(QUEUE, host=host, port=int(port))
    addresses = ("ada@example.com", "grace@example.com", "nobody")
    jobs = [queue.add("welcome", {"to": to}, attempts=2, backoff=100) for to in addresses]
    print(f"pushed {len(jobs)} jobs to {QUEUE}")

    finished = threading.Semaphore(0)  # released once per job that completed or failed for good
    printing = threading.Lock()  # the worker calls back on several threads at once

    def completed(job: Job, result: Any) -> None:
        with printing:
            print(f"ACK  {job.data['to']}: {result}")
        finished.release()

    def failed(job: Job, error: BaseException) -> None:
        attempt = f"attempt {job.attempts + 1} of {job.max_attempts}"
        with printing:
            print(f"FAIL {job.data['to']} ({attempt}): {error}")
        if job.attempts + 1 >= job.max_attempts:
            finished.release()

    worker = Worker(QUEUE, send_email, host=host, port=int(port), poll_timeout_ms=200)
    worker.on("completed", completed)
    worker.on("failed", failed)
    try:
        for _ in jobs:
            if not finished.acquire(timeout=TIMEOUT_S):
                raise TimeoutError("the jobs did not finish in time")
    finally:
        worker.close()
    for job in jobs:
        stored = queue.get_job(job.id)  # GetJob: the job as the broker holds it now
        assert stored is not None
        state = stored.raw["state"]
        outcome = stored.raw["returnvalue"] if state == "completed" else stored.raw["failedReason"]
        print(f"{job.data['to']}: {state}, {outcome}")
    queue.close()


if __name__ == "__main__":
    main()
