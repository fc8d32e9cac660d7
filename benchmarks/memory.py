"""Memory and stall measurements of issue 11 (slow: minutes, not part of the test suite).

    python -m benchmarks.memory [--jobs 1000000] [--cycle-jobs 200000] [--cycles 5]
                                [--only drain-cycles,removals,startup,waiting]

* ``drain-cycles`` (memory mode): `cycles` times PUSHB `cycle-jobs` jobs (a quarter of them
  delayed by an hour) and Drain; prints the broker's RSS after each cycle, then how long one PULL
  on the drained queue takes.
* ``removals`` (sqlite mode): `jobs` jobs, then Drain while a second connection sends a Ping every
  20 ms (prints the Drain's time and the slowest Ping); the same for Obliterate; then the time
  and reply size of `GetJobs limit: 1e12` over `jobs` jobs.
* ``startup`` (sqlite mode): a broker restarted on `jobs` stored jobs: when its HTTP port
  accepts, when `/ready` answers 200, when its TCP port accepts, and its peak RSS meanwhile,
  against the RSS of the same broker after the jobs were pushed live.
* ``waiting`` (memory and sqlite modes; not run by default): the RSS per million waiting jobs
  (`jobs` jobs of about 90 bytes of data), and the RSS after all of them were pulled and acked.

The broker runs as ``<python> -m broker serve`` from the project root (this checkout's code).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import psutil

from .client import Client
from .servers import LOOPBACK, REPO_ROOT, RssSampler, free_port, port_accepts

BATCH = 1000
PAYLOAD = {"kind": "benchmark", "body": "x" * 64}


def mib(rss: int | None) -> str:
    """Bytes as MiB, one decimal."""
    return "?" if rss is None else f"{rss / 2**20:.0f} MiB"


class Broker:
    """A broker child process with fixed ports, restartable on the same data directory."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.http_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        """Start the process (without waiting for it)."""
        cmd = [sys.executable, "-m", "broker", "serve", "--host", LOOPBACK]
        cmd += ["--port", str(self.port), "--http-port", str(self.http_port)]
        cmd += ["--data-dir", str(self.data_dir)] if self.data_dir else ["--memory"]
        self.process = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        """Start and wait until the TCP port accepts."""
        self.launch()
        while not port_accepts(LOOPBACK, self.port):
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        """The broker's process id."""
        assert self.process is not None
        return self.process.pid

    def rss(self) -> int:
        """The broker's resident set size now."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def stop(self) -> None:
        """SIGTERM, then wait."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=120)

    def client(self) -> Client:
        """A new connection (no timeout: a stalled broker is what is measured)."""
        return Client(LOOPBACK, self.port, timeout=None)


def push(client: Client, queue: str, jobs: int, delayed_share: int = 0) -> None:
    """PUSHB `jobs` jobs in batches; every `delayed_share`-th job is delayed by an hour."""
    left = jobs
    while left:
        count = min(BATCH, left)
        items: list[dict[str, Any]] = []
        for n in range(count):
            item: dict[str, Any] = {"name": "bench", "data": PAYLOAD}
            if delayed_share and n % delayed_share == 0:
                item["delay"] = 3_600_000
            items.append(item)
        client.call({"cmd": "PUSHB", "queue": queue, "jobs": items})
        left -= count


def timed(client: Client, message: dict[str, Any]) -> tuple[float, Any]:
    """Seconds one call took, and its reply."""
    started = time.perf_counter()
    reply = client.call(message)
    return time.perf_counter() - started, reply


class Pinger(threading.Thread):
    """Pings every 20 ms on a connection of its own and keeps the slowest round trip."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(daemon=True)
        self.client = broker.client()
        self.stop_flag = threading.Event()
        self.slowest = 0.0

    def run(self) -> None:
        """Ping until stopped."""
        while not self.stop_flag.is_set():
            seconds, _ = timed(self.client, {"cmd": "Ping"})
            self.slowest = max(self.slowest, seconds)
            time.sleep(0.02)

    def finish(self) -> float:
        """Stop and return the slowest Ping in seconds."""
        self.stop_flag.set()
        self.join()
        self.client.close()
        return self.slowest


def drain_cycles(cycles: int, jobs: int) -> None:
    """Memory mode: RSS across push + Drain cycles, then one PULL's time."""
    broker = Broker(None)
    broker.start()
    try:
        with broker.client() as client:
            print(f"drain-cycles (memory): start RSS {mib(broker.rss())}")
            for cycle in range(1, cycles + 1):
                push(client, "cycle", jobs, delayed_share=4)
                seconds, reply = timed(client, {"cmd": "Drain", "queue": "cycle"})
                client.call({"cmd": "Ping"})  # one more pass: background release gets going
                time.sleep(1.0)
                print(
                    f"  cycle {cycle}: Drain {reply.ok} in {seconds:.2f} s, RSS {mib(broker.rss())}"
                )
            seconds, _ = timed(client, {"cmd": "PULL", "queue": "cycle", "timeout": 0})
            print(f"  PULL on the drained queue: {seconds * 1000:.1f} ms")
    finally:
        broker.stop()


