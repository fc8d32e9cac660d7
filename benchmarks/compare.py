"""``python -m benchmarks.loadgen --compare``: trioq beside the reference, runs interleaved.

For each repetition and each mode, trioq, the reference and (with ``--baseline DIR``) an older
trioq checkout are started in turn (their order rotates from one repetition to the next), every
row of :data:`loadgen.ROWS` runs against each, and the server is stopped. In postgres mode every
server gets a fresh, empty database on one private PostgreSQL server (:class:`SharedPostgres`),
so all of them use the same PostgreSQL with the same settings. A do-nothing Trio server
(:mod:`benchmarks.nullserver`) runs once per repetition: its sequential round trip is the floor
for a Trio broker, and its PUSH rates show what the generator can drive. The report gives
medians with the spread (lowest-highest) of the runs and the machine's load average before and
after, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol

from .loadgen import ROWS, LoadError, Row, RunResult, capacity, log, ms, percentile, run_row
from .servers import (
    REFERENCE_MODES,
    ReferenceServer,
    RunningServer,
    ServerStartError,
    SharedPostgres,
    TrioqServer,
    reference_available,
)

Results = dict[str, list[RunResult]]
FLOOR_ROWS = ("push", "wide", "seq")
BEFORE = "before"
"""The kind of the first ``--baseline`` checkout; the next ones are before2, before3, ..."""


def before_kind(index: int) -> str:
    """The kind of the ``--baseline`` checkout at ``index``."""
    return BEFORE if index == 0 else f"{BEFORE}{index + 1}"


def baseline_python(args: argparse.Namespace, index: int) -> str:
    """The interpreter of the ``--baseline`` checkout at ``index``: this one, unless a
    ``--baseline-python`` in the same position names another."""
    pythons = args.baseline_python
    return pythons[index] if index < len(pythons) else sys.executable


def label(kind: str) -> str:
    """The column title of a server kind."""
    return f"trioq {kind}" if kind.startswith(BEFORE) else kind


def with_reference(args: argparse.Namespace) -> bool:
    """Whether the reference runs beside trioq: not with ``--no-reference`` (then only trioq
    and the ``--baseline`` checkouts run, e.g. two builds of trioq), nor when its scripts are
    missing; says why not on stderr."""
    if args.no_reference:
        log("reference: left out (--no-reference)")
        return False
    if not reference_available(args.reference_dir):
        log(f"reference: not available ({args.reference_dir}/start.sh is missing)")
        return False
    return True


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def start(
    kind: str, mode: str, args: argparse.Namespace, postgres: SharedPostgres | None = None
) -> RunningServer:
    """Start trioq, an older trioq of ``args.baseline`` ("before"...), the reference (scripts in
    ``args.reference_dir``) or the null server; in postgres mode on a fresh database of
    ``postgres``."""
    url = postgres.fresh_url() if mode == "postgres" and postgres is not None else ""
    if kind == "trioq":
        return TrioqServer.start(mode, postgres_url=url)
    if kind.startswith(BEFORE):
        index = int(kind.removeprefix(BEFORE) or 1) - 1
        root, python = args.baseline[index], baseline_python(args, index)
        return TrioqServer.start(mode, postgres_url=url, root=root, python=python)
    if kind == "null":
        return TrioqServer.start("memory", module="benchmarks.nullserver")
    return ReferenceServer.start(mode, script_dir=args.reference_dir, postgres_url=url)


def jobs_for(kind: str, mode: str, args: argparse.Namespace) -> int:
    """Jobs per concurrent row: fewer for the reference in postgres mode, which runs at a few
    hundred jobs/s (the rate is jobs per second whatever the count)."""
    if kind == "reference" and mode == "postgres":
        return int(args.reference_pg_jobs)
    return int(args.jobs)


def run_rows(
    kind: str,
    mode: str,
    rows: Sequence[Row],
    args: argparse.Namespace,
    into: Results,
    postgres: SharedPostgres | None = None,
    notes: list[str] | None = None,
) -> None:
    """Start one server, run ``rows`` against it, stop it; failures are logged and noted."""
    log(f"[{mode}] {kind}: starting (load {load()})")
    notes = notes if notes is not None else []
    try:
        server = start(kind, mode, args, postgres)
    except ServerStartError as exc:
        log(f"[{mode}] {kind}: did not start: {exc}")
        notes.append(f"{label(kind)}: did not start: {str(exc).splitlines()[0]}")
        return
    jobs = jobs_for(kind, mode, args)
    try:
        for row in rows:
            try:
                result = run_row(row, server.host, server.port, jobs, args.processes, args.rate)
            except (OSError, LoadError) as exc:
                log(f"[{mode}] {kind}: {row.title}: failed: {exc}")
                notes.append(f"{label(kind)}, {row.title}: failed: {exc}")
                continue
            into[row.key].append(result)
            log(f"[{mode}] {kind}: {row.title:<38} {result.rate:>10,.0f} jobs/s")
    finally:
        server.stop()


class Rated(Protocol):
    """A timed run: anything with a jobs/s ``rate`` (loadgen's runs, the SDK harness's)."""

    @property
    def rate(self) -> float:
        """Jobs per second."""
        ...


def median_rate(results: Sequence[Rated]) -> float | None:
    """The median rate of the runs, None without runs."""
    return statistics.median(r.rate for r in results) if results else None


def rate_cell(results: Sequence[Rated]) -> str:
    """``median (lowest-highest)`` jobs/s."""
    if not results:
        return "-"
    rates = [r.rate for r in results]
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def latency_cell(results: list[RunResult], fraction: float, push_to_start: bool = False) -> str:
    """The median over runs of one latency percentile, in ms."""
    if not results:
        return "-"
    values = [
        percentile(r.push_to_start if push_to_start else r.latencies, fraction) for r in results
    ]
    values = [v for v in values if not math.isnan(v)]
    return ms(statistics.median(values)) if values else "-"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x``."""
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain text, first column left-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for cells in [headers, ["-" * w for w in widths], *rows]:
        first, *rest = cells
        padded = (c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))
        lines.append("  ".join([first.ljust(widths[0]), *padded]).rstrip())
    return "\n".join(lines)


