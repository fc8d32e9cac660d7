"""The timed benchmark scenarios.

Each scenario runs on one connection of its own, against a fresh queue whose name carries a random
suffix, so runs never see each other's jobs. Consumer scenarios fill their queue with PUSHB first;
that fill is not timed. Every scenario also checks what it measured: each push must return an id,
each pulled job must be new (no job delivered twice) and every acknowledgement must succeed, so a
fast but wrong server cannot post a good number.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .client import Client, ProtocolError, Reply

__all__ = [
    "BATCH",
    "SCENARIOS",
    "WINDOW",
    "Scenario",
    "ScenarioFailure",
    "ScenarioResult",
    "run_scenario",
]

WINDOW = 64
"""Requests kept in flight by the pipelined scenarios."""

BATCH = 100
"""Jobs per PUSHB, PULLB and ACKB in the batch scenarios."""

FILL_BATCH = 500
"""Jobs per PUSHB when a consumer scenario fills its queue (untimed)."""

JOB_NAME = "bench"
PAYLOAD: dict[str, Any] = {"kind": "benchmark", "body": "x" * 64}
"""The data of every job: a small map, about 90 bytes of MessagePack."""


@dataclass(frozen=True)
class ScenarioResult:
    """The outcome of one scenario: ``jobs`` processed in ``seconds`` (median of the runs).

    ``client_cpu`` is the share of that wall time the benchmark's own thread spent on the CPU
    (0.0-1.0): close to 1.0 means the client, not the server, limited the rate.
    """

    key: str
    title: str
    jobs: int
    seconds: float
    runs: int = 1
    client_cpu: float = 0.0

    @property
    def rate(self) -> float:
        """Jobs per second."""
        return self.jobs / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class ScenarioFailure:
    """A scenario that raised instead of finishing; ``error`` says why."""

    key: str
    title: str
    error: str


@dataclass(frozen=True)
class Scenario:
    """One benchmark: how many jobs it uses, an untimed ``prepare`` step and the timed ``run``."""

    key: str
    title: str
    run: Callable[[Client, str, int], None]
    prepare: Callable[[Client, str, int], None] | None = None
    divisor: int = 1

    def size(self, jobs: int) -> int:
        """The number of jobs this scenario handles when the run asks for ``jobs``."""
        return max(1, jobs // self.divisor)


def _push(queue: str) -> dict[str, Any]:
    return {"cmd": "PUSH", "queue": queue, "name": JOB_NAME, "data": PAYLOAD}


def _batch_items(count: int) -> list[dict[str, Any]]:
    return [{"name": JOB_NAME, "data": PAYLOAD} for _ in range(count)]


def _settle(reply: Reply, pending: dict[str, str]) -> str:
    """Match a pipelined reply to its request; return the request's command."""
    try:
        cmd = pending.pop(reply.reqId)
    except (KeyError, TypeError):
        if not reply.ok:
            raise ProtocolError(f"error reply without a known reqId: {reply.error}") from None
        raise ProtocolError(f"reply with unknown reqId {reply.reqId!r}") from None
    if not reply.ok:
        raise ProtocolError(f"{cmd} failed: {reply.error}")
    return cmd


def _check_distinct(ids: set[Any], expected: int, what: str) -> None:
    if len(ids) != expected:
        raise ProtocolError(f"{what}: expected {expected} distinct job ids, got {len(ids)}")


def fill_queue(client: Client, queue: str, jobs: int) -> None:
    """Put ``jobs`` jobs into ``queue`` with PUSHB (the untimed set-up of consumer scenarios)."""
    left = jobs
    while left:
        count = min(FILL_BATCH, left)
        reply = client.call({"cmd": "PUSHB", "queue": queue, "jobs": _batch_items(count)})
        if reply.ids is None or len(reply.ids) != count:
            raise ProtocolError(f"PUSHB of {count} jobs returned {reply.ids!r}")
        left -= count


def push_sequential(client: Client, queue: str, jobs: int) -> None:
    """PUSH one job at a time, waiting for each reply before sending the next."""
    ids: set[Any] = set()
    message = _push(queue)
    for _ in range(jobs):
        reply = client.call(message)
        ids.add(reply.id)
    ids.discard(None)
    _check_distinct(ids, jobs, "PUSH")


