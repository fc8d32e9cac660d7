"""Three clients side by side on one trioq broker (memory mode): `trioq` (this repository's
client, under asyncio and under Trio), the official Python SDK (`bunqueue-client`) and the
official TypeScript SDK (npm `bunqueue`, run with bun from tests/interop/ts).

    python -m benchmarks.clients [--jobs 20000] [--sdk-jobs 1000] [--repeat 3]
                                 [--clients trioq-asyncio,trioq-trio,python-sdk,ts-sdk]

Two rows per client, each client in a process of its own (one Python process for trioq, as
the issue's targets say):

* add: `--jobs` jobs added by 32 concurrent `add()` calls (32 tasks, or 32 threads for the
  Python SDK, which is synchronous), each adding its share one after the other;
* process: the queue is filled with `--jobs` jobs (in bulk, untimed), then one Worker of
  concurrency 50 with a handler that returns at once runs until it has handled them all.

The Python SDK is about 100 times slower, so it gets `--sdk-jobs` jobs (a rate is a rate).
It prints the median (and range) of `--repeat` runs in jobs/s, and the load average before
and after: the machine may be shared, so compare numbers of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TS_DIR = REPO / "tests" / "interop" / "ts"
BUN = TS_DIR / "node_modules" / ".bin" / "bun"
CLIENTS = ("trioq-asyncio", "trioq-trio", "python-sdk", "ts-sdk")
ADDERS = 32
CONCURRENCY = 50


# -- the clients (each runs in a child process) ------------------------------------------------


def run_trioq(backend: str, port: int, jobs: int) -> dict[str, float]:
    """trioq under `backend`: 32 concurrent adds, then a Worker of concurrency 50."""
    import anyio

    import trioq

    async def main() -> dict[str, float]:
        tag = uuid.uuid4().hex[:8]
        async with trioq.connect(f"tcp://127.0.0.1:{port}") as client:
            queue = client.queue(f"bench-trioq-add-{tag}")
            share = jobs // ADDERS

            async def adder() -> None:
                for n in range(share):
                    await queue.add("job", {"n": n})

            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for _ in range(ADDERS):
                    group.start_soon(adder)
            add = share * ADDERS / (time.perf_counter() - start)

            name = f"bench-trioq-work-{tag}"
            work = client.queue(name)
            for first in range(0, jobs, 1000):
                await work.add_bulk(
                    [("job", {"n": n}) for n in range(first, min(jobs, first + 1000))]
                )
            handled = 0
            done = anyio.Event()

            async def handler(job: trioq.Job[Any]) -> None:
                nonlocal handled
                handled += 1
                if handled == jobs:
                    done.set()

            start = time.perf_counter()
            async with trioq.Worker(client, name, handler, concurrency=CONCURRENCY):
                await done.wait()
                process = jobs / (time.perf_counter() - start)
            return {"add": add, "process": process}

    result: dict[str, float] = anyio.run(main, backend=backend)
    return result


def run_python_sdk(port: int, jobs: int) -> dict[str, float]:
    """The official Python SDK: 32 threads adding, then a Worker of concurrency 50."""
    from bunqueue import Queue, Worker

    tag = uuid.uuid4().hex[:8]
    queue = Queue(f"bench-sdk-add-{tag}", host="127.0.0.1", port=port)
    share = jobs // ADDERS

    def adder() -> None:
        for n in range(share):
            queue.add("job", {"n": n})

    threads = [threading.Thread(target=adder) for _ in range(ADDERS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    add = share * ADDERS / (time.perf_counter() - start)
    queue.close()

    name = f"bench-sdk-work-{tag}"
    work = Queue(name, host="127.0.0.1", port=port)
    for first in range(0, jobs, 1000):
        work.add_bulk(
            [{"name": "job", "data": {"n": n}} for n in range(first, min(jobs, first + 1000))]
        )
    handled = 0
    lock = threading.Lock()
    done = threading.Event()

    def handler(job: Any) -> None:
        nonlocal handled
        with lock:
            handled += 1
            if handled == jobs:
                done.set()

    start = time.perf_counter()
    worker = Worker(name, handler, host="127.0.0.1", port=port, concurrency=CONCURRENCY,
                    poll_timeout_ms=500)  # fmt: skip
    done.wait()
    process = jobs / (time.perf_counter() - start)
    worker.close()
    work.close()
    return {"add": add, "process": process}


def run_ts_sdk(port: int, jobs: int) -> dict[str, float]:
    """The official TypeScript SDK, run with bun (tests/interop/ts/bench.ts)."""
    if not BUN.exists():
        raise SystemExit("bun is missing: run `make test` once (it installs tests/interop/ts)")
    env = {**os.environ, "TRIOQ_HOST": "127.0.0.1", "TRIOQ_PORT": str(port),
           "BENCH_JOBS": str(jobs), "BENCH_ADDERS": str(ADDERS),
           "BENCH_CONCURRENCY": str(CONCURRENCY)}  # fmt: skip
    result = subprocess.run([str(BUN), "run", "bench.ts"], cwd=TS_DIR, env=env,
                            capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    report: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def run_child(client: str, port: int, jobs: int) -> dict[str, float]:
    """Run one client's two rows in this process."""
    if client.startswith("trioq-"):
        return run_trioq(client.removeprefix("trioq-"), port, jobs)
    if client == "python-sdk":
        return run_python_sdk(port, jobs)
    return run_ts_sdk(port, jobs)


