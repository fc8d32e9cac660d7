"""Instructions per request of one phase, old build against new, callgrind counting that phase only.

    python -m benchmarks.phase_instructions OLD_ROOT [NEW_ROOT] [--requests 1000]
                                            [--scenarios count,push,pull,ack,pullb,ackb,mixed]
                                            [--wired] [--sqlite]
    python -m benchmarks.phase_instructions ROOT --scenarios pushb:32,spullb:20+events,...

Like `benchmarks.instructions` (same roots), but valgrind runs with `--instr-atstart=no` and a
tiny helper compiled here with the system's C compiler switches callgrind's instrumentation on
just before the measured phase and off after it, so a run needs no second size to cancel
start-up out, and start-up runs uninstrumented (several times faster on a busy machine). The
phase sends each frame as a connection's batch that the parked actor runs inline
(`submit_inline`: decode, pass, commit call, reply encoded through the TCP session) with no
scheduler turn between them, so the count is the engine's and the codec's cost per request.

Scenarios: `count` (a Count command: what every request pays, whatever it does), `push`, `pull`
(PULL of a filled queue), `ack`, `pullb` and `ackb` (PULLB of 100 / ACKB of 100 ids, per job),
`mixed` (a long poll parks, a PUSH is handed to it, the worker ACKs: per job, the three requests
and the actor's wake-ups for the poll's timer).

The official SDKs' shapes (`benchmarks.sdk`), per job, with the batch size after a colon:
`pushb:N` (PUSHB of N jobs of the SDK bench's `{data: 'x' * 100, i}`: the AddBatcher sends 32
under 32 parallel add()s, addBulk 100), `spullb:N` (PULLB of N as the TypeScript Worker sends it,
leased: `owner`, `lockTtl`), `sackb:N` (ACKB of N with `results` and the lease `tokens`, as its
AckBatcher sends them) and `jhb:N` (JobHeartbeatB of N leased jobs, which that Worker sends beside
its pulls). `+events` adds a TCP connection subscribed to the queue's events (`SubscribeEvents`, as
the Worker subscribes), so the count includes publishing the pass's events and sending them as
event frames (in one write per pass; a build that forwards them with a task per subscriber takes
one scheduler turn per event). In these scenarios each pass is followed by
`wait_all_tasks_blocked`, with or without `+events`, so other tasks (such a forwarder) run
inside the measured phase and the difference is what the events cost; that
wait adds about 60,000 instructions per pass (compare a batch's fixed cost with `count`, not
with these). Before each measured phase, in every tree, the harness runs `gc.collect()` then
`gc.freeze()` (uncounted): the counts measure the code, not where the garbage collector's full
collections happen to fall (one inside a phase of 10 PULLBs added about 2,300 instructions per
job to one tree's count and not the other's). Retention is full throughout (a kept count of
0), as in a broker that has run for a while: every job completed forgets one. `--wired`
connects the actor to its metrics and the webhook dispatcher as a served broker does
(`App.wire`: a histogram per pass, per started and per completed job, the webhook check per
pass). Needs valgrind and its headers
(`valgrind/callgrind.h`) and a C compiler.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks.instructions import engine_module, load_broker

SCENARIOS = ("count", "push", "pull", "ack", "pullb", "ackb", "mixed")
SDK_KINDS = ("pushb", "spullb", "sackb", "jhb")
"""The SDK-shaped scenarios, written `KIND:N` or `KIND:N+events` (see the module docstring)."""
PULL_BATCH = 100
SDK_OWNER = "worker-sdk-bench"
SDK_LOCK_TTL = 30_000
HELPER = """
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def build_helper(directory: str) -> str:
    """Compile the start/stop helper into `directory`; returns the library's path."""
    source = os.path.join(directory, "toggle.c")
    library = os.path.join(directory, "libtoggle.so")
    with open(source, "w") as file:
        file.write(HELPER)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def sdk_scenario(scenario: str) -> tuple[str, int, bool] | None:
    """``(kind, batch size, events)`` of an SDK-shaped scenario such as ``spullb:20+events``;
    None for the other scenarios; ValueError for a malformed one."""
    name, plus, suffix = scenario.partition("+")
    kind, colon, size = name.partition(":")
    if kind not in SDK_KINDS:
        return None
    if not colon or not size.isdigit() or int(size) < 1 or (plus and suffix != "events"):
        raise ValueError(f"{scenario!r}: write {kind}:N or {kind}:N+events (N >= 1)")
    return kind, int(size), bool(plus)