def waiting(jobs: int) -> None:
    """RSS per million waiting jobs (about 90 bytes of data each) in memory and SQLite modes,
    and the RSS once every job was pulled and acknowledged."""
    for mode in ("memory", "sqlite"):
        data_dir = Path(tempfile.mkdtemp(prefix="trioq-waiting-")) if mode == "sqlite" else None
        broker = Broker(data_dir)
        broker.start()
        try:
            with broker.client() as client:
                client.call({"cmd": "Ping"})
                empty = broker.rss()
                push(client, "waiting", jobs)
                full = broker.rss()
                per_million = (full - empty) * 1_000_000 / jobs
                consume(client, "waiting", jobs)
                client.call({"cmd": "Ping"})
                time.sleep(1.0)
                print(
                    f"waiting ({mode}): {jobs:,} jobs; RSS empty {mib(empty)}, with the jobs"
                    f" {mib(full)} ({mib(int(per_million))} per million), after all were"
                    f" acknowledged {mib(broker.rss())}"
                )
        finally:
            broker.stop()
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)


def consume(client: Client, queue: str, jobs: int) -> None:
    """PULLB and ACKB `jobs` jobs, BATCH at a time."""
    left = jobs
    while left:
        reply = client.call({"cmd": "PULLB", "queue": queue, "count": min(BATCH, left)})
        ids = [job.id for job in reply.jobs or ()]
        if not ids:
            raise RuntimeError(f"PULLB found no job with {left} left")
        client.call({"cmd": "ACKB", "ids": ids})
        left -= len(ids)


def removals(jobs: int, data_dir: Path) -> None:
    """SQLite: Drain and Obliterate of `jobs` jobs against a Ping, and an unbounded GetJobs."""
    broker = Broker(data_dir)
    broker.start()
    try:
        with broker.client() as client:
            for command in ("Drain", "Obliterate"):
                push(client, "big", jobs)
                pinger = Pinger(broker)
                pinger.start()
                seconds, _ = timed(client, {"cmd": command, "queue": "big"})
                print(
                    f"removals (sqlite): {command} of {jobs} jobs {seconds:.2f} s, "
                    f"slowest concurrent Ping {pinger.finish() * 1000:.0f} ms"
                )
            push(client, "big", jobs)
            raw = RawCall(broker)
            seconds, size = raw.call({"cmd": "GetJobs", "queue": "big", "limit": 10**12})
            print(f"  GetJobs limit 1e12: {seconds:.2f} s, reply {size / 2**20:.1f} MiB")
    finally:
        broker.stop()


class RawCall:
    """One call whose reply is only measured, not decoded."""

    def __init__(self, broker: Broker) -> None:
        self.client = broker.client()

    def call(self, message: dict[str, Any]) -> tuple[float, int]:
        """Seconds and reply bytes of one call."""
        sock = self.client._sock
        body = msgspec.msgpack.encode({**message, "reqId": "1"})
        started = time.perf_counter()
        sock.sendall(len(body).to_bytes(4, "big") + body)
        header = b""
        while len(header) < 4:
            header += sock.recv(4 - len(header))
        size = int.from_bytes(header, "big")
        left = size
        while left:
            left -= len(sock.recv(min(left, 1 << 20)))
        return time.perf_counter() - started, size


def startup(jobs: int, data_dir: Path) -> None:
    """SQLite: restart on `jobs` stored jobs; port, readiness and memory timeline."""
    broker = Broker(data_dir)
    broker.start()
    with broker.client() as client:
        push(client, "stored", jobs)
    live_rss = broker.rss()
    broker.stop()
    broker.launch()
    started = time.perf_counter()
    marks: dict[str, float] = {}
    with RssSampler(broker.pid) as sampler:
        while "tcp" not in marks:
            now = time.perf_counter() - started
            if "http" not in marks and port_accepts(LOOPBACK, broker.http_port):
                marks["http"] = now
            if "http" in marks and "ready" not in marks and ready(broker.http_port):
                marks["ready"] = now
            if port_accepts(LOOPBACK, broker.port):
                marks["tcp"] = now
                marks.setdefault("ready", now if ready(broker.http_port) else float("nan"))
            time.sleep(0.05)
        peak = sampler.stop()
    print(
        f"startup (sqlite) with {jobs} stored jobs: HTTP accepts at "
        f"{marks.get('http', float('nan')):.2f} s, /ready 200 at {marks['ready']:.2f} s, "
        f"TCP accepts at {marks['tcp']:.2f} s; peak RSS {mib(peak)} "
        f"(after pushing them live: {mib(live_rss)})"
    )
    broker.stop()


def ready(http_port: int) -> bool:
    """Whether GET /ready answers 200."""
    try:
        conn = http.client.HTTPConnection(LOOPBACK, http_port, timeout=5)
        conn.request("GET", "/ready")
        status = conn.getresponse().status
        conn.close()
    except OSError:
        return False
    return status == 200


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurements chosen with --only (all by default)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--cycle-jobs", type=int, default=200_000)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--only", default="drain-cycles,removals,startup")
    args = parser.parse_args(argv)
    chosen = args.only.split(",")
    if "drain-cycles" in chosen:
        drain_cycles(args.cycles, args.cycle_jobs)
    if "waiting" in chosen:
        waiting(args.jobs)
    for name, measure in (("removals", removals), ("startup", startup)):
        if name in chosen:
            data_dir = Path(tempfile.mkdtemp(prefix="trioq-memory-"))
            try:
                measure(args.jobs, data_dir)
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
