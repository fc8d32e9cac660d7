"""Hostile and heavy clients against a real `trioq serve`: memory held and latency seen.

    python -m benchmarks.hostile [--source DIR] [--seconds S] SCENARIO...

Each scenario starts its own broker on 127.0.0.1 (from the project in DIR, default the current
one), runs its clients for a bounded time and prints one line of figures, with the broker's RSS
(psutil) where memory is the question. Scenarios:

  fairness     sqlite mode: 400 connections each pipelining 8 PUSHes in a loop; how long until
               every one of them was answered once (accept starvation), how many were still
               waiting after 2 s, and the round trip of a fresh client's connect + Ping.
  ping-flood   one client pipelining Ping without reading replies.
  unauth-push  --auth-token set; one client pipelining PUSH without Auth and without reading.
  partial      16 connections each announcing a 60 MB frame and sending 59 MB of it.
  partial-auth the same against a broker with --auth-token (the clients never authenticate).
  slow         300 clients sending 1 byte a second; how many the broker closed.
  auth-guess   one connection sending wrong tokens as fast as it can; attempts answered.
  big-pushb    sqlite mode: one PUSHB of 200,000 jobs (a 4 MB frame); the worst round trip
               of a fresh client's connect + Ping (one every 10 ms) until its reply, and the
               broker's RSS peak over the run (sampled every 5 ms).
  big-ackb     the same for one ACKB of 200,000 leased jobs (pushed and pulled untimed first).
  big-drain    the same for a Drain of a queue of 200,000 jobs (pushed untimed first).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import psutil
import trio

_encode = msgspec.msgpack.Encoder().encode
MIB = 1024 * 1024


def frame(message: dict[str, Any]) -> bytes:
    """One length-prefixed MessagePack frame."""
    payload = _encode(message)
    return len(payload).to_bytes(4, "big") + payload


@contextlib.contextmanager
def broker(source: str, *options: str) -> Iterator[tuple[int, psutil.Process]]:
    """Run `trioq serve` from `source` on a free port; yields (port, process)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "broker", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--http-port", "0", "--data-dir", data, *options]
        process = subprocess.Popen(
            command, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert "listening" in line, line
            yield port, psutil.Process(process.pid)
        finally:
            process.terminate()
            process.wait(10)


def rss_mib(process: psutil.Process) -> float:
    """The broker's resident memory in MiB."""
    return process.memory_info().rss / MIB


async def connect(port: int) -> trio.SocketStream:
    """A TCP connection to the broker."""
    return await trio.open_tcp_stream("127.0.0.1", port)


async def read_replies(stream: trio.SocketStream, count: int) -> None:
    """Read until `count` whole replies arrived (only their framing is looked at)."""
    buffer = b""
    while count:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
            buffer = buffer[4 + int.from_bytes(buffer[:4], "big") :]
            count -= 1


async def busy_load(port: int, seconds: float) -> None:
    """400 connections, each pipelining 8 PUSHes and reading the replies, in a loop; prints
    when every connection has had its first answer (run in its own process)."""
    push = b"".join(frame({"cmd": "PUSH", "queue": "fair", "data": {"i": i}}) for i in range(8))
    first_reply: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    pushed = 0

    async def busy() -> None:
        nonlocal pushed
        stream = await connect(port)
        answered = False
        while time.perf_counter() < deadline:
            await stream.send_all(push)
            await read_replies(stream, 8)
            pushed += 8
            if not answered:
                first_reply.append(time.perf_counter() - start)
                answered = True
        await stream.aclose()

    async def report_at_2s() -> None:
        await trio.sleep(2)
        print(f"not yet answered at 2 s: {400 - len(first_reply)};", flush=True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(report_at_2s)
        for _ in range(400):
            nursery.start_soon(busy)
    served = f"{max(first_reply):.2f} s" if len(first_reply) == 400 else "never"
    print(f"all 400 answered once after {served};", flush=True)
    print(f"{pushed / seconds:.0f} PUSH/s", flush=True)


def probe(port: int) -> float:
    """A fresh client's connect + Ping round trip, in ms (blocking sockets, own process)."""
    began = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(frame({"cmd": "Ping", "reqId": 1}))
        header = sock.recv(4, socket.MSG_WAITALL)
        sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL)
    return (time.perf_counter() - began) * 1000


def fairness(port: int, seconds: float) -> str:
    """Busy load in a child process; fresh Ping probes from this one every 100 ms."""
    command = [sys.executable, "-m", "benchmarks.hostile", "--load-port", str(port)]
    load = subprocess.Popen(
        [*command, "--seconds", str(seconds), "load"], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.5)  # let the load connect first
    latencies = []
    while load.poll() is None and len(latencies) < (seconds - 1) * 10:
        latencies.append(probe(port))
        time.sleep(0.1)
    output, _ = load.communicate()
    return (
        " ".join(output.split("\n")).strip()
        + f"; fresh connect+Ping ms: median {statistics.median(latencies):.1f},"
        f" max {max(latencies):.1f}"
        f" ({len(latencies)} probes)"
    )


async def flood(port: int, seconds: float, message: dict[str, Any]) -> str:
    """Pipeline `message` without reading any reply, for `seconds` or until the broker closes
    the connection; says which."""
    stream = await connect(port)
    data = frame(message) * 1000
    began = time.perf_counter()
    with trio.move_on_after(seconds):
        try:
            while True:
                await stream.send_all(data)
        except trio.BrokenResourceError:
            return f"; closed by the broker after {time.perf_counter() - began:.0f} s"
    await stream.aclose()
    return ""


async def partial(port: int, seconds: float) -> None:
    """16 connections announce 60 MB and send 59 MB of it, then hold."""
    chunk = b"\0" * MIB

    async def one() -> None:
        stream = await connect(port)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all((60_000_000).to_bytes(4, "big"))
            for _ in range(59):
                await stream.send_all(chunk[:1_000_000])
            await trio.sleep(seconds)

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(one)


async def slow(port: int, seconds: float) -> str:
    """300 clients sending a 1000-byte frame at 1 byte a second; count those closed."""
    closed = 0
    data = (1000).to_bytes(4, "big") + b"\0" * 1000

    async def one() -> None:
        nonlocal closed
        stream = await connect(port)
        try:
            for byte in data:
                await stream.send_all(bytes([byte]))
                with trio.move_on_after(1):
                    if await stream.receive_some(1) == b"":
                        raise trio.BrokenResourceError
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed += 1

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(300):
                nursery.start_soon(one)
    return f"closed by the broker after {seconds:.0f} s: {closed} of 300"


async def auth_guess(port: int, seconds: float) -> str:
    """Wrong tokens as fast as possible on one connection (reconnecting when closed)."""
    answered = 0
    guess = frame({"cmd": "Auth", "token": "wrong"})
    with trio.move_on_after(seconds):
        while True:
            stream = await connect(port)
            try:
                while True:
                    await stream.send_all(guess)
                    await read_replies(stream, 1)
                    answered += 1
            except (EOFError, trio.BrokenResourceError):
                await stream.aclose()
    return f"wrong tokens answered: {answered} in {seconds:.0f} s ({answered / seconds:.0f}/s)"


BIG_BATCH = 200_000


def call(sock: socket.socket, message: dict[str, Any]) -> Any:
    """Send one command on a blocking socket and read its reply."""
    sock.sendall(frame(message))
    size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
    return msgspec.msgpack.decode(sock.recv(size, socket.MSG_WAITALL))


class Watch:
    """While a command runs: a fresh client's connect + Ping every 10 ms, and the broker's
    RSS every 5 ms, each from a thread of its own."""

    def __init__(self, port: int, process: psutil.Process) -> None:
        self.port = port
        self.process = process
        self.pings: list[float] = []
        self.before = self.peak = rss_mib(process)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ping), threading.Thread(target=self._rss)]

    def _ping(self) -> None:
        while not self._stop.is_set():
            self.pings.append(probe(self.port))
            time.sleep(0.01)

    def _rss(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.process))
            time.sleep(0.005)

    def __enter__(self) -> Watch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def summary(self) -> str:
        """The Ping figures and the RSS peak."""
        pings = self.pings or [0.0]
        return (
            f"fresh connect+Ping ms: median {statistics.median(pings):.1f},"
            f" max {max(pings):.1f} ({len(self.pings)} probes);"
            f" RSS {self.before:.0f} MiB before, peak +{self.peak - self.before:.0f} MiB"
        )


