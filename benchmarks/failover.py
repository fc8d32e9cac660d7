"""Failover time on PostgreSQL: from kill -9 of the active broker to the first `ok` on the new one.

    python -m benchmarks.failover [--jobs 10000,100000,1000000] [--ttl 2]

For each size: a private PostgreSQL server (fsync on), a fresh schema filled with that many
waiting jobs through broker A, broker B started as its standby; A is SIGKILLed, and a client on
B's address sends PUSH until one is answered `ok`. The time splits into the wait for the dead
lease to expire (at most the TTL, plus B's poll interval) and B's restore of the stored jobs.
Not part of the test suite: it takes minutes at 1M jobs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.broker import BrokerProcess, FrameSocket
from tests.support.postgres import free_port, start_private_server

BATCH = 1000  # jobs per PUSHB while filling
WINDOW = 16  # PUSHB requests in flight while filling


def fill(address: tuple[str, int], jobs: int) -> None:
    """Push `jobs` waiting jobs (about 60 bytes of data each), pipelined PUSHB batches."""
    with FrameSocket(address, timeout=120) as client:
        sent = answered = 0
        batches = (jobs + BATCH - 1) // BATCH
        while answered < batches:
            while sent < batches and sent - answered < WINDOW:
                size = min(BATCH, jobs - sent * BATCH)
                items = [{"data": {"n": sent * BATCH + i, "pad": "x" * 40}} for i in range(size)]
                client.send({"cmd": "PUSHB", "reqId": f"b{sent}", "queue": "bench", "jobs": items})
                sent += 1
            reply = client.receive()
            assert reply["ok"] is True, reply
            answered += 1


def first_ok(address: tuple[str, int]) -> float:
    """Seconds (monotonic) at which a PUSH through `address` is first answered ok."""
    while True:
        try:
            with FrameSocket(address, timeout=300) as client:
                if client.call("PUSH", queue="after", data={})["ok"] is True:
                    return time.monotonic()
        except (OSError, EOFError):
            time.sleep(0.01)  # the forwarded connection closed at the takeover: reconnect


def measure(url: str, jobs: int, ttl: float, workdir: Path) -> tuple[float, float]:
    """(seconds from kill to the first ok, seconds B spent restoring) for one size."""
    schema = f"failover_{jobs}"
    options = ("--lease-ttl-s", str(ttl))
    ports = free_port(), free_port()
    brokers = []
    try:
        for n, port in enumerate(ports):
            brokers.append(
                BrokerProcess(
                    *options,
                    "--http-port",
                    str(port),
                    stderr_path=workdir / f"{schema}-{n}.err",
                    postgres=(url, schema),
                )
            )
            if n == 0:
                fill(brokers[0].address, jobs)
        health = f"http://127.0.0.1:{ports[1]}/health"
        while httpx.get(health, timeout=5).json().get("role") != "standby":
            time.sleep(0.05)
        killed_at = time.monotonic()
        brokers[0].kill_hard()
        answered_at = first_ok(brokers[1].address)
        return answered_at - killed_at, restore_seconds(brokers[1])
    finally:
        for broker in brokers:
            broker.stop()


def restore_seconds(broker: BrokerProcess) -> float:
    """From B's log line `active: serving (epoch N), restored in X s (K jobs)`."""
    for line in broker.stderr_text().splitlines():
        if "restored in" in line:
            return float(line.split("restored in ")[1].split()[0])
    return float("nan")


def main() -> None:
    """Measure and print one row per size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="10000,100000,1000000")
    parser.add_argument("--ttl", type=float, default=2.0, help="--lease-ttl-s of both brokers")
    args = parser.parse_args()
    server = start_private_server(fsync=True)
    try:
        with tempfile.TemporaryDirectory() as workdir:
            print("| stored jobs | kill -> first ok (s) | of which restore (s) | lease TTL (s) |")
            print("|---:|---:|---:|---:|")
            for jobs in (int(n) for n in args.jobs.split(",")):
                took, restore = measure(server.url, jobs, args.ttl, Path(workdir))
                print(f"| {jobs:,} | {took:.2f} | {restore:.2f} | {args.ttl:g} |", flush=True)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
