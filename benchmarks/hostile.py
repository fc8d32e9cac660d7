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
  unread-getjobs    1,000 small jobs; 20 TCP connections pipelining `GetJobs` (all
               1,000 jobs, ~750 kB a reply) and never reading: the broker's RSS, and a fresh
               client's connect + Ping meanwhile.
  unread-getjobs-ws the same over 20 WebSockets (binary MessagePack messages).
  queues-emptied  300,000 queues of one job each, every job cancelled, twice over (new names
               the second time): RSS after each round, and how many queues are still listed.
               The broker gets TRIOQ_MAX_QUEUES=1000000 (a build without the cap ignores it).
  pull-fresh   100,000 PULLs with timeout 0, each on a name never used: RSS before and after.
  deep-chain   a chain of 100,000 jobs (PUSHB), each a child of the one before it with
               failParentOnFailure; its leaf is pulled and failed, then the queue obliterated:
               the time and the outcome of each.
  restart-1m   sqlite mode, fixed ports: 1,000,000 jobs pushed (PUSHB), kill -9, the same
               command again; seconds from the new process's start until the TCP port answers a
               Ping and /health answers, until a PULL sent at once is served, and the broker's
               RSS before the kill and once served (`--jobs` changes the count).
  restart-same postgres mode (a private server), fixed ports, 32 clients pushing in a loop
               (reconnecting when closed): kill -9, the same command again; seconds from the
               new process's start until its port accepts, until the first and the last client
               is served again; the new broker's open files at most (sampled every 50 ms for
               `--seconds`) and the error replies the clients heard.
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
        store = [] if "--memory" in options else ["--data-dir", data]  # the two exclude each other
        command += ["--port", str(port), "--http-port", "0", *store, *options]
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


# -- replies nobody reads: unread-getjobs, unread-getjobs-ws --------------------------------------

UNREAD_CONNECTIONS = 20
UNREAD_JOBS = 1000
GET_JOBS = {"cmd": "GetJobs", "queue": "unread", "state": "waiting", "limit": UNREAD_JOBS}


async def fill_unread_queue(port: int) -> int:
    """Push UNREAD_JOBS small jobs (~760 bytes each in a GetJobs reply); returns the size of
    one GetJobs reply."""
    stream = await connect(port)
    jobs = [{"name": "n", "data": {"i": i}} for i in range(UNREAD_JOBS)]
    await stream.send_all(frame({"cmd": "PUSHB", "queue": "unread", "jobs": jobs}))
    await read_replies(stream, 1)
    await stream.send_all(frame(GET_JOBS))
    header = await stream.receive_some(4)
    size = int.from_bytes(header[:4], "big")
    await stream.aclose()
    return size


