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
BATCH_PHASES = ("push,pullb", "push,pullb,ackb")
MIXED_PHASES = ("mixed",)
SCENARIOS = {"single": PHASES, "batch": BATCH_PHASES, "mixed": MIXED_PHASES}
PULL_BATCH = 100
"""Jobs per PULLB (and ids per ACKB) in the batch scenario, as the loadgen's PULLB row."""


def _has(relative: str) -> bool:
    """Whether the tree the `broker` package was imported from has `relative` under broker/.
    (Asked of the files, not of the import system: the venv's editable install would find a
    module the tree lacks in the checkout it was installed from.)"""
    import broker

    return os.path.exists(os.path.join(broker.__path__[0], relative))


def load_broker() -> Any:
    """Import the broker's composition (what a broker process has loaded) from the tree on
    sys.path; returns its module of `App` and its config module. A tree from before issue 32
    has them at the top of broker/, a newer one in broker/node/."""
    import importlib

    package = "broker.node" if _has("node") else "broker"
    return importlib.import_module(f"{package}.app"), importlib.import_module(f"{package}.config")


def engine_module(path: str) -> Any:
    """Import the engine module at `path` under broker/engine/ (such as "runtime.actor") from
    the tree on sys.path. Before issue 32 the engine's modules sat at the top of broker/engine/,
    and the EngineState module was `state`."""
    import importlib

    if _has(os.path.join("engine", path.replace(".", os.sep) + ".py")):
        return importlib.import_module(f"broker.engine.{path}")
    old = {"state.engine_state": "state"}.get(path, path.rpartition(".")[2])
    return importlib.import_module(f"broker.engine.{old}")


def workload(root: str, count: int, phases: list[str], sqlite_dir: str | None = None) -> None:
    """The measured run (in the child process), against the build at `root`.

    Replies go through the TCP session (broker/server/session.py) with a socket that takes
    every byte, so encoding each reply frame is counted; the reply dicts are also kept to
    read the pushed ids and check every answer.
    """
    sys.path.insert(0, root)
    import msgspec
    import trio
    import trio.testing

    load_broker()  # everything a broker process has loaded (same heap for GC)
    from broker.clock import Clock
    from broker.engine.core import Engine

    actor_module = engine_module("runtime.actor")
    Batch, EngineActor = actor_module.Batch, actor_module.EngineActor
    from broker.server.frontdoor import InFlight
    from broker.server.session import Session
    from protocol import decode_command
    from store.sqlite import SqliteStore

    replies: list[dict[str, Any]] = []

    class Sink(Session):
        """The TCP session, also keeping each reply (to read ids and check it)."""

        def stage_reply(self, reply: dict[str, Any], req_id: object) -> None:
            replies.append(reply)
            self.budget.count += 1  # taken by the reader in a broker, given back by written()
            super().stage_reply(reply, req_id)

    def command(**fields: object) -> object:
        return decode_command(msgspec.msgpack.encode(fields))

    async def main() -> None:
        store = SqliteStore(os.path.join(sqlite_dir, "trioq.db")) if sqlite_dir else None
        actor = EngineActor(Engine(), Clock(), store)
        sink = Sink(actor.outbox, InFlight(), direct_send=len)

        async def one_at_a_time(commands: list[object]) -> None:
            # Each batch runs and the actor parks again before the next: every one runs
            # inline, the same way in both builds.
            for command in commands:
                await actor.submit(Batch(sink, [command]))
                await trio.testing.wait_all_tasks_blocked()

        async def mixed() -> None:
            # A worker's long poll is parked, a producer's PUSH is handed to it, the worker
            # ACKs it: per job, what producers and workers together cost.
            for i in range(count):
                await one_at_a_time([command(cmd="PULL", queue="q", timeout=60_000)])
                await one_at_a_time([command(cmd="PUSH", queue="q", data=i)])
                await one_at_a_time([command(cmd="ACK", id=replies[-2]["id"])])

        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            if phases == ["mixed"]:
                await mixed()
            else:
                await one_at_a_time([command(cmd="PUSH", queue="q", data=i) for i in range(count)])
            ids = [reply.get("id") for reply in replies]
            if "pull" in phases:
                await one_at_a_time([command(cmd="PULL", queue="q") for _ in range(count)])
            if "ack" in phases:
                await one_at_a_time([command(cmd="ACK", id=job_id) for job_id in ids])
            chunks = [ids[at : at + PULL_BATCH] for at in range(0, count, PULL_BATCH)]
            if "pullb" in phases:
                pulls = [command(cmd="PULLB", queue="q", count=PULL_BATCH) for _ in chunks]
                await one_at_a_time(pulls)
            if "ackb" in phases:
                await one_at_a_time([command(cmd="ACKB", ids=chunk) for chunk in chunks])
            failed = [reply for reply in replies if not reply["ok"]]
            assert not failed and not sink._ready, failed[:1]
            expected = {"mixed": 3 * count, "pullb": len(chunks), "ackb": len(chunks)}
            assert len(replies) == sum(expected.get(phase, count) for phase in phases)
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
    """Instructions per request (per job for PULLB, ACKB and mixed) from the runs' totals."""
    cost = {phases: (counts[phases, large] - counts[phases, small]) / (large - small)
            for phases, size in counts if size == large}  # fmt: skip
    rows = {
        "PUSH": ("push", None),
        "PULL": ("push,pull", "push"),
        "ACK": ("push,pull,ack", "push,pull"),
        "PULLB 100 (per job)": ("push,pullb", "push"),
        "ACKB 100 (per job)": ("push,pullb,ackb", "push,pullb"),
        "PULL+PUSH+ACK, parked poll (per job)": ("mixed", None),
    }
    return {name: cost[run] - (cost[base] if base else 0)
            for name, (run, base) in rows.items()
            if run in cost and (base is None or base in cost)}  # fmt: skip


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
    parser.add_argument("--scenarios", default="single", help=f"of {','.join(SCENARIOS)}")
    args = parser.parse_args()
    runs = [phases for name in args.scenarios.split(",") for phases in SCENARIOS[name]]
    if "push,pull" in runs or "push,pullb" in runs:
        runs.insert(0, "push")  # what the pulls are measured against
    counts: dict[str, dict[tuple[str, int], int]] = {"old": {}, "new": {}}
    for phases in dict.fromkeys(runs):
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
