"""How late delayed jobs start: push N delayed jobs, pull them as they come due, measure.

    python -m benchmarks.lateness --host 127.0.0.1 --port 6789 [--jobs 10000]
    python -m benchmarks.lateness --compare [--modes memory,sqlite]

Lateness of a job = the moment a worker's long-poll PULLB hands it over (the client's clock)
minus its `runAt` (the server's clock; both run on this machine). The jobs' run times are
spread over a few seconds, and a second connection keeps the broker busy with PUSH, PULL and
ACK on another queue meanwhile ("under load"). Prints median, p99 and max in ms.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from .servers import each_server

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(ext_hook=lambda code, data: None).decode


class Conn:
    """A minimal blocking request/response connection."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        body = _encode(message)
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        size = struct.unpack(">I", self._read(4))[0]
        reply: dict[str, Any] = _decode(self._read(size))
        if not reply.get("ok"):
            raise RuntimeError(f"{message['cmd']}: {reply.get('error')}")
        return reply

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def background_load(host: str, port: int, stop: threading.Event) -> None:
    """PUSH, PULL and ACK on another queue until told to stop."""
    conn = Conn(host, port)
    queue = f"load-{uuid.uuid4().hex[:8]}"
    try:
        while not stop.is_set():
            conn.call({"cmd": "PUSH", "queue": queue, "name": "load", "data": {"x": 1}})
            job = conn.call({"cmd": "PULL", "queue": queue})["job"]
            conn.call({"cmd": "ACK", "id": job["id"]})
    finally:
        conn.close()


def measure(host: str, port: int, jobs: int, spread_ms: float, lead_ms: float) -> list[float]:
    """Push `jobs` delayed jobs and return how late each one was handed to the worker (ms)."""
    queue = f"late-{uuid.uuid4().hex[:8]}"
    producer, worker = Conn(host, port), Conn(host, port)
    stop = threading.Event()
    load = threading.Thread(target=background_load, args=(host, port, stop), daemon=True)
    try:
        for start in range(0, jobs, 100):
            batch = [
                {"name": "late", "data": i, "delay": lead_ms + spread_ms * i / jobs}
                for i in range(start, min(start + 100, jobs))
            ]
            producer.call({"cmd": "PUSHB", "queue": queue, "jobs": batch})
        load.start()
        lateness: list[float] = []
        deadline = time.time() + (lead_ms + spread_ms) / 1000 + 60
        while len(lateness) < jobs and time.time() < deadline:
            reply = worker.call({"cmd": "PULLB", "queue": queue, "count": 100, "timeout": 1000})
            now_ms = time.time() * 1000
            lateness += [now_ms - job["runAt"] for job in reply["jobs"]]
            if reply["jobs"]:
                worker.call({"cmd": "ACKB", "ids": [job["id"] for job in reply["jobs"]]})
        return lateness
    finally:
        stop.set()
        if load.is_alive():
            load.join(timeout=10)
        producer.close()
        worker.close()


def summary(label: str, lateness: list[float], jobs: int) -> str:
    """One line: median, p99 and max lateness."""
    if len(lateness) < jobs:
        return f"{label:<28} only {len(lateness)} of {jobs} jobs arrived"
    ordered = sorted(lateness)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return f"{label:<28} median {median:7.2f} ms   p99 {p99:7.2f} ms   max {ordered[-1]:7.2f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lateness")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--compare", action="store_true", help="start trioq and the reference")
    parser.add_argument("--modes", default="memory", help="with --compare: memory,sqlite")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--spread-ms", type=float, default=3000)
    parser.add_argument("--lead-ms", type=float, default=1000)
    args = parser.parse_args(argv)
    print(f"{args.jobs} delayed jobs due over {args.spread_ms:.0f} ms, with background load")
    if not args.compare:
        if args.port is None:
            parser.error("--port is required without --compare")
        lateness = measure(args.host, args.port, args.jobs, args.spread_ms, args.lead_ms)
        print(summary(f"{args.host}:{args.port}", lateness, args.jobs))
        return 0
    for label, server in each_server(args.modes.split(",")):
        lateness = measure(server.host, server.port, args.jobs, args.spread_ms, args.lead_ms)
        print(summary(label, lateness, args.jobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
