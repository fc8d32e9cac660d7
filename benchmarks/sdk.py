"""``python -m benchmarks.sdk``: trioq beside the reference, driven through the official SDKs.

    python -m benchmarks.sdk [--modes memory,sqlite,postgres] [--repeat 3] [--jobs 10000]
    python -m benchmarks.sdk --port 6789 [--rows add,bulk] [--py-spy DIR]

The workload of the reference's own published comparison (``bench/comparison`` in its
repository), run through the official TypeScript SDK (npm ``bunqueue`` 2.9.5 with bun, installed
by ``make test`` into ``tests/interop/ts``; the same client for both servers), plus a row through
the official Python SDK (``bunqueue-client``):

* ``add``: a ``Queue`` with ``poolSize: 32``, 32 loops of ``await queue.add()`` in parallel (the
  SDK's AddBatcher coalesces them into PUSHBs of 32, one in flight at a time);
* ``bulk``: ``addBulk()`` of 100 jobs, awaited one after another;
* ``process``: those bulk pushes, then a ``Worker`` (``concurrency: 50``, ``batchSize: 20``,
  ``heartbeatInterval: 0``: PULLB, ACKB through its AckBatcher, an event subscription) until
  every job completed; timed over both;
* ``pyworker``: the same through the Python SDK (``add_bulk`` of 100, then ``Worker`` of
  concurrency 50 and batch size 20, no heartbeats, one ACK per job as the SDK does by default).

Each row is one client process (``sdk_client.ts`` under bun, or ``sdk_python``), on a fresh
queue. The client connects, says ``ready``, and waits; the harness reads the server's CPU time
(``/proc/<pid>/stat``: user + system of the server process and its children), tells it to go,
reads the CPU time again when the client reports, so each row's CPU seconds per 1,000 jobs
cover exactly its timed part. Without ``--port`` it compares: the servers of each mode are
started fresh for each round, in an order rotated from round to round (as in
``benchmarks.loadgen --compare``, whose helpers start them), and the report gives medians with the
lowest and highest run, and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

import psutil

from .compare import (
    BEFORE,
    jobs_for,
    kinds_for,
    label,
    load,
    median_rate,
    rate_cell,
    ratio,
    run_compare,
    start,
    table,
    with_reference,
)
from .servers import (
    REPO_ROOT,
    RunningServer,
    ServerStartError,
    SharedPostgres,
    add_comparison_arguments,
    find_listening_pid,
)

TS_DIR = REPO_ROOT / "tests" / "interop" / "ts"
BUN = TS_DIR / "node_modules" / ".bin" / "bun"
SDK_ENTRY = TS_DIR / "node_modules" / "bunqueue" / "dist" / "client" / "index.js"
"""The TypeScript SDK's ``bunqueue/client`` module, which ``sdk_client.ts`` imports."""
CLIENT_SCRIPT = Path(__file__).with_name("sdk_client.ts")
READY_TIMEOUT = 60.0
"""Seconds a client may take to start and connect (bun's start on a loaded machine)."""
MIN_ROW_TIMEOUT = 120.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class SdkRow:
    """A row of the report: a workload of one SDK client."""

    key: str
    title: str
    client: str  # "ts" (sdk_client.ts under bun) or "python" (benchmarks.sdk_python)


SDK_ROWS: tuple[SdkRow, ...] = (
    SdkRow("add", "32 parallel add(), poolSize 32", "ts"),
    SdkRow("bulk", "addBulk(100), sequential", "ts"),
    SdkRow("process", "push + Worker process (50 x 20)", "ts"),
    SdkRow("pyworker", "push + Python SDK Worker (50 x 20)", "python"),
)
"""The report's rows, in the order they run against each server."""


class SdkError(Exception):
    """A client failed, timed out or reported a wrong result; the message says which."""