async def websocket(port: int) -> trio.SocketStream:
    """A WebSocket on the broker's HTTP port (a raw upgrade: nothing reads it afterwards)."""
    stream = await connect(port)
    await stream.send_all(
        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive_some(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    return stream


def websocket_frame(payload: bytes) -> bytes:
    """One masked binary WebSocket frame (a client must mask; the key 0 leaves it as is)."""
    size = len(payload)
    header = bytes([0x82]) + (
        bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
    )
    return header + b"\0\0\0\0" + payload


async def unread_replies(port: int, http_port: int | None, seconds: float, process: Any) -> str:
    """UNREAD_CONNECTIONS clients pipelining GetJobs without reading (WebSockets when
    `http_port` is given) for `seconds`: the broker's RSS before, at its highest and at the
    end, and fresh connect + Ping round trips meanwhile (one after another)."""
    reply_size = await fill_unread_queue(port)
    before = peak = rss_mib(process)
    request = _encode(GET_JOBS)
    data = (frame(GET_JOBS) if http_port is None else websocket_frame(request)) * 100
    latencies: list[float] = []
    deadline = trio.current_time() + seconds

    async def hog() -> None:
        stream = await (connect(port) if http_port is None else websocket(http_port))
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                await stream.send_all(data)

    async def probes() -> None:
        while trio.current_time() < deadline:
            await trio.sleep(0.25)
            latencies.append(await trio.to_thread.run_sync(probe, port))

    async with trio.open_nursery() as hogs:
        for _ in range(UNREAD_CONNECTIONS):
            hogs.start_soon(hog)
        async with trio.open_nursery() as watch:
            watch.start_soon(probes)
            while trio.current_time() < deadline:
                peak = max(peak, rss_mib(process))
                await trio.sleep(0.1)
        held = rss_mib(process)  # the hogs are still connected
        hogs.cancel_scope.cancel()
    return (
        f"GetJobs reply {reply_size / 1000:.0f} kB; RSS {before:.0f} MiB before the"
        f" {UNREAD_CONNECTIONS} clients, peak {peak:.0f} MiB (+{peak - before:.0f}), {held:.0f}"
        f" MiB at the end; fresh connect+Ping ms: median {statistics.median(latencies):.1f},"
        f" max {max(latencies):.1f} ({len(latencies)} probes in {seconds:.0f} s)"
    )


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port: int = free.getsockname()[1]
        return port


def run_unread(scenario: str, source: str, seconds: float) -> str:
    """unread-getjobs over TCP, or over WebSockets (-ws)."""
    http_port = free_port() if scenario.endswith("-ws") else None
    # SQLite mode (the default): `broker` always passes a data directory, --memory refuses one.
    options = () if http_port is None else ("--http-port", str(http_port))
    with broker(source, *options) as (port, process):
        return trio.run(unread_replies, port, http_port, seconds, process)
class Caller:
    """A blocking client that pipelines commands in windows and reads every reply."""

    WINDOW = 1000

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buffer = b""

    def _reply(self) -> Any:
        while len(self.buffer) < 4 or len(self.buffer) < 4 + int.from_bytes(self.buffer[:4], "big"):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        size = int.from_bytes(self.buffer[:4], "big")
        body, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
        return msgspec.msgpack.decode(body)

    def many(self, messages: list[dict[str, Any]]) -> list[Any]:
        """Send `messages` WINDOW at a time; returns the replies in order."""
        replies: list[Any] = []
        for at in range(0, len(messages), self.WINDOW):
            window = messages[at : at + self.WINDOW]
            self.sock.sendall(b"".join(frame(message) for message in window))
            replies += [self._reply() for _ in window]
        return replies

    def call(self, **message: Any) -> Any:
        return self.many([message])[0]


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Run the block with extra environment variables (a broker started in it inherits them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def queues_emptied(source: str, count: int = 300_000) -> str:
    """`count` queues of one job each, every job cancelled; twice (the second round on new
    names). RSS after each round and how many queues are still listed 3 s after it."""
    figures = []
    with environment(TRIOQ_MAX_QUEUES="1000000"), broker(source, "--memory") as (port, process):
        caller = Caller(port)
        figures.append(f"RSS {rss_mib(process):.0f} MiB at start")
        for round_ in (1, 2):
            names = [f"r{round_}q{n}" for n in range(count)]
            pushes = [{"cmd": "PUSH", "queue": q, "jobId": q, "data": 1} for q in names]
            pushed = sum(reply.get("ok") is True for reply in caller.many(pushes))
            full = rss_mib(process)
            cancels = [{"cmd": "Cancel", "id": q} for q in names]
            cancelled = sum(reply.get("ok") is True for reply in caller.many(cancels))
            time.sleep(3)
            listed = len(caller.call(cmd="ListQueues")["queues"])
            figures.append(
                f"round {round_}: {pushed} pushed, RSS {full:.0f} MiB; {cancelled} cancelled,"
                f" 3 s later RSS {rss_mib(process):.0f} MiB, {listed} queues listed"
            )
    return "; ".join(figures)


def pull_fresh(source: str, count: int = 100_000) -> str:
    """`count` PULLs with timeout 0, each on a new name: RSS before and after."""
    with broker(source, "--memory") as (port, process):
        caller = Caller(port)
        before = rss_mib(process)
        pulls = [{"cmd": "PULL", "queue": f"fresh{n}", "timeout": 0} for n in range(count)]
        empty = sum(reply.get("job", 1) is None for reply in caller.many(pulls))
        listed = len(caller.call(cmd="ListQueues")["queues"])
        return (
            f"{empty} of {count} answered empty; RSS {before:.0f} MiB before,"
            f" {rss_mib(process):.0f} MiB after; {listed} queues listed"
        )


def deep_chain(source: str, depth: int = 100_000) -> str:
    """A chain `depth` jobs deep with failParentOnFailure: fail its leaf, then obliterate."""
    items = []
    for k in range(depth):
        item: dict[str, Any] = {"customId": f"c{k}", "data": k, "failParentOnFailure": True}
        if k:
            item["parentId"] = f"c{k - 1}"
        if k < depth - 1:
            item["dependsOn"] = [f"c{k + 1}"]
            item["childrenIds"] = [f"c{k + 1}"]
        items.append(item)
    with broker(source, "--memory", "--keep-failed", str(2 * depth)) as (port, process):
        caller = Caller(port)
        began = time.perf_counter()
        pushed = caller.call(cmd="PUSHB", queue="chain", jobs=items)
        push_s = time.perf_counter() - began
        leaf = caller.call(cmd="PULL", queue="chain")["job"]["id"]
        began = time.perf_counter()
        failed = caller.call(cmd="FAIL", id=leaf, error="boom", unrecoverable=True)
        fail_s = time.perf_counter() - began
        counts = caller.call(cmd="GetJobCounts", queue="chain")["counts"]
        held = {state: n for state, n in counts.items() if n}
        began = time.perf_counter()
        obliterated = caller.call(cmd="Obliterate", queue="chain")
        gone_s = time.perf_counter() - began
        left = sum(caller.call(cmd="GetJobCounts", queue="chain")["counts"].values())
        return (
            f"PUSHB of {depth}: {pushed.get('error') or 'ok'} in {push_s:.1f} s;"
            f" FAIL of the leaf: {failed.get('error') or 'ok'} in {fail_s:.2f} s, then {held};"
            f" Obliterate: {obliterated.get('error') or 'ok'} in {gone_s:.2f} s, {left} jobs"
            f" left; RSS {rss_mib(process):.0f} MiB"
        )


ENGINE_SCENARIOS = {"queues-emptied": queues_emptied, "pull-fresh": pull_fresh,
                    "deep-chain": deep_chain}  # fmt: skip
"""Scenarios that start their own broker (issue 29's engine bounds)."""


# -- restarts (issue 29) --------------------------------------------------------------------------

RESTART_BATCH = 1000  # jobs per PUSHB while filling the store


def free_tcp_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BlockingFrames:
    """A blocking loopback connection that sends frames and reads whole replies."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def send(self, *messages: dict[str, Any]) -> None:
        """Send the messages in one write."""
        self.sock.sendall(b"".join(frame(message) for message in messages))

    def receive(self) -> Any:
        """The next reply, decoded."""
        while len(self.buffer) < 4 or len(self.buffer) < 4 + int.from_bytes(self.buffer[:4], "big"):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("closed by the broker")
            self.buffer += chunk
        size = int.from_bytes(self.buffer[:4], "big")
        payload, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
        return msgspec.msgpack.decode(payload)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


def fill(port: int, jobs: int, queue: str = "stored") -> None:
    """PUSHB `jobs` small jobs, four batches in flight."""
    client = BlockingFrames(port)
    window, sent, answered = 4, 0, 0
    while answered < jobs:
        while sent < jobs and sent - answered < window * RESTART_BATCH:
            count = min(RESTART_BATCH, jobs - sent)
            items = [{"name": "stored", "data": {"n": sent + i, "pad": "x" * 40}}
                     for i in range(count)]  # fmt: skip
            client.send({"cmd": "PUSHB", "queue": queue, "jobs": items})
            sent += count
        reply = client.receive()
        assert reply.get("ok"), reply
        answered += len(reply["ids"])
    client.close()


def http_answers(port: int, path: str) -> int | None:
    """The status of GET `path` on the HTTP port, or None while it does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            head = sock.recv(64)
    except OSError:
        return None
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None


def ping_answers(port: int) -> bool:
    """Whether a fresh connection's Ping is answered within a second."""
    try:
        client = BlockingFrames(port, timeout=1)
        try:
            client.send({"cmd": "Ping", "reqId": "p"})
            return bool(client.receive().get("ok"))
        finally:
            client.close()
    except (OSError, EOFError):
        return False


def serve_command(source: str, port: int, http_port: int, *options: str) -> list[str]:
    """`trioq serve` on fixed loopback ports (what a process supervisor runs again)."""
    command = [sys.executable, "-m", "broker", "serve", "--host", "127.0.0.1"]
    return [*command, "--port", str(port), "--http-port", str(http_port), *options]


def restart_timeline(
    command: list[str], source: str, port: int, http_port: int, queue: str
) -> tuple[subprocess.Popen[str], dict[str, float]]:
    """Start `command` and time, from its start: a Ping answered, /health answered, /ready 200,
    and a PULL sent as soon as the TCP port accepted served with a job."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=source, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )
    marks: dict[str, float] = {}
    puller: BlockingFrames | None = None
    deadline = started + 300
    while time.perf_counter() < deadline and process.poll() is None:
        now = time.perf_counter() - started
        if "ping" not in marks and ping_answers(port):
            marks["ping"] = time.perf_counter() - started
        if "health" not in marks and http_answers(http_port, "/health") == 200:
            marks["health"] = time.perf_counter() - started
        if "ready" not in marks and http_answers(http_port, "/ready") == 200:
            marks["ready"] = time.perf_counter() - started
        if puller is None:
            with contextlib.suppress(OSError):
                puller = BlockingFrames(port, timeout=300)
                puller.send({"cmd": "PULL", "queue": queue, "timeout": 0, "reqId": "pull"})
                marks["pull sent"] = now
        if puller is not None and "served" not in marks:
            puller.sock.settimeout(0.01)
            with contextlib.suppress(TimeoutError, BlockingIOError):
                reply = puller.receive()
                if reply.get("job"):
                    marks["served"] = time.perf_counter() - started
                else:  # refused (loading) or nothing: ask again
                    marks.setdefault("first refusal", time.perf_counter() - started)
                    puller.send({"cmd": "PULL", "queue": queue, "timeout": 0})
        if {"ping", "health", "ready", "served"} <= marks.keys():
            break
        time.sleep(0.005)
    if puller is not None:
        puller.close()
    return process, marks


def restart_with_jobs(source: str, jobs: int) -> str:
    """restart-1m: the store filled with `jobs` jobs, kill -9, the same command again."""
    port, http_port = free_tcp_port(), free_tcp_port()
    with tempfile.TemporaryDirectory() as data:
        command = serve_command(source, port, http_port, "--data-dir", data)
        first = subprocess.Popen(command, cwd=source, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        assert first.stdout is not None and "listening" in first.stdout.readline()
        began = time.perf_counter()
        fill(port, jobs)
        filled_s = time.perf_counter() - began
        before = rss_mib(psutil.Process(first.pid))
        first.kill()
        first.wait(10)
        second, marks = restart_timeline(command, source, port, http_port, "stored")
        try:
            after = rss_mib(psutil.Process(second.pid))
        finally:
            second.terminate()
            second.wait(60)
    order = sorted(marks.items(), key=lambda mark: mark[1])
    shown = ", ".join(f"{name} {at:.2f} s" for name, at in order)
    return (
        f"{jobs:,} jobs pushed in {filled_s:.1f} s, RSS {before:.0f} MiB; after kill -9, from "
        f"the new process's start: {shown}; RSS once served {after:.0f} MiB "
        f"({(after / before - 1) * 100:+.0f}%); load average {os.getloadavg()[0]:.1f}"
    )


LOAD_CLIENTS = 32


def spawn(command: list[str], source: str) -> subprocess.Popen[str]:
    """Start a broker process (its output discarded)."""
    return subprocess.Popen(
        command, cwd=source, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )


async def ping_answers_async(port: int) -> bool:
    """Whether a fresh connection's Ping is answered within a second."""
    with trio.move_on_after(1):
        try:
            stream = await connect(port)
        except OSError:
            return False
        async with stream:
            try:
                await stream.send_all(frame({"cmd": "Ping"}))
                await read_replies(stream, 1)
            except (EOFError, trio.BrokenResourceError):
                return False  # e.g. reset: the start-up's port check listens for a moment
            return True
    return False


async def load_through_restart(
    source: str, seconds: float, first: subprocess.Popen[str], command: list[str], port: int
) -> tuple[dict[str, float], int, int]:
    """restart-same's run against `first`, started by `command` on `port`: (marks in seconds
    from the new process's start, most open files of the new broker, error replies heard)."""
    served_again: dict[int, float] = {}
    errors = 0
    restart: dict[str, Any] = {}
    push = frame({"cmd": "PUSH", "queue": "restart", "data": {"x": 1}})

    async def client(n: int) -> None:
        nonlocal errors
        while True:
            try:
                stream = await connect(port)
            except OSError:
                await trio.sleep(0.02)  # refused: the broker is down or not yet listening
                continue
            buffer = b""
            try:
                while True:
                    await stream.send_all(push)
                    while len(buffer) < 4 or len(buffer) < 4 + int.from_bytes(buffer[:4], "big"):
                        chunk = await stream.receive_some(65536)
                        if not chunk:
                            raise EOFError
                        buffer += chunk
                    size = int.from_bytes(buffer[:4], "big")
                    reply = msgspec.msgpack.decode(buffer[4 : 4 + size])
                    buffer = buffer[4 + size :]
                    if not reply.get("ok"):
                        errors += 1
                    elif "at" in restart and n not in served_again:
                        served_again[n] = time.perf_counter() - restart["at"]
            except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.aclose()

    most_files, marks = 0, {}
    async with trio.open_nursery() as nursery:
        for n in range(LOAD_CLIENTS):
            nursery.start_soon(client, n)
        await trio.sleep(2)  # the load runs against the first broker
        first.kill()
        first.wait(10)
        restart["at"] = time.perf_counter()
        second = spawn(command, source)
        process = psutil.Process(second.pid)
        deadline = restart["at"] + seconds
        while time.perf_counter() < deadline:
            with contextlib.suppress(psutil.Error):
                most_files = max(most_files, process.num_fds())
            if "Ping answered" not in marks and await ping_answers_async(port):
                marks["Ping answered"] = time.perf_counter() - restart["at"]
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    second.terminate()
    second.wait(60)
    if served_again:
        marks["first client served"] = min(served_again.values())
    if len(served_again) == LOAD_CLIENTS:
        marks["all clients served"] = max(served_again.values())
    return marks, most_files, errors


def restart_same_address(source: str, seconds: float) -> str:
    """restart-same: a PostgreSQL broker restarted on its own address under client load."""
    sys.path.insert(0, source)
    from tests.support.postgres import start_private_server

    server = start_private_server()
    port, http_port = free_tcp_port(), free_tcp_port()
    options = ("--postgres", server.url, "--pg-schema", "restart_same", "--lease-ttl-s", "10")
    command = serve_command(source, port, http_port, *options)
    first = subprocess.Popen(command, cwd=source, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert first.stdout is not None and "listening" in first.stdout.readline()
        run = load_through_restart
        marks, most_files, errors = trio.run(run, source, seconds, first, command, port)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
        server.destroy()
    order = sorted(marks.items(), key=lambda mark: mark[1])
    shown = ", ".join(f"{name} {at:.2f} s" for name, at in order) or "nothing served"
    return (
        f"{LOAD_CLIENTS} clients pushing; after kill -9, from the new process's start: {shown}"
        f" (of {seconds:.0f} s watched); its open files at most {most_files}; error replies "
        f"{errors}; load average {os.getloadavg()[0]:.1f}"
    )


RESTART_SCENARIOS = {
    "restart-1m": lambda source, seconds, jobs: restart_with_jobs(source, jobs),
    "restart-same": lambda source, seconds, jobs: restart_same_address(source, seconds),
}
"""Scenarios that start (and restart) their own brokers: name -> fn(source, seconds, jobs)."""


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


def run(scenario: str, source: str, seconds: float, jobs: int = 1_000_000) -> str:
    """Run one scenario against a fresh broker; returns its line of figures."""
    if scenario in RESTART_SCENARIOS:
        return RESTART_SCENARIOS[scenario](source, seconds, jobs)
    if scenario.startswith("unread-getjobs"):
        return run_unread(scenario, source, seconds)
    if scenario in ENGINE_SCENARIOS:
        return ENGINE_SCENARIOS[scenario](source)
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
    parser.add_argument("--jobs", type=int, default=1_000_000, help="stored jobs (restart-1m)")
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()
    if args.load_port:  # the child process of `fairness`
        trio.run(busy_load, args.load_port, args.seconds)
        return
    for scenario in args.scenarios:
        print(f"{scenario}: {run(scenario, args.source, args.seconds, args.jobs)}", flush=True)


if __name__ == "__main__":
    main()