def mode_table(servers: dict[str, Results], null: Results, sqlite: Results | None = None) -> str:
    """The side-by-side table of one mode: a column per server that ran (``servers`` maps
    kind to results, trioq first), trioq's ratio to each other one, and in postgres mode
    (``sqlite`` given) trioq's ratio to its own SQLite mode."""
    trioq = servers["trioq"]
    others = [kind for kind in servers if kind != "trioq"]
    rows = []
    for row in ROWS:
        if row.key == "wide" or row.paced:
            continue
        mine = median_rate(trioq[row.key])
        cells = [row.title, *(rate_cell(results[row.key]) for results in servers.values())]
        cells += [ratio(mine, median_rate(servers[kind][row.key])) for kind in others]
        if sqlite is not None:
            cells.append(ratio(mine, median_rate(sqlite[row.key])))
        rows.append(cells)
    blank = [""] * (len(others) + (sqlite is not None))
    for fraction, name in ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")):
        rows.append(
            [
                f"{name} PUSH latency at 16 x 8 (ms)",
                *(latency_cell(results["push"], fraction) for results in servers.values()),
                *blank,
            ]
        )
    for fraction, name in ((0.5, "p50"), (0.99, "p99")):
        rows.append(
            [
                f"{name} push-to-start at fixed rate (ms)",
                *(latency_cell(results["paced"], fraction, True) for results in servers.values()),
                *blank,
            ]
        )
    seq = median_rate(trioq["seq"])
    floor = median_rate(null["seq"])
    # The round trip is the inverse of the rate.
    rows.append(["sequential round trip / null Trio server's", ratio(floor, seq), *[""] * (
        len(servers) - 1), *blank])  # fmt: skip
    headers = ["scenario (jobs/s, median (low-high))", *(label(kind) for kind in servers)]
    headers += [f"trioq/{kind if kind.startswith(BEFORE) else 'ref'}" for kind in others]
    if sqlite is not None:
        headers.append("trioq/sqlite")
    return table(headers, rows)


