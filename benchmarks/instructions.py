"""Instructions per request of the engine, old build against new, counted by callgrind.

    python -m benchmarks.instructions OLD_ROOT NEW_ROOT [--small 1000] [--large 3000] [--sqlite]

Each root is a source tree holding `broker/`, `protocol/` and `store/` (for example
`git archive <commit> broker protocol store | tar -x -C /tmp/old`). For each build, under
`valgrind --tool=callgrind`, one process runs N PUSHes, then N PULLs (no lease), then N ACKs,
one command per batch through the actor's inline path, as an idle broker runs a connection's
batch (no socket; no store, or with `--sqlite` a SQLite file store as `make serve` runs
by default, so each request's commit is counted too). Runs of the two builds alternate. The
count per request is the difference between a run of `--large` and one of `--small`
requests, divided by the difference, so start-up cancels out; PULL is (push+pull) minus
push, ACK likewise. Unlike wall-clock rates on a shared machine these counts repeat to
within a fraction of a percent.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

PHASES = ("push", "push,pull", "push,pull,ack")


def workload(root: str, count: int, phases: list[str], sqlite_dir: str | None = None) -> None:
    """The measured run (in the child process), against the build at `root`."""
    sys.path.insert(0, root)
    import msgspec
    import trio
    import trio.testing

    import broker.app  # noqa: F401  # everything a broker process has loaded (same heap for GC)
    from broker.clock import Clock
    from broker.engine.actor import Batch, EngineActor
    from broker.engine.core import Engine
    from protocol import decode_command
    from store.sqlite import SqliteStore

    class Sink:
        """Accepts both sink APIs: stage_reply/send_staged, and the older reply/release."""

        def __init__(self, outbox: set[Any]) -> None:
            self.closed = False
            self.held: set[str] = set()
            self.replies: list[dict[str, object]] = []
            self._outbox = outbox

        def stage_reply(self, reply: dict[str, object], req_id: object) -> None:
            self.replies.append(reply)
            self._outbox.add(self)

        def send_staged(self) -> None:
            pass

        reply = stage_reply
        release = send_staged

    def command(**fields: object) -> object:
        return decode_command(msgspec.msgpack.encode(fields))

    async def main() -> None:
        store = SqliteStore(os.path.join(sqlite_dir, "trioq.db")) if sqlite_dir else None
        actor = EngineActor(Engine(), Clock(), store)
        sink = Sink(actor.outbox)
        async def one_at_a_time(commands: list[object]) -> None:
            # Each batch runs and the actor parks again before the next: every one runs
            # inline, the same way in both builds.
            for command in commands:
                await actor.submit(Batch(sink, [command]))
                await trio.testing.wait_all_tasks_blocked()

        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            await one_at_a_time([command(cmd="PUSH", queue="q", data=i) for i in range(count)])
            ids = [reply["id"] for reply in sink.replies]
            if "pull" in phases:
                await one_at_a_time([command(cmd="PULL", queue="q") for _ in range(count)])
            if "ack" in phases:
                await one_at_a_time([command(cmd="ACK", id=job_id) for job_id in ids])
            failed = [reply for reply in sink.replies if not reply["ok"]]
            assert len(sink.replies) == count * len(phases) and not failed, failed[:1]
            nursery.cancel_scope.cancel()

    trio.run(main)


def count_instructions(root: str, count: int, phases: str, sqlite: bool = False) -> int:
    """Instructions callgrind counts for one workload run (in a fresh scratch directory)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        store = [scratch] if sqlite else []
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             "-m", "benchmarks.instructions", "--workload", root, str(count), phases, *store],
            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
    return int(re.search(r"Collected : (\d+)", run.stderr).group(1))  # type: ignore[union-attr]


def per_request(counts: dict[tuple[str, int], int], small: int, large: int) -> dict[str, float]:
    """PUSH, PULL and ACK instructions per request from the runs' totals."""
    cost = {phases: (counts[phases, large] - counts[phases, small]) / (large - small)
            for phases in PHASES}  # fmt: skip
    return {
        "PUSH": cost["push"],
        "PULL": cost["push,pull"] - cost["push"],
        "ACK": cost["push,pull,ack"] - cost["push,pull"],
    }


def main() -> int:
    """Entry point: print the table."""
    if len(sys.argv) > 1 and sys.argv[1] == "--workload":
        workload(sys.argv[2], int(sys.argv[3]), sys.argv[4].split(","), *sys.argv[5:6])
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=3000)
    parser.add_argument("--sqlite", action="store_true", help="commit each pass to a SQLite file")
    args = parser.parse_args()
    counts: dict[str, dict[tuple[str, int], int]] = {"old": {}, "new": {}}
    for phases in PHASES:
        for size in (args.small, args.large):
            for label in ("old", "new"):  # alternating, as the builds should be compared
                root = args.old if label == "old" else args.new
                counts[label][phases, size] = count_instructions(root, size, phases, args.sqlite)
                print(f"{label} {phases} {size}: {counts[label][phases, size]}", file=sys.stderr)
    old = per_request(counts["old"], args.small, args.large)
    new = per_request(counts["new"], args.small, args.large)
    print("| request | old instr/request | new instr/request | change |")
    print("|---|---:|---:|---:|")
    for name in old:
        change = new[name] / old[name] - 1
        print(f"| {name} | {old[name]:,.0f} | {new[name]:,.0f} | {change:+.2%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