def big_batch(source: str, kind: str) -> str:
    """One large command (`pushb`, `ackb` or `drain` of BIG_BATCH jobs) against a fresh
    SQLite-mode broker, watched (see Watch); what it needs first is set up untimed."""
    jobs = [{"name": "job", "data": {"i": n}} for n in range(BIG_BATCH)]
    push = {"cmd": "PUSHB", "queue": "big", "jobs": jobs, "reqId": 1}
    with broker(source) as (port, process), socket.create_connection(("127.0.0.1", port)) as sock:
        message = push
        if kind in ("ackb", "drain"):
            assert call(sock, push)["ok"]
        if kind == "ackb":
            ids: list[str] = []
            tokens: list[str] = []
            while len(ids) < BIG_BATCH:
                reply = call(sock, {"cmd": "PULLB", "queue": "big", "count": 1000, "owner": "w"})
                ids += [job["id"] for job in reply["jobs"]]
                tokens += reply["tokens"]
            message = {"cmd": "ACKB", "ids": ids, "tokens": tokens, "reqId": 2}
        elif kind == "drain":
            message = {"cmd": "Drain", "queue": "big", "reqId": 2}
        time.sleep(1)  # let the broker settle (a checkpoint, a collection)
        with Watch(port, process) as watch:
            began = time.perf_counter()
            reply = call(sock, message)
            took = time.perf_counter() - began
        assert reply["ok"], reply
    return f"reply after {took:.2f} s; {watch.summary()}"


