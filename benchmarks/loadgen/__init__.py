"""A load generator for bunqueue-protocol servers: many connections, a window in flight on each.

    python -m benchmarks.loadgen --port 6789 [--scenario push] [--connections 16] [--window 8]
    python -m benchmarks.loadgen --compare [--modes memory,sqlite,postgres] [--repeat 3]
                                 [--baseline DIR [--baseline-python PYTHON]]

Why Python in several processes (and not bun): measured on this machine, one process of this
generator drives a do-nothing server at several times trioq's best rate, and the connections are
spread over ``--processes`` worker processes so the generator is not bound to one core. Each
process runs its connections on one ``selectors`` loop; requests are pre-encoded frames around a
fixed-width ``reqId`` (only 8 bytes change per request), every refill of a connection's window is
one ``sendall`` and every ``recv`` decodes all complete replies in it with msgspec.

Scenarios (``SCENARIOS``): ``push`` (PUSH, C connections x W in flight), ``workers`` (PULL->ACK
chains over a filled queue), ``mixed`` (producers and workers together; with ``--rate`` the
producers pace themselves at a fixed offered rate and the report gives push-to-start latency),
``pullb`` (PULLB->ACKB chains) and ``seq`` (PUSH on one connection, one at a time).

Latency of a request = the time its reply was read minus the time its frame was sent (one clock
reading per ``sendall`` and per ``recv``). Push-to-start = the time a worker read the PULL reply
carrying a job minus the send time the producer wrote into that job's data (CLOCK_MONOTONIC is
shared by the processes of one machine).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import secrets
import selectors
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..client import decode_ext
from ..servers import add_comparison_arguments

HEADER = struct.Struct(">I")
ID_WIDTH = 8
RECV_SIZE = 256 * 1024
PAYLOAD_BODY = "x" * 80
"""Job data is ``{"t": <send time>, "body": PAYLOAD_BODY}``: about 100 bytes of MessagePack."""
LONG_POLL_MS = 500


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``sorted_values`` (ascending); NaN when there are none.

    ``fraction`` is in (0, 1]: 0.99 gives the smallest value at or above 99 % of the samples.
    """
    if not sorted_values:
        return math.nan
    rank = math.ceil(fraction * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


class FrameTemplate:
    """A request frame pre-encoded around a fixed-width ``reqId``: only the id's bytes change.

    MessagePack keeps the map's order, so with ``reqId`` last the encoded body ends with the id
    string; the length prefix is constant because the id's width is.
    """

    def __init__(self, message: dict[str, Any]) -> None:
        """Encode ``message`` plus a placeholder ``reqId`` once."""
        body = msgspec.msgpack.encode({**message, "reqId": "0" * ID_WIDTH})
        self.prefix = HEADER.pack(len(body)) + body[:-ID_WIDTH]

    def frame(self, req_id: str) -> bytes:
        """The whole frame for ``req_id`` (exactly ``ID_WIDTH`` ASCII characters)."""
        return self.prefix + req_id.encode()


def encode_frame(message: dict[str, Any]) -> bytes:
    """One length-prefixed MessagePack frame."""
    body = msgspec.msgpack.encode(message)
    return HEADER.pack(len(body)) + body


class Stamp(msgspec.Struct):
    """The part of a job's data the generator reads: the producer's send time."""

    t: float = 0.0


class JobRef(msgspec.Struct):
    """A job as the generator sees it: its id and send time; other fields are skipped."""

    id: Any = None
    data: Any = None


class Reply(msgspec.Struct):
    """A reply reduced to the fields the generator reads."""

    ok: bool = False
    reqId: Any = None
    id: Any = None
    job: JobRef | None = None
    jobs: list[JobRef] | None = None
    error: Any = None


def split_frames(buf: bytearray, decode: Callable[[memoryview], Any]) -> list[Any]:
    """Decode every complete frame at the front of ``buf``, remove them from it, return them."""
    out = []
    end = len(buf)
    pos = 0
    unpack_from = HEADER.unpack_from
    with memoryview(buf) as view:
        while end - pos >= 4:
            (size,) = unpack_from(buf, pos)
            stop = pos + 4 + size
            if stop > end:
                break
            out.append(decode(view[pos + 4 : stop]))
            pos = stop
    if pos:
        del buf[:pos]
    return out


class LoadError(Exception):
    """The server answered wrongly (an error, a missing id, an unknown reqId)."""


class Driver:
    """What one connection sends: ``start`` frames, then frames answering each reply.

    Subclasses keep ``done`` false until their share of the work is finished.
    """

    def __init__(self) -> None:
        """No requests in flight yet."""
        self.counter = 0
        self.pending: dict[str, tuple[int, float]] = {}
        self.latencies = array("d")
        self.push_to_start = array("d")
        self.finished_jobs = 0

    def next_id(self) -> str:
        """A fresh fixed-width reqId on this connection."""
        self.counter += 1
        return f"{self.counter:08x}"

    @property
    def done(self) -> bool:
        """True once this connection's work is finished."""
        raise NotImplementedError

    def start(self, now: float) -> list[bytes]:
        """The first frames to send."""
        raise NotImplementedError

    def on_reply(self, kind: int, reply: Reply, now: float, out: list[bytes]) -> None:
        """Handle the reply to a request of ``kind``; append follow-up frames to ``out``."""
        raise NotImplementedError

    def tick(self, now: float, out: list[bytes]) -> None:
        """Called on every loop turn (paced producers send here)."""

    def handle(self, replies: list[Reply], now: float) -> list[bytes]:
        """Match replies to requests, record latencies, return the frames to send next."""
        out: list[bytes] = []
        pending = self.pending
        record = self.latencies.append
        for reply in replies:
            try:
                kind, started = pending.pop(reply.reqId)
            except (KeyError, TypeError):
                unknown = f"reply with unknown reqId {reply.reqId!r}: {reply.error}"
                raise LoadError(unknown) from None
            if not reply.ok:
                raise LoadError(f"request failed: {reply.error}")
            record(now - started)
            self.on_reply(kind, reply, now, out)
        return out


PUSH, PULL, ACK, PULLB, ACKB = range(5)


class PushDriver(Driver):
    """``quota`` PUSHes with ``window`` in flight; with ``rate`` > 0, paced instead."""

    def __init__(self, queue: str, quota: int, window: int, rate: float = 0.0) -> None:
        """Prepare ``quota`` pushes to ``queue``."""
        super().__init__()
        self.quota, self.window, self.rate = quota, window, rate
        self.sent = 0
        self.template = FrameTemplate(
            {"cmd": "PUSH", "queue": queue, "name": "bench", "data": {"body": PAYLOAD_BODY}}
        )
        self.message = {"cmd": "PUSH", "queue": queue, "name": "bench"}
        self.began = 0.0

    @property
    def done(self) -> bool:
        """All pushes answered."""
        return self.finished_jobs >= self.quota

    def _push(self, now: float) -> bytes:
        req_id = self.next_id()
        self.pending[req_id] = (PUSH, now)
        self.sent += 1
        if self.rate:
            data = {"t": now, "body": PAYLOAD_BODY}
            return encode_frame({**self.message, "data": data, "reqId": req_id})
        return self.template.frame(req_id)

    def start(self, now: float) -> list[bytes]:
        """Fill the window (paced: nothing yet, ``tick`` sends)."""
        self.began = now
        if self.rate:
            return []
        return [self._push(now) for _ in range(min(self.window, self.quota))]

    def tick(self, now: float, out: list[bytes]) -> None:
        """Paced: send the pushes that are due by now."""
        if self.rate:
            due = min(self.quota, int((now - self.began) * self.rate) + 1)
            while self.sent < due and len(self.pending) < self.window:
                out.append(self._push(now))

    def on_reply(self, kind: int, reply: Reply, now: float, out: list[bytes]) -> None:
        """Count the push; refill the window."""
        if reply.id is None:
            raise LoadError("PUSH reply without an id")
        self.finished_jobs += 1
        if not self.rate and self.sent < self.quota:
            out.append(self._push(now))


class WorkerDriver(Driver):
    """PULL->ACK chains, ``chains`` at a time, until ``quota`` jobs are acknowledged.

    With ``quota`` None (producers and workers together) the PULLs long-poll and the chains run
    until ``stop()`` is called; each job's push-to-start latency is recorded.
    """

    def __init__(self, queue: str, quota: int | None, chains: int) -> None:
        """Prepare chains on ``queue``."""
        super().__init__()
        self.quota, self.chains = quota, chains
        self.pulls = 0
        self.stopped = False
        pull: dict[str, Any] = {"cmd": "PULL", "queue": queue}
        if quota is None:
            pull["timeout"] = LONG_POLL_MS
        self.pull_template = FrameTemplate(pull)

    @property
    def done(self) -> bool:
        """All jobs of the quota acknowledged (or stopped)."""
        return self.stopped or (self.quota is not None and self.finished_jobs >= self.quota)

    def stop(self) -> None:
        """End an open-ended run."""
        self.stopped = True

    def _pull(self, now: float) -> bytes:
        req_id = self.next_id()
        self.pending[req_id] = (PULL, now)
        self.pulls += 1
        return self.pull_template.frame(req_id)

    def _wants_pull(self) -> bool:
        return not self.stopped and (self.quota is None or self.pulls < self.quota)

    def start(self, now: float) -> list[bytes]:
        """One PULL per chain."""
        count = self.chains if self.quota is None else min(self.chains, self.quota)
        return [self._pull(now) for _ in range(count)]

    def on_reply(self, kind: int, reply: Reply, now: float, out: list[bytes]) -> None:
        """PULL reply: ACK the job; ACK reply: PULL again."""
        if kind == PULL:
            job = reply.job
            if job is None or job.id is None:
                if self.quota is not None:
                    raise LoadError("PULL found no job in a filled queue")
                if self._wants_pull():
                    out.append(self._pull(now))
                return
            data = job.data
            if isinstance(data, dict) and isinstance(data.get("t"), float):
                self.push_to_start.append(now - data["t"])
            req_id = self.next_id()
            self.pending[req_id] = (ACK, now)
            out.append(encode_frame({"cmd": "ACK", "id": job.id, "reqId": req_id}))
        else:
            self.finished_jobs += 1
            if self._wants_pull():
                out.append(self._pull(now))


class PullbDriver(Driver):
    """PULLB->ACKB chains of ``batch`` jobs until ``quota`` jobs are acknowledged."""

    def __init__(self, queue: str, quota: int, chains: int, batch: int) -> None:
        """Prepare chains on ``queue``."""
        super().__init__()
        self.queue, self.quota, self.chains, self.batch = queue, quota, chains, batch
        self.claimed = 0  # jobs asked for by the PULLBs sent so far
        self.batch_asked: dict[str, int] = {}  # count asked by each PULLB in flight
        self.acking: dict[str, int] = {}  # ids in each ACKB in flight

    @property
    def done(self) -> bool:
        """All jobs of the quota acknowledged."""
        return self.finished_jobs >= self.quota

    def _pullb(self, now: float) -> bytes | None:
        count = min(self.batch, self.quota - self.claimed)
        if count <= 0:
            return None
        self.claimed += count
        req_id = self.next_id()
        self.pending[req_id] = (PULLB, now)
        self.batch_asked[req_id] = count
        msg = {"cmd": "PULLB", "queue": self.queue, "count": count, "reqId": req_id}
        return encode_frame(msg)

    def start(self, now: float) -> list[bytes]:
        """One PULLB per chain."""
        frames = (self._pullb(now) for _ in range(self.chains))
        return [f for f in frames if f is not None]

    def on_reply(self, kind: int, reply: Reply, now: float, out: list[bytes]) -> None:
        """PULLB reply: ACKB the ids; ACKB reply: count them and PULLB again."""
        if kind == PULLB:
            ids = [job.id for job in reply.jobs or ()]
            if not ids:
                raise LoadError("PULLB found no job in a filled queue")
            req_id = self.next_id()
            self.pending[req_id] = (ACKB, now)
            self.claimed -= self.batch_asked.pop(reply.reqId) - len(ids)
            self.acking[req_id] = len(ids)
            out.append(encode_frame({"cmd": "ACKB", "ids": ids, "reqId": req_id}))
        else:
            self.finished_jobs += self.acking.pop(reply.reqId)
            frame = self._pullb(now)
            if frame is not None:
                out.append(frame)


@dataclass(frozen=True)
class Plan:
    """One timed run: which scenario, against where, how much, spread over how many processes."""

    scenario: str
    host: str
    port: int
    queue: str
    jobs: int
    connections: int
    window: int
    processes: int
    rate: float = 0.0
    batch: int = 100
    producers: int = 0


def make_driver(plan: Plan, index: int) -> Driver:
    """The driver of connection ``index`` of ``plan``."""
    share = plan.jobs // plan.connections + (1 if index < plan.jobs % plan.connections else 0)
    if plan.scenario in ("push", "seq"):
        return PushDriver(plan.queue, share, plan.window)
    if plan.scenario == "workers":
        return WorkerDriver(plan.queue, share, plan.window)
    if plan.scenario == "pullb":
        return PullbDriver(plan.queue, share, plan.window, plan.batch)
    if plan.scenario == "mixed":
        if index < plan.producers:
            pshare = plan.jobs // plan.producers + (1 if index < plan.jobs % plan.producers else 0)
            rate = plan.rate / plan.producers if plan.rate else 0.0
            return PushDriver(plan.queue, pshare, plan.window, rate)
        return WorkerDriver(plan.queue, None, plan.window)
    raise ValueError(f"unknown scenario {plan.scenario!r}")


@dataclass
class ProcessResult:
    """What one generator process measured."""

    began: float
    ended: float
    cpu: float
    latencies: bytes
    push_to_start: bytes
    error: str = ""


def run_connections(
    plan: Plan, indexes: Sequence[int], acked: Any = None, start_gate: Any = None
) -> ProcessResult:
    """Drive connections ``indexes`` of ``plan`` to the end on one selector loop."""
    decoder = msgspec.msgpack.Decoder(Reply, ext_hook=decode_ext)
    selector = selectors.DefaultSelector()
    conns = []
    for index in indexes:
        sock = socket.create_connection((plan.host, plan.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        driver = make_driver(plan, index)
        conns.append((sock, driver, bytearray()))
        selector.register(sock, selectors.EVENT_READ, len(conns) - 1)
    if start_gate is not None:
        start_gate.wait()
    cpu0, began = time.process_time(), time.monotonic()
    error = ""
    try:
        for sock, driver, _ in conns:
            frames = driver.start(began)
            if frames:
                sock.sendall(b"".join(frames))
        _loop(plan, conns, selector, decoder, acked)
    except (OSError, LoadError, msgspec.DecodeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    ended = time.monotonic()
    cpu = time.process_time() - cpu0
    latencies, p2s = array("d"), array("d")
    for sock, driver, _ in conns:
        latencies.extend(driver.latencies)
        p2s.extend(driver.push_to_start)
        sock.close()
    selector.close()
    return ProcessResult(began, ended, cpu, latencies.tobytes(), p2s.tobytes(), error)


def _loop(
    plan: Plan,
    conns: list[tuple[socket.socket, Driver, bytearray]],
    selector: selectors.BaseSelector,
    decoder: msgspec.msgpack.Decoder[Reply],
    acked: Any,
) -> None:
    decode = decoder.decode
    mixed = plan.scenario == "mixed"
    # A paced producer must wake often to send on time; long-polls wake the others anyway.
    wait = 0.001 if plan.rate else 0.05
    reported = 0
    while True:
        if mixed:
            reported = _share_progress(conns, acked, plan.jobs, reported)
            now = time.monotonic()
            for sock, driver, _ in conns:
                out: list[bytes] = []
                driver.tick(now, out)
                if out:
                    sock.sendall(b"".join(out))
        if all(driver.done for _, driver, _ in conns):
            return
        for key, _ in selector.select(wait if mixed else 5.0):
            sock, driver, buf = conns[key.data]
            chunk = sock.recv(RECV_SIZE)
            if not chunk:
                raise LoadError("the server closed the connection")
            now = time.monotonic()
            buf += chunk
            frames = driver.handle(split_frames(buf, decode), now)
            if frames:
                sock.sendall(b"".join(frames))


def _share_progress(
    conns: list[tuple[socket.socket, Driver, bytearray]], acked: Any, total: int, reported: int
) -> int:
    """Producers+workers: add this process's acknowledgements since ``reported`` to the shared
    count and stop the workers once every pushed job is acknowledged; return the new total."""
    mine = sum(d.finished_jobs for _, d, _ in conns if isinstance(d, WorkerDriver))
    with acked.get_lock():
        acked.value += mine - reported
        everyone = acked.value
    if everyone >= total:
        for _, driver, _ in conns:
            if isinstance(driver, WorkerDriver):
                driver.stop()
    return mine


def _child(plan: Plan, indexes: list[int], acked: Any, gate: Any, results: Any) -> None:
    try:
        results.put(run_connections(plan, indexes, acked, gate))
    except Exception as exc:  # reported to the parent instead of a silent hang
        gate.abort()
        results.put(ProcessResult(0.0, 0.0, 0.0, b"", b"", f"{type(exc).__name__}: {exc}"))


@dataclass
class RunResult:
    """One timed run of a scenario, all processes together."""

    jobs: int
    seconds: float
    client_cpu: float
    latencies: list[float] = field(repr=False)
    push_to_start: list[float] = field(repr=False)

    @property
    def rate(self) -> float:
        """Jobs per second."""
        return self.jobs / self.seconds if self.seconds > 0 else math.inf


def run_plan(plan: Plan) -> RunResult:
    """Run ``plan`` in ``plan.processes`` processes (spawned) and merge what they measured."""
    processes = max(1, min(plan.processes, plan.connections))
    ctx = mp.get_context("spawn")
    acked = ctx.Value("q", 0)
    gate = ctx.Barrier(processes)
    results = ctx.Queue()
    groups = [list(range(i, plan.connections, processes)) for i in range(processes)]
    children = [
        ctx.Process(target=_child, args=(plan, group, acked, gate, results), daemon=True)
        for group in groups
    ]
    for child in children:
        child.start()
    parts: list[ProcessResult] = [results.get() for _ in children]
    for child in children:
        child.join()
    errors = [p.error for p in parts if p.error]
    if errors:
        raise LoadError("; ".join(errors))
    latencies, p2s = array("d"), array("d")
    for part in parts:
        latencies.frombytes(part.latencies)
        p2s.frombytes(part.push_to_start)
    seconds = max(p.ended for p in parts) - min(p.began for p in parts)
    cpu = sum(p.cpu for p in parts) / seconds if seconds > 0 else 0.0
    return RunResult(plan.jobs, seconds, cpu, sorted(latencies), sorted(p2s))


def fill_queue(host: str, port: int, queue: str, jobs: int, batch: int = 500) -> None:
    """Put ``jobs`` jobs into ``queue`` with PUSHB (untimed set-up of the consumer scenarios)."""
    from ..client import Client

    item = {"name": "bench", "data": {"body": PAYLOAD_BODY}}
    with Client(host, port, timeout=120) as client:
        left = jobs
        while left:
            count = min(batch, left)
            reply = client.call({"cmd": "PUSHB", "queue": queue, "jobs": [item] * count})
            if reply.ids is None or len(reply.ids) != count:
                raise LoadError(f"PUSHB of {count} jobs returned {reply.ids!r}")
            left -= count


@dataclass(frozen=True)
class Row:
    """A row of the report: a scenario with its shape."""

    key: str
    title: str
    scenario: str
    connections: int
    window: int
    jobs_share: float = 1.0
    producers: int = 0
    paced: bool = False


ROWS: tuple[Row, ...] = (
    Row("push", "PUSH, 16 conn x 8 in flight", "push", 16, 8),
    Row("workers", "PULL+ACK, 16 conn x 4 chains", "workers", 16, 4),
    Row("mixed", "producers+workers, 8+8", "mixed", 16, 4, producers=8),
    Row("pullb", "PULLB 100 + ACKB, 4 conn x 2 chains", "pullb", 4, 2),
    Row("seq", "sequential PUSH, 1 conn", "seq", 1, 1, jobs_share=0.25),
    Row("paced", "push-to-start at fixed rate, 8+8", "mixed", 16, 4, 0.0, 8, True),
    Row("wide", "PUSH, 16 conn x 64 in flight", "push", 16, 64),
)
"""The report's rows, in the order they run."""


def plan_for(row: Row, host: str, port: int, jobs: int, processes: int, rate: float) -> Plan:
    """The plan of ``row`` against ``host:port`` with a fresh queue."""
    count = max(row.connections, int(jobs * row.jobs_share))
    if row.paced:
        count = max(row.producers, int(rate * 4))  # four seconds at the offered rate
    queue = f"lg-{row.key}-{secrets.token_hex(4)}"
    return Plan(
        row.scenario,
        host,
        port,
        queue,
        count,
        row.connections,
        row.window,
        1 if row.connections == 1 else processes,
        rate if row.paced else 0.0,
        producers=row.producers,
    )


def run_row(row: Row, host: str, port: int, jobs: int, processes: int, rate: float) -> RunResult:
    """Fill the queue if the row consumes, then time the row."""
    plan = plan_for(row, host, port, jobs, processes, rate)
    if plan.scenario in ("workers", "pullb"):
        fill_queue(host, port, plan.queue, plan.jobs)
    return run_plan(plan)


def log(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def ms(seconds: float) -> str:
    """Seconds as milliseconds with one decimal."""
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def describe(row: Row, result: RunResult) -> str:
    """One line: rate, client CPU and latency percentiles of a run."""
    lat = result.push_to_start if row.paced else result.latencies
    what = "push-to-start" if row.paced else "latency"
    return (
        f"{result.rate:>10,.0f} jobs/s  client CPU {result.client_cpu:.0%}  {what} ms"
        f" p50 {ms(percentile(lat, 0.5))} p99 {ms(percentile(lat, 0.99))}"
        f" p99.9 {ms(percentile(lat, 0.999))}"
    )


def capacity(result: RunResult) -> float:
    """Jobs the generator handles per second of its own CPU (its ceiling per core)."""
    cpu_seconds = result.client_cpu * result.seconds
    return result.jobs / cpu_seconds if cpu_seconds > 0 else math.inf


def run_single(args: argparse.Namespace) -> int:
    """Run the chosen rows against ``--host``/``--port``."""
    rows = [r for r in ROWS if r.key in args.rows]
    for row in rows:
        result = run_row(row, args.host, args.port, args.jobs, args.processes, args.rate)
        print(f"{row.title:<38} {describe(row, result)}", flush=True)
        print(f"{'':<38} {capacity(result):>10,.0f} jobs per client CPU-second", flush=True)
    return 0


def default_processes() -> int:
    """One generator process per core, at least two."""
    return max(2, os.cpu_count() or 2)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per concurrent row")
    parser.add_argument("--processes", type=int, default=default_processes())
    parser.add_argument("--rate", type=float, default=500.0, help="offered jobs/s, paced row")
    parser.add_argument("--rows", default=",".join(r.key for r in ROWS if r.key != "wide"))
    parser.add_argument("--compare", action="store_true", help="start the servers (compare.py)")
    parser.add_argument("--modes", default="memory,sqlite")
    add_comparison_arguments(parser, "jobs per concurrent row")
    args = parser.parse_args(argv)
    args.baseline = [path.resolve() for path in args.baseline]
    if len(args.baseline_python) > len(args.baseline):
        parser.error("each --baseline-python belongs to a --baseline")
    for path in args.baseline:
        if not (path / "broker").is_dir():
            parser.error(f"--baseline {path}: not a trioq checkout (no broker/ in it)")
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.compare and args.port is None:
        parser.error("--port is required unless --compare is given")
    return args