def jobs_of(scenario: str, count: int) -> int:
    """How many jobs (or requests) a scenario's count is divided by: an SDK-shaped scenario
    runs whole batches, `count` rounded up to a multiple of its size."""
    parsed = sdk_scenario(scenario)
    if parsed is None:
        return count
    size = parsed[1]
    return -(-count // size) * size


def workload(
    root: str, scenario: str, count: int, helper: str, wired: bool = False, sqlite_dir: str = ""
) -> None:
    """The measured run (in the child process under valgrind), against the build at `root`;
    `wired` hooks up metrics and webhooks as a running broker does; with `sqlite_dir`, each pass
    commits to a SQLite file store there (the commit counted)."""
    sys.path.insert(0, root)
    import ctypes
    import gc

    import msgspec
    import trio
    import trio.testing

    app_module, config_module = load_broker()  # as a broker process has loaded (same heap)
    from broker.clock import Clock
    from broker.engine.core import Engine
    from broker.server.frontdoor import InFlight
    from broker.server.session import Session
    from broker.server.tcp import Connection
    from protocol import commands, decode_command
    from store.sqlite import SqliteStore

    actor_module = engine_module("runtime.actor")
    Batch, EngineActor = actor_module.Batch, actor_module.EngineActor
    EngineState = engine_module("state.engine_state").EngineState

    toggle = ctypes.CDLL(helper)
    replies: list[dict[str, Any]] = []

    class Sink(Session):
        """The TCP session, also keeping each reply (to read ids and check it)."""

        def stage_reply(self, reply: dict[str, Any], req_id: object) -> None:
            replies.append(reply)
            self.budget.count += 1  # taken by the reader in a broker, given back by written()
            super().stage_reply(reply, req_id)

    def frame(**fields: object) -> bytes:
        return msgspec.msgpack.encode({**fields, "reqId": "00000001"})

    async def main() -> None:
        store = SqliteStore(os.path.join(sqlite_dir, "trioq.db")) if sqlite_dir else None
        # Retention full from the start, as in a broker that has run a while: each job
        # completed pushes the oldest completed job out (forgotten within the same pass).
        actor = EngineActor(Engine(EngineState(keep_completed=0)), Clock(), store)
        if wired:
            app = app_module.App(config_module.Config(memory=True))
            app.wire(actor, None)  # no TCP server
        sink = Sink(actor.outbox, InFlight(), direct_send=len)

        async def inline(payload: bytes) -> None:
            batch = Batch(sink, [decode_command(payload)])
            actor._inline_spent = False  # as on the scheduler's next turn
            while not actor.submit_inline(batch):  # woken for a new timer: let it park again
                await trio.testing.wait_all_tasks_blocked()
                actor._inline_spent = False

        def settle_heap() -> None:
            # A full collection falling inside one tree's phase and not the other's (their heaps
            # differ) moved a count by thousands of instructions per job: collect now, and
            # freeze what survives, so the phase's collections look at its own objects only.
            gc.collect()
            gc.freeze()

        async def phase(payloads: list[bytes], measured: bool) -> None:
            await trio.testing.wait_all_tasks_blocked()
            if measured:
                settle_heap()
                toggle.start()
            for payload in payloads:
                await inline(payload)
            if measured:
                toggle.stop()

        class Subscriber:
            """A TCP connection subscribed to q's events (`SubscribeEvents`), forwarding them
            with its own task; its socket (a C-level `write`) keeps every byte."""

            def __init__(self, nursery: trio.Nursery) -> None:
                left, _ = trio.testing.memory_stream_pair()
                self.socket = io.BytesIO()
                self.connection = Connection(left, actor, frozenset())
                self.connection.session = Session(
                    actor.outbox, InFlight(), direct_send=self.socket.write
                )
                self.connection._nursery = nursery
                self.connection._subscribe(commands.SubscribeEvents(queue="q"))

            def drained(self) -> bool:
                """Whether every event so far was sent: a build that forwards events with a
                task (a channel per subscriber) has that task waiting on an empty channel; one
                that sends them as they are published has nothing pending."""
                receive = getattr(self.connection.events, "receive", None)
                if receive is None:
                    return True
                stats = receive.statistics()
                return not stats.current_buffer_used and stats.tasks_waiting_receive == 1

            def event_frames(self) -> int:
                """How many event frames the socket took."""
                data, at, events = self.socket.getvalue(), 0, 0
                while at < len(data):
                    size = int.from_bytes(data[at : at + 4], "big")
                    message = msgspec.msgpack.decode(data[at + 4 : at + 4 + size])
                    events += message["type"] == "event"
                    at += 4 + size
                return events

        def decoded(value: Any) -> Any:
            """A reply's field, decoded if the session kept it pre-encoded (`msgspec.Raw`)."""
            return msgspec.msgpack.decode(value) if isinstance(value, msgspec.Raw) else value

        async def sdk_run(nursery: trio.Nursery, kind: str, size: int, events: bool) -> None:
            """An SDK-shaped scenario: only the `kind` phase is measured, each pass followed by
            `wait_all_tasks_blocked`, so the other tasks run inside the measurement: with
            `events`, a subscriber connected before the phase forwards the pass's events."""
            jobs = jobs_of(scenario, count)
            item = {"name": "bulk-job", "data": {"data": "x" * 100, "i": 0}}
            subscriber: Subscriber | None = None

            async def measured(payloads: list[bytes], on: bool) -> None:
                nonlocal subscriber
                if events and on:
                    subscriber = Subscriber(nursery)
                await trio.testing.wait_all_tasks_blocked()
                if on:
                    settle_heap()
                    toggle.start()
                for payload in payloads:
                    await inline(payload)
                    await trio.testing.wait_all_tasks_blocked()
                    assert subscriber is None or subscriber.drained()
                if on:
                    toggle.stop()

            pushes = [
                frame(cmd="PUSHB", queue="q", jobs=[item] * (size if kind == "pushb" else 100))
                for _ in range(jobs // size if kind == "pushb" else -(-jobs // 100))
            ]
            await measured(pushes, kind == "pushb")
            if kind != "pushb":
                pull = frame(cmd="PULLB", queue="q", count=size, owner=SDK_OWNER,
                             lockTtl=SDK_LOCK_TTL, timeout=0)  # fmt: skip
                first = len(replies)
                await measured([pull] * (jobs // size), kind == "spullb")
                pulled = replies[first:]
                ids = [job["id"] for reply in pulled for job in decoded(reply["jobs"])]
                tokens = [token for reply in pulled for token in reply["tokens"]]
                assert len(ids) == jobs == len(tokens), (len(ids), jobs)
                chunks = [
                    (ids[at : at + size], tokens[at : at + size]) for at in range(0, jobs, size)
                ]
                if kind == "jhb":
                    beats = [frame(cmd="JobHeartbeatB", ids=i, tokens=t) for i, t in chunks]
                    await measured(beats, True)
                if kind == "sackb":
                    acks = [
                        frame(cmd="ACKB", ids=i, results=[None] * len(i), tokens=t)
                        for i, t in chunks
                    ]
                    await measured(acks, True)
            if subscriber is not None and kind != "jhb":  # one event frame per job measured
                assert subscriber.event_frames() == jobs, subscriber.event_frames()

        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            data = {"t": 1.5, "body": "x" * 80}  # the loadgen's job data
            parsed = sdk_scenario(scenario)
            if parsed is not None:
                await sdk_run(nursery, *parsed)
            elif scenario == "count":
                await phase([frame(cmd="Count", queue="q") for _ in range(count)], True)
            elif scenario == "mixed":
                pull = frame(cmd="PULL", queue="q", timeout=60_000)
                push = frame(cmd="PUSH", queue="q", data=data)
                await trio.testing.wait_all_tasks_blocked()
                settle_heap()
                toggle.start()
                for _ in range(count):
                    await inline(pull)
                    await inline(push)
                    await inline(frame(cmd="ACK", id=replies[-2]["id"]))  # the PUSH's id
                toggle.stop()
            else:
                pushes = [frame(cmd="PUSH", queue="q", data=data) for _ in range(count)]
                await phase(pushes, scenario == "push")
                ids = [reply["id"] for reply in replies]
                if scenario in ("pull", "ack"):
                    await phase([frame(cmd="PULL", queue="q") for _ in ids], scenario == "pull")
                if scenario == "ack":
                    await phase([frame(cmd="ACK", id=job_id) for job_id in ids], True)
                chunks = [ids[at : at + PULL_BATCH] for at in range(0, count, PULL_BATCH)]
                if scenario in ("pullb", "ackb"):
                    pulls = [frame(cmd="PULLB", queue="q", count=PULL_BATCH) for _ in chunks]
                    await phase(pulls, scenario == "pullb")
                if scenario == "ackb":
                    await phase([frame(cmd="ACKB", ids=chunk) for chunk in chunks], True)
            failed = [reply for reply in replies if not reply["ok"]]
            assert not failed and not sink._ready, failed[:1]
            nursery.cancel_scope.cancel()

    trio.run(main)


def count_instructions(
    root: str,
    scenario: str,
    count: int,
    helper: str,
    wired: bool = False,
    sqlite: bool = False,
    keep: str = "",
) -> float:
    """Instructions callgrind counted in the measured phase, per request (per job for
    PULLB, ACKB, mixed and the SDK-shaped scenarios). With `sqlite`, each pass commits to a
    SQLite file; with `keep`, callgrind's output file is copied there (for callgrind_annotate)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        store = [scratch] if sqlite else []
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, "-m", "benchmarks.phase_instructions", "--workload", root, scenario,
             str(count), helper, "wired" if wired else "bare", *store],
            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        if keep:
            label = os.path.basename(os.path.normpath(root))
            shutil.copy(out, os.path.join(keep, f"callgrind.{label}.{scenario}.out"))
    total = int(re.search(r"Collected : (\d+)", run.stderr).group(1))  # type: ignore[union-attr]
    return total / jobs_of(scenario, count)


def main() -> int:
    """Entry point: print the table."""
    if len(sys.argv) > 1 and sys.argv[1] == "--workload":
        wired, store = sys.argv[6] == "wired", sys.argv[7:]
        workload(*sys.argv[2:4], int(sys.argv[4]), sys.argv[5], wired, *store)
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.phase_instructions")
    parser.add_argument("old", help="a source tree (broker/, protocol/, store/)")
    parser.add_argument("new", nargs="?", help="a second one, counted beside the first")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--wired", action="store_true", help="metrics and webhooks wired")
    parser.add_argument("--sqlite", action="store_true", help="commit each pass to a SQLite file")
    parser.add_argument("--keep", default="", metavar="DIR", help="copy callgrind's files to DIR")
    args = parser.parse_args()
    for scenario in args.scenarios.split(","):
        try:
            known = scenario in SCENARIOS or sdk_scenario(scenario) is not None
        except ValueError as exc:
            parser.error(str(exc))
        if not known:
            parser.error(f"unknown scenario {scenario!r}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        helper = build_helper(scratch)
        for scenario in args.scenarios.split(","):
            counts = [
                count_instructions(
                    root, scenario, args.requests, helper, args.wired, args.sqlite, args.keep
                )
                for root in (args.old, args.new)
                if root is not None
            ]
            print(f"{scenario}: {' -> '.join(f'{c:,.0f}' for c in counts)}", file=sys.stderr)
            rows.append((scenario, counts))
    if args.new is None:
        print("| scenario | instr/request (per job in batches) |")
        print("|---|---:|")
        for scenario, (count,) in rows:
            print(f"| {scenario} | {count:,.0f} |")
        return 0
    print("| scenario | old instr/request | new instr/request | change |")
    print("|---|---:|---:|---:|")
    for scenario, (old, new) in rows:
        print(f"| {scenario} | {old:,.0f} | {new:,.0f} | {new / old - 1:+.2%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