SCENARIOS = {
    "big-pushb": lambda source, seconds: big_batch(source, "pushb"),
    "big-ackb": lambda source, seconds: big_batch(source, "ackb"),
    "big-drain": lambda source, seconds: big_batch(source, "drain"),
}
"""Scenarios that start their own broker: name -> (source, seconds) -> their line."""


def run(scenario: str, source: str, seconds: float) -> str:
    """Run one scenario against a fresh broker; returns its line of figures."""
    if scenario in SCENARIOS:
        return SCENARIOS[scenario](source, seconds)
    if scenario == "fairness":
        with broker(source) as (port, _process):
            return fairness(port, seconds)
    options = (
        ("--auth-token", "secret")
        if scenario in ("unauth-push", "auth-guess", "partial-auth")
        else ()
    )
    with broker(source, "--memory", *options) as (port, process):
        before = rss_mib(process)
        closed = ""
        if scenario == "ping-flood":
            closed = trio.run(flood, port, seconds, {"cmd": "Ping", "reqId": 1})
        elif scenario == "unauth-push":
            push = {"cmd": "PUSH", "queue": "q", "data": {"x": 1}}
            closed = trio.run(flood, port, seconds, push)
        elif scenario in ("partial", "partial-auth"):
            trio.run(partial, port, seconds)
        elif scenario == "slow":
            return trio.run(slow, port, seconds)
        elif scenario == "auth-guess":
            return trio.run(auth_guess, port, seconds)
        after = rss_mib(process)
        return f"RSS {before:.0f} MiB at start, {after:.0f} MiB after {seconds:.0f} s{closed}"


def main() -> None:
    """Parse the command line and run the scenarios one after another."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=os.getcwd(), help="project directory of the broker")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each scenario runs")
    parser.add_argument("--load-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()
    if args.load_port:  # the child process of `fairness`
        trio.run(busy_load, args.load_port, args.seconds)
        return
    for scenario in args.scenarios:
        print(f"{scenario}: {run(scenario, args.source, args.seconds)}", flush=True)


if __name__ == "__main__":
    main()
