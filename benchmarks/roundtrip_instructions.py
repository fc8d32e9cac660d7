"""Instructions a server process spends per sequential round trip, counted by callgrind.

    python -m benchmarks.roundtrip_instructions [--modes memory,sqlite] [--baseline DIR]
                                                [--small 300] [--large 1300]

The sequential row of `benchmarks.loadgen` measures one connection's round trip in wall time,
against the do-nothing Trio server (`benchmarks/nullserver.py`) as the floor. On a shared machine
that ratio moves with the load; this counts what the server itself executes instead, so the
same comparison repeats within a fraction of a percent. Each server (the null server, then
trioq in each mode, then the trioq checkout in `--baseline DIR` if given) runs under
`valgrind --tool=callgrind`, serves one connection that sends PUSHes one at a time (each waits
for its reply), and is stopped. The count per request is the difference between a run of
`--large` and one of `--small` requests, divided by the difference, so start-up and shutdown
cancel out. Kernel time (the system calls themselves) is not counted.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile

import msgspec

HEADER = struct.Struct(">I")
START_TIMEOUT_S = 300  # python under callgrind starts slowly


def server_command(mode: str, data_dir: str) -> list[str]:
    """How to start the server of `mode` (null, memory or sqlite) on a port chosen later."""
    if mode == "null":
        return ["-m", "benchmarks.nullserver"]
    store = ["--memory"] if mode == "memory" else ["--data-dir", data_dir]
    return ["-m", "broker", "serve", "--http-port", "0", *store]


def round_trips(port: int, count: int) -> None:
    """Send `count` PUSHes one at a time, each after the reply to the one before."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        for n in range(count):
            body = msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": n, "reqId": n})
            sock.sendall(HEADER.pack(len(body)) + body)
            (size,) = HEADER.unpack(reader.read(4))
            reply = msgspec.msgpack.decode(reader.read(size))
            assert reply.get("ok") and reply.get("reqId") == n, reply


def count_instructions(root: str, mode: str, count: int) -> int:
    """Instructions callgrind counts in a server of `mode` from `root` serving `count` PUSHes."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        port = free_port()
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                   *server_command(mode, scratch), "--port", str(port)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": root, "PYTHONHASHSEED": "0"}
        server = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            wait_listening(server)
            round_trips(port, count)
        finally:
            server.send_signal(signal.SIGINT)
            _, errors = server.communicate(timeout=START_TIMEOUT_S)
    found = re.search(r"Collected : (\d+)", errors)
    if found is None:
        raise RuntimeError(f"callgrind printed no count for {mode} in {root}: {errors[-500:]}")
    return int(found.group(1))


def wait_listening(server: subprocess.Popen[str]) -> None:
    """Read the server's output until it says it listens (both servers print such a line)."""
    assert server.stdout is not None
    for line in server.stdout:
        if "listening" in line:
            return
    raise RuntimeError("the server ended before it listened")


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    """Entry point: print one row per server, with its ratio to the null server."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrip_instructions")
    parser.add_argument("--modes", default="memory,sqlite")
    parser.add_argument("--baseline", help="also count the trioq checkout in this directory")
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--large", type=int, default=1300)
    args = parser.parse_args()
    here = os.getcwd()
    servers = [("null server", here, "null")]
    for mode in args.modes.split(","):
        servers.append((f"trioq {mode}", here, mode))
        if args.baseline:
            servers.append((f"trioq before {mode}", os.path.abspath(args.baseline), mode))
    print("| server | instructions per round trip | / null server |")
    print("|---|---:|---:|")
    floor = None
    for label, root, mode in servers:
        small = count_instructions(root, mode, args.small)
        large = count_instructions(root, mode, args.large)
        per_request = (large - small) / (args.large - args.small)
        floor = floor or per_request
        print(f"| {label} | {per_request:,.0f} | {per_request / floor:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
