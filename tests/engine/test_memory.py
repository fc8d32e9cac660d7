"""Memory per waiting job (issue 14): what a million queued jobs cost the broker.

Measured with tracemalloc over an engine's own allocations (exact and repeatable, unlike RSS),
for jobs of about 90 bytes of data pushed as benchmarks/memory.py pushes them. The bound sits
between the layout of one slotted class of ~70 fields (about 1,050 bytes a job: 1,057 MiB per
million in RSS) and the split layout of model.py (about 500).
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import msgspec

from broker.engine.core import Engine
from protocol import decode_command

JOBS = 3000
BOUND = 600  # bytes a waiting job may take, everything the engine keeps for it included
PAYLOAD = {"kind": "benchmark", "body": "x" * 64}
EPOCH_MS = 1_700_000_000_000.0


class Sink:
    """Replies are not looked at."""

    closed = False

    def stage_reply(self, reply: Any, req_id: Any) -> None:
        pass

    def send_staged(self) -> None:
        pass


def pushes(jobs: int, **fields: Any) -> list[bytes]:
    """PUSHB frames of 500 jobs each."""
    item = {"name": "bench", "data": PAYLOAD, **fields}
    body = {"cmd": "PUSHB", "queue": "waiting", "jobs": [item] * 500}
    return [msgspec.msgpack.encode(body) for _ in range(jobs // 500)]


def bytes_per_job(frames: list[bytes]) -> float:
    """What the engine holds per job after the frames were executed (one per pass)."""
    engine = Engine()
    sink = Sink()
    commands = [decode_command(frame) for frame in frames]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, command in enumerate(commands):
            engine.tick(EPOCH_MS + n)
            engine.execute(sink, command, EPOCH_MS + n)
        del commands  # the decoded commands were the client's, not the broker's
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(engine.state.jobs) == JOBS
    return held / JOBS


def test_a_waiting_job_with_default_options_takes_under_600_bytes() -> None:
    assert bytes_per_job(pushes(JOBS)) < BOUND


def test_jobs_pushed_with_the_same_options_share_them() -> None:
    options = {"priority": 5, "attempts": 5, "backoff": 2000, "removeOnComplete": True}
    assert bytes_per_job(pushes(JOBS, **options)) < BOUND