def push_pipelined(client: Client, queue: str, jobs: int) -> None:
    """PUSH with ``WINDOW`` requests in flight; each batch of replies is refilled in one send."""
    pending: dict[str, str] = {}
    ids: set[Any] = set()
    base = _push(queue)

    def requests(count: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            req_id = client.next_req_id()
            pending[req_id] = "PUSH"
            out.append({**base, "reqId": req_id})
        return out

    sent = min(WINDOW, jobs)
    client.send(requests(sent))
    done = 0
    while done < jobs:
        replies = client.receive()
        for reply in replies:
            _settle(reply, pending)
            ids.add(reply.id)
        done += len(replies)
        refill = min(len(replies), jobs - sent)
        if refill:
            client.send(requests(refill))
            sent += refill
    ids.discard(None)
    _check_distinct(ids, jobs, "PUSH")


def push_batched(client: Client, queue: str, jobs: int) -> None:
    """PUSHB ``BATCH`` jobs per request, one request at a time (the last batch may be smaller)."""
    ids: set[Any] = set()
    items = _batch_items(BATCH)
    left = jobs
    while left:
        count = min(BATCH, left)
        reply = client.call({"cmd": "PUSHB", "queue": queue, "jobs": items[:count]})
        if reply.ids is None or len(reply.ids) != count:
            raise ProtocolError(f"PUSHB of {count} jobs returned {reply.ids!r}")
        ids.update(reply.ids)
        left -= count
    ids.discard(None)
    _check_distinct(ids, jobs, "PUSHB")


def pull_ack_pipelined(client: Client, queue: str, jobs: int) -> None:
    """PULL and ACK every job with ``WINDOW`` commands outstanding.

    Starts with ``WINDOW`` PULLs. Each PULL reply is answered by an ACK of the pulled id, and each
    ACK reply by a new PULL while jobs remain, so the window stays full until the queue drains.
    """
    pending: dict[str, str] = {}
    seen: set[Any] = set()

    def request(message: dict[str, Any]) -> dict[str, Any]:
        req_id = client.next_req_id()
        pending[req_id] = message["cmd"]
        message["reqId"] = req_id
        return message

    pulls = min(WINDOW, jobs)
    client.send([request({"cmd": "PULL", "queue": queue}) for _ in range(pulls)])
    acked = 0
    while acked < jobs:
        out: list[dict[str, Any]] = []
        for reply in client.receive():
            if _settle(reply, pending) == "PULL":
                job = reply.job
                if job is None or job.id is None:
                    raise ProtocolError(
                        f"PULL found no job after {len(seen)} of {jobs} (the queue was filled)"
                    )
                if job.id in seen:
                    raise ProtocolError(f"job {job.id!r} was delivered twice")
                seen.add(job.id)
                out.append(request({"cmd": "ACK", "id": job.id}))
            else:
                acked += 1
                if pulls < jobs:
                    out.append(request({"cmd": "PULL", "queue": queue}))
                    pulls += 1
        if out:
            client.send(out)


def pullb_ackb(client: Client, queue: str, jobs: int) -> None:
    """PULLB up to ``BATCH`` jobs, then ACKB their ids; one request at a time until drained."""
    seen: set[Any] = set()
    while len(seen) < jobs:
        count = min(BATCH, jobs - len(seen))
        reply = client.call({"cmd": "PULLB", "queue": queue, "count": count})
        ids = [job.id for job in reply.jobs or ()]
        if not ids:
            raise ProtocolError(
                f"PULLB found no job after {len(seen)} of {jobs} (the queue was filled)"
            )
        before = len(seen)
        seen.update(ids)
        if len(seen) - before != len(ids):
            raise ProtocolError("PULLB delivered a job twice")
        client.call({"cmd": "ACKB", "ids": ids})


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("push-seq", "PUSH sequential (jobs/4)", push_sequential, divisor=4),
    Scenario("push-pipe", f"PUSH pipelined ({WINDOW} in flight)", push_pipelined),
    Scenario("pushb", f"PUSHB x{BATCH}", push_batched),
    Scenario(
        "pull-ack-pipe", f"PULL+ACK pipelined ({WINDOW} in flight)", pull_ack_pipelined, fill_queue
    ),
    Scenario("pullb-ackb", f"PULLB {BATCH} + ACKB", pullb_ackb, fill_queue),
)
"""Every scenario, in the order they run."""


def queue_name(key: str) -> str:
    """A fresh queue name for scenario ``key``: ``bench-<key>-<random hex>``."""
    return f"bench-{key}-{secrets.token_hex(4)}"


def run_scenario(
    scenario: Scenario,
    host: str,
    port: int,
    jobs: int,
    *,
    repeat: int = 1,
    timeout: float | None = 30.0,
) -> ScenarioResult:
    """Run ``scenario`` ``repeat`` times and return the median time.

    Each run opens its own connection and uses its own fresh queue; the ``prepare`` step (if any)
    runs on that connection before the clock starts. Raises on connection or protocol errors.
    """
    size = scenario.size(jobs)
    times: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        queue = queue_name(scenario.key)
        with Client(host, port, timeout=timeout) as client:
            if scenario.prepare is not None:
                scenario.prepare(client, queue, size)
            started, cpu_started = time.perf_counter(), time.thread_time()
            scenario.run(client, queue, size)
            elapsed = time.perf_counter() - started
            times.append(elapsed)
            cpu.append((time.thread_time() - cpu_started) / elapsed if elapsed > 0 else 0.0)
    return ScenarioResult(
        scenario.key,
        scenario.title,
        size,
        statistics.median(times),
        runs=repeat,
        client_cpu=statistics.median(cpu),
    )
