"""Memory and connection pressure on the HTTP port: stalled large POSTs and slow clients.

    python -m benchmarks.http_pressure [--root DIR] [--posts 20] [--slow 300] [--wait 40]

Starts `python -m broker serve --memory` from `--root` (default: this checkout; point it at an
older checkout to compare), then:

1. stalled POSTs: `--posts` connections each declare an 11 MiB body, send all but 0.1 MiB of
   it (10.9 MiB), and stop. Reports the broker's RSS growth and how many were answered/closed.
2. slow clients: `--slow` connections each send one byte of a request head per second for
   `--wait` seconds. Reports how many the broker closed.

Prints one line per scenario. Needs psutil (the `bench` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from .servers import free_port, port_accepts

MIB = 1024 * 1024
BODY = 11 * MIB
SENT = BODY - MIB // 10


def start_broker(root: Path, http_port: int) -> subprocess.Popen[bytes]:
    """A memory-mode broker from `root` with its HTTP port on `http_port`."""
    argv = [sys.executable, "-m", "broker", "serve", "--memory", "--host", "127.0.0.1"]
    argv += ["--port", str(free_port()), "--http-port", str(http_port)]
    process = subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not port_accepts("127.0.0.1", http_port):
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("the broker did not start")
        time.sleep(0.05)
    return process


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MIB


def closed_by_server(sockets: list[socket.socket]) -> int:
    """How many sockets the server answered or closed (readable now)."""
    readable, _, _ = select.select(sockets, [], [], 0)
    return len(readable)


def stalled_posts(pid: int, port: int, count: int) -> str:
    before = rss_mib(pid)
    sockets = []
    chunk = b"x" * MIB
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(True)
        sock.settimeout(30)
        head = f"POST /queues/q/jobs HTTP/1.1\r\nhost: b\r\ncontent-length: {BODY}\r\n\r\n"
        try:
            sock.sendall(head.encode())
            sent = 0
            while sent < SENT:
                part = chunk[: min(len(chunk), SENT - sent)]
                sock.sendall(part)
                sent += len(part)
        except OSError:
            pass  # the server answered (503) and closed: that is the point
        sockets.append(sock)
    time.sleep(1)
    peak = rss_mib(pid)
    answered = closed_by_server(sockets)
    for sock in sockets:
        sock.close()
    return (
        f"stalled POSTs: {count} x 10.9 of 11 MiB: RSS {before:.0f} -> {peak:.0f} MiB "
        f"(+{peak - before:.0f}); answered or closed by the broker: {answered}/{count}"
    )


def slow_clients(pid: int, port: int, count: int, wait_s: float) -> str:
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    head = b"GET /health HTTP/1.1\r\nhost: slow\r\nx-padding: " + b"a" * 1000
    start = time.monotonic()
    second = 0
    while time.monotonic() - start < wait_s:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.send(head[second : second + 1])
        second += 1
        time.sleep(1)
    closed = closed_by_server(sockets)
    rss = rss_mib(pid)
    for sock in sockets:
        sock.close()
    return (
        f"slow clients: {count} at 1 byte/s for {wait_s:.0f} s: closed by the broker "
        f"{closed}/{count}; RSS {rss:.0f} MiB"
    )


def main() -> None:
    """Run both scenarios against a fresh broker."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--posts", type=int, default=20)
    parser.add_argument("--slow", type=int, default=300)
    parser.add_argument("--wait", type=float, default=40.0)
    args = parser.parse_args()
    port = free_port()
    broker = start_broker(args.root, port)
    try:
        print(stalled_posts(broker.pid, port, args.posts), flush=True)
        print(slow_clients(broker.pid, port, args.slow, args.wait), flush=True)
        print(f"broker still running: {broker.poll() is None}")
    finally:
        broker.terminate()
        broker.wait(timeout=10)


if __name__ == "__main__":
    main()
