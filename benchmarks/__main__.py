"""Command line: ``python -m benchmarks``.

Two ways to run:

* against a server that is already running::

      python -m benchmarks --host 127.0.0.1 --port 6789 [--jobs 20000] [--label NAME]
                           [--server-pid PID] [--repeat N]

* side by side, starting trioq and the reference server itself, one after the other::

      python -m benchmarks --compare [--jobs 20000] [--modes memory[,sqlite]] [--repeat N]

Progress goes to stderr; the result tables go to stdout. See ``benchmarks/README.md``.

These rows use one connection each; concurrent load (many connections, latency percentiles,
push-to-start) is ``python -m benchmarks.loadgen``, which is what ``make bench`` runs.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .client import ProtocolError
from .scenarios import SCENARIOS, ScenarioFailure, ScenarioResult, run_scenario
from .servers import (
    MODES,
    REFERENCE_DIR,
    REFERENCE_MODES,
    ReferenceServer,
    RssSampler,
    RunningServer,
    ServerStartError,
    TrioqServer,
    find_listening_pid,
    reference_available,
)

MIB = 1024 * 1024
Outcome = ScenarioResult | ScenarioFailure


@dataclass
class SuiteResult:
    """Every scenario's outcome against one server, plus the server's peak RSS."""

    outcomes: list[Outcome] = field(default_factory=list)
    peak_rss: int | None = None
    rss_note: str = ""

    @property
    def failed(self) -> bool:
        """True if any scenario failed."""
        return any(isinstance(o, ScenarioFailure) for o in self.outcomes)

    def outcome(self, key: str) -> Outcome | None:
        """The outcome of the scenario called ``key``, if it ran."""
        return next((o for o in self.outcomes if o.key == key), None)


def log(message: str) -> None:
    """Print a progress line to stderr."""
    print(message, file=sys.stderr, flush=True)


def run_suite(
    host: str,
    port: int,
    *,
    jobs: int,
    repeat: int,
    timeout: float | None,
    pid: int | None,
    progress: Callable[[str], None] = log,
) -> SuiteResult:
    """Run every scenario against ``host:port`` while sampling the RSS of process ``pid``.

    A failing scenario is recorded as a :class:`ScenarioFailure` and the next one still runs.
    """
    suite = SuiteResult()
    sampler = RssSampler(pid) if pid is not None else None
    if sampler is None:
        suite.rss_note = "server process not found; pass --server-pid"
    else:
        sampler.start()
    try:
        for scenario in SCENARIOS:
            try:
                done = run_scenario(scenario, host, port, jobs, repeat=repeat, timeout=timeout)
                progress(
                    f"  {scenario.title:<34} {done.rate:>12,.0f} jobs/s"
                    f"  (client CPU {done.client_cpu:.0%})"
                )
                result: Outcome = done
            except (OSError, ProtocolError) as exc:
                message = f"{type(exc).__name__}: {exc}"
                result = ScenarioFailure(scenario.key, scenario.title, message)
                progress(f"  {scenario.title:<34} failed: {message}")
            suite.outcomes.append(result)
    finally:
        if sampler is not None:
            suite.peak_rss = sampler.stop()
            if suite.peak_rss is None:
                suite.rss_note = f"could not read the memory of pid {pid}"
    return suite


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        parts = [first.ljust(widths[0])]
        parts += [cell.rjust(width) for cell, width in zip(rest, widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def _rate(outcome: Outcome | None) -> str:
    if outcome is None:
        return "-"
    if isinstance(outcome, ScenarioFailure):
        return "failed"
    return f"{outcome.rate:,.0f}"


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / MIB:,.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _failures(name: str, suite: SuiteResult) -> list[str]:
    return [
        f"{name}: {o.title} failed: {o.error}"
        for o in suite.outcomes
        if isinstance(o, ScenarioFailure)
    ]


def report_single(label: str, where: str, jobs: int, repeat: int, suite: SuiteResult) -> str:
    """The result table of a run against one server."""
    rows = []
    for scenario in SCENARIOS:
        outcome = suite.outcome(scenario.key)
        cpu = f"{outcome.client_cpu:.0%}" if isinstance(outcome, ScenarioResult) else "-"
        rows.append([scenario.title, f"{scenario.size(jobs):,}", _rate(outcome), cpu])
    runs = f", median of {repeat} runs" if repeat > 1 else ""
    lines = [
        f"{label} at {where}: {jobs:,} jobs per scenario, one connection each{runs}",
        "",
        format_table(["scenario", "jobs", "jobs/s", "client CPU"], rows),
        "",
        f"server peak RSS: {_mib(suite.peak_rss)} MiB"
        + (f" ({suite.rss_note})" if suite.rss_note else " (process and children, every 50 ms)"),
    ]
    lines += _failures(label, suite)
    return "\n".join(lines)


def report_compare(
    mode: str, jobs: int, repeat: int, suites: dict[str, SuiteResult], notes: list[str]
) -> str:
    """The side-by-side table of one mode; columns only for the servers that ran."""
    trioq, reference = suites.get("trioq"), suites.get("reference")
    headers = ["scenario", "jobs"]
    if trioq:
        headers.append("trioq jobs/s")
    if reference:
        headers.append("reference jobs/s")
    both = trioq is not None and reference is not None
    if both:
        headers.append("ratio")
    rows = []
    for scenario in SCENARIOS:
        row = [scenario.title, f"{scenario.size(jobs):,}"]
        mine = trioq.outcome(scenario.key) if trioq else None
        theirs = reference.outcome(scenario.key) if reference else None
        if trioq:
            row.append(_rate(mine))
        if reference:
            row.append(_rate(theirs))
        if both:
            row.append(
                _ratio(
                    mine.rate if isinstance(mine, ScenarioResult) else None,
                    theirs.rate if isinstance(theirs, ScenarioResult) else None,
                )
            )
        rows.append(row)
    rss_row = ["peak RSS (MiB)", ""]
    if trioq:
        rss_row.append(_mib(trioq.peak_rss))
    if reference:
        rss_row.append(_mib(reference.peak_rss))
    if trioq and reference:
        rss_row.append(_ratio(trioq.peak_rss, reference.peak_rss))
    rows.append(rss_row)
    runs = f", median of {repeat} runs" if repeat > 1 else ""
    lines = [f"mode {mode}: {jobs:,} jobs per scenario, one connection each{runs}", ""]
    if trioq or reference:
        lines.append(format_table(headers, rows))
        if both:
            lines.append("ratio = trioq / reference (above 1.00x: trioq faster, or more RAM)")
    else:
        lines.append("no server could be benchmarked")
    for name, suite in suites.items():
        lines += _failures(name, suite)
        if suite.rss_note:
            lines.append(f"{name}: peak RSS unknown ({suite.rss_note})")
    lines += notes
    return "\n".join(lines)


def run_single(args: argparse.Namespace) -> int:
    """Benchmark the server at ``--host``/``--port``; print its table. Returns the exit code."""
    where = f"{args.host}:{args.port}"
    try:
        socket.create_connection((args.host, args.port), timeout=args.timeout).close()
    except OSError as exc:
        log(f"cannot connect to {where}: {exc}")
        return 1
    pid = args.server_pid if args.server_pid is not None else find_listening_pid(args.port)
    log(f"benchmarking {args.label} at {where}" + (f" (pid {pid})" if pid else ""))
    suite = run_suite(
        args.host, args.port, jobs=args.jobs, repeat=args.repeat, timeout=args.timeout, pid=pid
    )
    print(report_single(args.label, where, args.jobs, args.repeat, suite))
    return 1 if suite.failed else 0


def _start(kind: str, mode: str, reference_dir: Path) -> RunningServer:
    if kind == "trioq":
        return TrioqServer.start(mode)
    return ReferenceServer.start(mode, script_dir=reference_dir)


def run_compare(args: argparse.Namespace) -> int:
    """Start trioq, then the reference, for each mode; print a side-by-side table per mode.

    Returns 1 if trioq could not be benchmarked cleanly (did not start, or a scenario failed).
    """
    exit_code = 0
    have_reference = reference_available(args.reference_dir)
    for mode in args.modes:
        suites: dict[str, SuiteResult] = {}
        notes: list[str] = []
        for kind in ("trioq", "reference"):
            if kind == "reference" and mode not in REFERENCE_MODES:
                notes.append(f"reference: has no {mode} mode; showing trioq alone")
                continue
            if kind == "reference" and not have_reference:
                notes.append(
                    f"reference: not available ({args.reference_dir}/start.sh is missing);"
                    " showing trioq alone"
                )
                continue
            log(f"[{mode}] starting {kind} ...")
            try:
                server = _start(kind, mode, args.reference_dir)
            except ServerStartError as exc:
                log(f"[{mode}] {kind} did not start")
                notes.append(f"{kind}: not benchmarked -- {exc}")
                if kind == "trioq":
                    exit_code = 1
                continue
            try:
                log(f"[{mode}] {kind} on {server.host}:{server.port} (pid {server.pid})")
                suites[kind] = run_suite(
                    server.host,
                    server.port,
                    jobs=args.jobs,
                    repeat=args.repeat,
                    timeout=args.timeout,
                    pid=server.pid,
                )
            finally:
                server.stop()
            if kind == "trioq" and suites[kind].failed:
                exit_code = 1
        print(report_compare(mode, args.jobs, args.repeat, suites, notes))
        print()
    return exit_code


def _modes(value: str) -> list[str]:
    modes = [m.strip() for m in value.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            raise argparse.ArgumentTypeError(f"unknown mode {mode!r} (choose from {MODES})")
    return modes


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Throughput (jobs/s) and peak RSS of a bunqueue-protocol server.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="server address (default %(default)s)")
    parser.add_argument("--port", type=int, help="server TCP port (required without --compare)")
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=20_000,
        help="jobs per scenario (sequential PUSH uses a quarter); default %(default)s",
    )
    parser.add_argument("--label", default="server", help="name of the server in the report")
    parser.add_argument(
        "--server-pid",
        type=int,
        help="pid whose RSS (with children) to sample; default: the process listening on --port",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="start trioq and the reference server here and compare them side by side",
    )
    parser.add_argument(
        "--modes",
        type=_modes,
        nargs="+",
        default=[["memory"]],
        metavar="MODE",
        help="with --compare: storage modes to run, from memory,sqlite,postgres (default memory)",
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        default=REFERENCE_DIR,
        help="with --compare: directory of the reference's start.sh/stop.sh (default %(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        help="runs per scenario; the median is reported (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait on any one socket operation (default %(default)s)",
    )
    args = parser.parse_args(argv)
    args.modes = list(dict.fromkeys(mode for group in args.modes for mode in group))
    if not args.compare and args.port is None:
        parser.error("--port is required unless --compare is given")
    if args.compare and (args.port is not None or args.server_pid is not None):
        parser.error("--port and --server-pid do not apply to --compare (it starts the servers)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args(argv)
    try:
        return run_compare(args) if args.compare else run_single(args)
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