class CpuTime(NamedTuple):
    """CPU seconds in user and in system (kernel) mode."""

    user: float
    system: float

    @property
    def total(self) -> float:
        """User + system seconds."""
        return self.user + self.system

    def since(self, before: CpuTime) -> CpuTime:
        """The time used between the reading ``before`` and this one (never negative)."""
        return CpuTime(max(0.0, self.user - before.user), max(0.0, self.system - before.system))


@dataclass(frozen=True)
class SdkRun:
    """One timed row: jobs, wall seconds, and the CPU time the server and the client used
    meanwhile (None when the server's process could not be found)."""

    jobs: int
    seconds: float
    server_cpu: CpuTime | None
    client_cpu: CpuTime | None = None

    @property
    def rate(self) -> float:
        """Jobs per second."""
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    @property
    def server_cpu_per_1000(self) -> float | None:
        """The server's CPU seconds (user + system) per 1,000 jobs."""
        return None if self.server_cpu is None else self.server_cpu.total / self.jobs * 1000


# --- CPU time from /proc -------------------------------------------------------------------


def stat_ticks(stat: str) -> tuple[int, int]:
    """(utime + cutime, stime + cstime), in clock ticks, of one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ``)``: field 3 (the state) is the first after it,
    fields 14-17 are utime, stime, cutime, cstime. cutime/cstime hold the children that exited
    and were waited for, so a child's time is not lost when it ends between two readings.
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return utime + cutime, stime + cstime


def descendants(pid: int) -> list[int]:
    """The pids of every live descendant of ``pid`` (none if it is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def tree_cpu(
    pid: int,
    *,
    proc_root: Path = Path("/proc"),
    children: Callable[[int], Iterable[int]] = descendants,
    ticks_per_second: int = CLOCK_TICKS,
) -> CpuTime:
    """CPU time used so far by ``pid``, its live descendants and the children they reaped;
    a process that vanished while being read counts as nothing."""
    user = system = 0
    for member in [pid, *children(pid)]:
        try:
            member_user, member_system = stat_ticks((proc_root / str(member) / "stat").read_text())
        except (OSError, ValueError):
            continue
        user += member_user
        system += member_system
    return CpuTime(user / ticks_per_second, system / ticks_per_second)


def cpu_between(pid: int | None, before: CpuTime | None) -> CpuTime | None:
    """CPU time ``pid``'s tree used since the reading ``before`` (None without a pid)."""
    if pid is None or before is None:
        return None
    return tree_cpu(pid).since(before)


def cpu_now(pid: int | None) -> CpuTime | None:
    """A reading for :func:`cpu_between` (None without a pid)."""
    return None if pid is None else tree_cpu(pid)


# --- one row: a client process and its handshake -------------------------------------------


def client_command(row: SdkRow, host: str, port: int, queue_name: str, jobs: int) -> list[str]:
    """The command line of ``row``'s client."""
    where = [host, str(port), queue_name, str(jobs)]
    if row.client == "python":
        return [sys.executable, "-m", "benchmarks.sdk_python", *where]
    return [str(BUN), "run", str(CLIENT_SCRIPT), row.key, *where]


def sdk_missing() -> str | None:
    """Why the TypeScript SDK cannot run, or None if bun and the SDK are installed."""
    if BUN.exists() and SDK_ENTRY.exists():
        return None
    return (
        f"the TypeScript SDK and bun are not installed in {TS_DIR}:"
        " run `make tests/interop/ts/node_modules/.installed` (or `make test`)"
    )


class ClientProcess:
    """A running client, its stdout lines in a queue (read by a thread, so waits can time out)
    and the tail of its stderr."""

    def __init__(self, command: Sequence[str]) -> None:
        """Start ``command`` with pipes; the SDK's module path is passed in the environment."""
        env = {**os.environ, "BUNQUEUE_CLIENT": str(SDK_ENTRY), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            list(command),
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.errors: deque[str] = deque(maxlen=20)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.readers = [
            threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True),
            threading.Thread(target=self._tail, args=(self.process.stderr,), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def __enter__(self) -> ClientProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _read(self, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                self.lines.put(line.strip())
        self.lines.put(None)  # end of output

    def _tail(self, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                self.errors.append(line.rstrip())

    def next_line(self, timeout: float, what: str) -> str:
        """The next stdout line, or :class:`SdkError` at its end or after ``timeout`` s."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise SdkError(f"no {what} within {timeout:g} s{self.stderr_tail()}") from None
        if line is None:
            self.process.wait(timeout=10)
            raise SdkError(
                f"the client exited (code {self.process.returncode}) before {what}"
                f"{self.stderr_tail()}"
            )
        return line

    def go(self) -> None:
        """Tell the client to start its timed part."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stderr_tail(self) -> str:
        """``: <last stderr lines>``, or nothing if it printed none (all of them once the
        client has exited: its stderr reader then runs to the end of the pipe)."""
        if self.process.poll() is not None:
            self.readers[1].join(timeout=5)
        return (": " + " | ".join(list(self.errors)[-5:])) if self.errors else ""

    def finish(self, timeout: float = 30.0) -> None:
        """Wait for the client to close and exit; :class:`SdkError` if it fails to (a failure
        while closing may be the server's, so the row does not count)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SdkError(f"the client did not exit within {timeout:g} s of its report") from None
        if code != 0:
            raise SdkError(f"the client failed after its report (code {code}){self.stderr_tail()}")

    def close(self) -> None:
        """End the client if it still runs (after a failure) and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def parse_report(line: str, jobs: int) -> tuple[int, float]:
    """The (jobs, seconds) of a client's JSON report, checked against the jobs asked for."""
    try:
        report = json.loads(line)
        done, seconds = int(report["jobs"]), float(report["seconds"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SdkError(f"the client printed {line!r}, not a report") from exc
    if done != jobs or seconds <= 0:
        raise SdkError(f"the client reported {done} jobs in {seconds} s, asked for {jobs}")
    return done, seconds


class PySpy:
    """``py-spy record`` on a process for the length of a ``with`` block (``--py-spy DIR``):
    it writes collapsed stacks (``--format raw``) to ``path``, stopped by SIGINT.

    Only samples holding the GIL are kept (``--gil``): on a loaded machine a thread that is
    runnable but waiting for a CPU looks busy to py-spy, and a broker that has just written to
    a socket (waking its client) often waits so inside the system call, which then seemed to
    take a third of the time while the kernel's share of its CPU time was a sixth. A system
    call releases the GIL, so its cost shows in the ``sys`` share of the progress lines instead.
    """

    def __init__(self, pid: int, path: Path, rate: int = 500) -> None:
        """Prepare to sample ``pid`` ``rate`` times a second into ``path``."""
        self.command = [
            str(Path(sys.executable).with_name("py-spy")),
            "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
            "--output", str(path), "--nonblocking", "--gil",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(0.5)  # py-spy attaches before the row starts
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_row(
    row: SdkRow,
    host: str,
    port: int,
    server_pid: int | None,
    jobs: int,
    profile: Path | None = None,
) -> SdkRun:
    """Run one row against ``host:port`` on a fresh queue; raise :class:`SdkError` if the client
    fails. With ``profile`` (a file path), py-spy samples the server during the timed part."""
    queue_name = f"sdk-{row.key}-{secrets.token_hex(4)}"
    with ClientProcess(client_command(row, host, port, queue_name, jobs)) as client:
        if (line := client.next_line(READY_TIMEOUT, "ready")) != "ready":
            raise SdkError(f"the client printed {line!r} instead of ready{client.stderr_tail()}")
        spy = (
            PySpy(server_pid, profile)
            if profile is not None and server_pid is not None
            else contextlib.nullcontext()
        )
        with spy:
            server_before, client_before = cpu_now(server_pid), cpu_now(client.process.pid)
            client.go()
            line = client.next_line(max(MIN_ROW_TIMEOUT, jobs / 50), "report")
            server_cpu = cpu_between(server_pid, server_before)
            client_cpu = cpu_between(client.process.pid, client_before)
        done, seconds = parse_report(line, jobs)
        client.finish()
        return SdkRun(done, seconds, server_cpu, client_cpu)


# --- the report ----------------------------------------------------------------------------

Results = Mapping[tuple[str, str], Mapping[str, Sequence[SdkRun]]]
"""(server kind, mode) -> row key -> the runs of that row."""


def median_or_none(values: Iterable[float | None]) -> float | None:
    """The median of the known values, None if there are none."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_cpu(runs: Sequence[SdkRun]) -> float | None:
    """The median server CPU seconds per 1,000 jobs of the runs."""
    return median_or_none(run.server_cpu_per_1000 for run in runs)


def cpu_cell(runs: Sequence[SdkRun]) -> str:
    """CPU seconds per 1,000 jobs, three decimals."""
    value = median_cpu(runs)
    return "-" if value is None else f"{value:.3f}"


def sdk_table(
    modes: Sequence[str], kinds: Sequence[str], results: Results, rows: Sequence[SdkRow]
) -> str:
    """One table: a line per mode and row; per server its median jobs/s (lowest-highest) and
    CPU s per 1,000 jobs; trioq's ratio of jobs/s and of CPU per job to every other server."""
    others = [kind for kind in kinds if kind != "trioq"]
    lines = []
    for mode in modes:
        for row in rows:
            per_kind = [results.get((kind, mode), {}).get(row.key, ()) for kind in kinds]
            mine = per_kind[0] if kinds and kinds[0] == "trioq" else ()
            cells = [f"{mode}: {row.title}"]
            for runs in per_kind:
                cells += [rate_cell(runs), cpu_cell(runs)]
            for kind in others:
                theirs = results.get((kind, mode), {}).get(row.key, ())
                cells.append(ratio(median_rate(mine), median_rate(theirs)))
                cells.append(ratio(median_cpu(mine), median_cpu(theirs)))
            lines.append(cells)
    headers = ["SDK workload (jobs/s: median (low-high))"]
    for kind in kinds:
        headers += [label(kind), "CPU s/1k"]
    for kind in others:
        short = kind if kind.startswith(BEFORE) else "ref"
        headers += [f"trioq/{short}", f"CPU trioq/{short}"]
    return table(headers, lines)


# --- the comparison ------------------------------------------------------------------------


def log(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def cpu_text(cpu: CpuTime | None) -> str:
    """``1.58 (sys 16%)``: seconds, and the kernel's share of them."""
    if cpu is None:
        return "-"
    share = f" (sys {cpu.system / cpu.total:.0%})" if cpu.total > 0 else ""
    return f"{cpu.total:.2f}{share}"


def describe(run: SdkRun) -> str:
    """One log line's worth of a run."""
    server, client = cpu_text(run.server_cpu), cpu_text(run.client_cpu)
    return f"{run.rate:>9,.0f} jobs/s  CPU s: server {server}, client {client}"


def profile_path(
    args: argparse.Namespace, kind: str, mode: str, row: SdkRow, rep: int
) -> Path | None:
    """Where py-spy writes the profile of a trioq row (``--py-spy DIR``), None otherwise."""
    if args.py_spy is None or kind == "reference":
        return None
    return Path(args.py_spy) / f"{kind}-{mode}-{row.key}-{rep + 1}.txt"


def run_server(
    kind: str,
    mode: str,
    rep: int,
    args: argparse.Namespace,
    into: dict[str, list[SdkRun]],
    postgres: SharedPostgres,
    notes: list[str],
) -> None:
    """Start one server, run the chosen rows against it, stop it; failures become notes."""
    log(f"[{mode}] {label(kind)}: starting (load {load()})")
    try:
        server: RunningServer = start(kind, mode, args, postgres)
    except ServerStartError as exc:
        log(f"[{mode}] {label(kind)}: did not start: {exc}")
        notes.append(f"{label(kind)} ({mode}): did not start: {str(exc).splitlines()[0]}")
        return
    jobs = jobs_for(kind, mode, args)
    try:
        for row in args.rows:
            path = profile_path(args, kind, mode, row, rep)
            try:
                run = run_row(row, server.host, server.port, server.pid, jobs, path)
            except (SdkError, OSError) as exc:
                log(f"[{mode}] {label(kind)}: {row.title}: failed: {exc}")
                notes.append(f"{label(kind)} ({mode}), {row.title}: failed: {exc}")
                continue
            into[row.key].append(run)
            log(f"[{mode}] {label(kind)}: {row.title:<36} {describe(run)}")
    finally:
        server.stop()


def compare(args: argparse.Namespace) -> int:
    """Interleave the servers ``args.repeat`` times (compare.run_compare); print one table."""
    have_reference = with_reference(args)
    results: dict[tuple[str, str], dict[str, list[SdkRun]]] = defaultdict(lambda: defaultdict(list))
    notes: list[str] = []

    def each_server(kind: str, mode: str, rep: int, postgres: SharedPostgres) -> None:
        run_server(kind, mode, rep, args, results[(kind, mode)], postgres, notes)

    before, after = run_compare(args, have_reference, each_server)
    kinds = ["trioq", *(k for k in kinds_for("memory", 0, args, have_reference) if k != "trioq")]
    print(
        f"Through the official SDKs (TypeScript: bunqueue 2.9.5 under bun; Python:"
        f" bunqueue-client): {args.repeat} interleaved rounds, {args.jobs:,} jobs per row"
        f" (the reference in postgres mode: {args.reference_pg_jobs:,});"
        f" load average before {before}, after {after}"
    )
    print(
        "CPU s/1k: the server's CPU seconds (user + system, its process and children) per"
        " 1,000 jobs of the timed part (PostgreSQL's own processes are not counted)"
    )
    print()
    print(sdk_table(args.modes, kinds, results, args.rows))
    for note in dict.fromkeys(notes):
        print(f"  note: {note}")
    return 1 if notes else 0


def run_single(args: argparse.Namespace) -> int:
    """Run the chosen rows against a server that is already running at ``--host``/``--port``."""
    pid = args.server_pid or find_listening_pid(args.port)
    if pid is None:
        log(f"no process found listening on port {args.port}: CPU time not shown")
    status = 0
    for row in args.rows:
        path = Path(args.py_spy) / f"{row.key}.txt" if args.py_spy and pid else None
        try:
            run = run_row(row, args.host, args.port, pid, args.jobs, path)
        except (SdkError, OSError) as exc:
            print(f"{row.title:<36} failed: {exc}", flush=True)
            status = 1
            continue
        cpu = run.server_cpu_per_1000
        per_1000 = "" if cpu is None else f"  server CPU s/1k {cpu:.3f}"
        print(f"{row.title:<36} {describe(run)}{per_1000}", flush=True)
    return status


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sdk", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="a running server: no --compare")
    parser.add_argument("--server-pid", type=int, help="with --port: whose CPU time to read")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per row")
    parser.add_argument("--rows", default=",".join(row.key for row in SDK_ROWS))
    parser.add_argument("--modes", default="memory,sqlite")
    add_comparison_arguments(parser, "jobs per row")
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="record py-spy (pip install py-spy) on trioq during each row, as collapsed"
        " stacks in DIR/<server>-<mode>-<row>-<round>.txt",
    )
    args = parser.parse_args(argv)
    by_key = {row.key: row for row in SDK_ROWS}
    keys = [key.strip() for key in args.rows.split(",") if key.strip()]
    unknown = [key for key in keys if key not in by_key]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; choose from {', '.join(by_key)}")
    args.rows = [by_key[key] for key in keys]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.baseline = [path.resolve() for path in args.baseline]
    if len(args.baseline_python) > len(args.baseline):
        parser.error("each --baseline-python belongs to a --baseline")
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    missing = sdk_missing()
    if missing and any(row.client == "ts" for row in args.rows):
        print(missing, file=sys.stderr)
        return 2
    if args.port is not None:
        return run_single(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