def floor_table(null: Results) -> str:
    """What the generator drives against the do-nothing Trio server."""
    rows = []
    for key in FLOOR_ROWS:
        row = next(r for r in ROWS if r.key == key)
        results = null[key]
        rows.append(
            [
                row.title,
                rate_cell(results),
                latency_cell(results, 0.99),
                f"{statistics.median(capacity(r) for r in results):,.0f}" if results else "-",
            ]
        )
    headers = ["do-nothing Trio server", "jobs/s", "p99 ms", "jobs per client CPU-s"]
    return table(headers, rows)


def kinds_for(mode: str, rep: int, args: argparse.Namespace, have_reference: bool) -> list[str]:
    """The servers of ``mode`` in repetition ``rep``, their order rotated each repetition."""
    kinds = ["trioq"]
    kinds += [before_kind(index) for index in range(len(args.baseline))]
    if have_reference and mode in REFERENCE_MODES:
        kinds.append("reference")
    shift = rep % len(kinds)
    return kinds[shift:] + kinds[:shift]


def run_compare(
    args: argparse.Namespace,
    have_reference: bool,
    run_server: Callable[[str, str, int, SharedPostgres], None],
    each_round: Callable[[int], None] | None = None,
) -> tuple[str, str]:
    """Interleave the servers ``args.repeat`` times (the one loop of both comparisons: this
    module's and sdk.py's): each round runs ``each_round(rep)`` first, then
    ``run_server(kind, mode, rep, postgres)`` for every mode and every server of it, in the
    rotating order of `kinds_for`. Returns the load average before and after."""
    postgres = SharedPostgres()
    before = load()
    # A plain SIGTERM would end the run without stopping the servers and the PostgreSQL it
    # started: make it unwind like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for rep in range(args.repeat):
            if each_round is not None:
                each_round(rep)
            for mode in args.modes:
                for kind in kinds_for(mode, rep, args, have_reference):
                    run_server(kind, mode, rep, postgres)
    finally:
        postgres.close()
    return before, load()


def compare_loadgen(args: argparse.Namespace) -> int:
    """``loadgen --compare``: interleave the servers ``args.repeat`` times; print one table
    per mode and the floor."""
    rows = [r for r in ROWS if r.key in args.rows and r.key != "wide"]
    floor_rows = [r for r in ROWS if r.key in FLOOR_ROWS]
    results: dict[tuple[str, str], Results] = defaultdict(lambda: defaultdict(list))
    notes: dict[str, list[str]] = defaultdict(list)
    null: Results = defaultdict(list)
    have_reference = with_reference(args)

    def run_server(kind: str, mode: str, rep: int, postgres: SharedPostgres) -> None:
        run_rows(kind, mode, rows, args, results[(kind, mode)], postgres, notes[mode])

    def floor(rep: int) -> None:
        run_rows("null", "memory", floor_rows, args, null)

    before, after = run_compare(args, have_reference, run_server, floor)
    print(
        f"{args.repeat} interleaved runs per server, {args.jobs:,} jobs per concurrent row"
        f" (sequential: a quarter; the reference in postgres mode: {args.reference_pg_jobs:,}),"
        f" paced row at {args.rate:,.0f} jobs/s offered for 4 s;"
        f" generator: {args.processes} processes; load average before {before}, after {after}"
    )
    for index, path in enumerate(args.baseline):
        python = baseline_python(args, index)
        print(f"{label(before_kind(index))}: the checkout at {path}, run by {python}")
    print()
    for mode in args.modes:
        kinds = kinds_for(mode, 0, args, have_reference)
        servers = {kind: results[(kind, mode)] for kind in kinds}
        sqlite = results[("trioq", "sqlite")] if mode == "postgres" else None
        print(
            f"mode {mode}" + (" (one private PostgreSQL, fsync on)" if mode == "postgres" else "")
        )
        print(mode_table(servers, null, sqlite if sqlite else None))
        for note in dict.fromkeys(notes[mode]):  # each once, in order
            print(f"  note: {note}")
        print()
    print(floor_table(null))
    return 0