# -- the harness -------------------------------------------------------------------------------


def start_broker(port: int) -> tuple[subprocess.Popen[str], int]:
    """A trioq broker in memory mode; returns it and its port."""
    command = [sys.executable, "-m", "broker", "serve", "--memory", "--port", str(port),
               "--http-port", "0", "--log-level", "WARNING"]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 20)
    line = process.stdout.readline() if ready else ""
    if "listening on tcp" not in line:
        process.kill()
        raise SystemExit(f"the broker did not start: {line!r}")
    return process, int(line.rsplit(":", 1)[1])


def measure(client: str, port: int, jobs: int) -> dict[str, float]:
    """One run of one client, in a child process."""
    command = [sys.executable, "-m", "benchmarks.clients", "--child", client, "--port", str(port),
               "--jobs", str(jobs)]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"{client} failed:\n{result.stderr[-3000:]}")
    report: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sdk-jobs", type=int, default=1_000, help="jobs for the Python SDK")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--port", type=int, default=0, help="a running broker (default: start one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.port, args.jobs)))
        return 0
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients: {', '.join(sorted(unknown))} (known: {', '.join(CLIENTS)})")
    broker = None
    port = args.port
    if not port:
        broker, port = start_broker(0)
    results: dict[str, dict[str, list[float]]] = {c: {"add": [], "process": []} for c in clients}
    before = load()
    try:
        for _ in range(args.repeat):
            for client in clients:  # interleaved: each client sees the same machine load
                jobs = args.sdk_jobs if client == "python-sdk" else args.jobs
                report = measure(client, port, jobs)
                for row in ("add", "process"):
                    results[client][row].append(report[row])
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(timeout=30)
    print(f"\nclients on one trioq broker (memory mode), jobs/s, median (min-max) of {args.repeat}")
    print(f"{args.jobs:,} jobs each ({args.sdk_jobs:,} for python-sdk); load average before: "
          f"{before}, after: {load()} (1, 5, 15 min; {os.cpu_count()} CPUs)\n")  # fmt: skip
    print(
        f"| client | add, {ADDERS} concurrent add() | process, Worker concurrency {CONCURRENCY} |"
    )
    print("|---|---:|---:|")
    for client in clients:
        print(f"| {client} | {cell(results[client]['add'])} | {cell(results[client]['process'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
