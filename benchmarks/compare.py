"""``python -m benchmarks.loadgen --compare``: trioq beside the reference, runs interleaved.

For each repetition and each mode, trioq and the reference are started in turn (their order
alternates from one repetition to the next), every row of :data:`loadgen.ROWS` runs against each,
and the server is stopped. A do-nothing Trio server (:mod:`benchmarks.nullserver`) runs once per
repetition: its sequential round trip is the floor for a Trio broker, and its PUSH rates show
what the generator can drive. The report gives medians with the spread (lowest-highest) of the
runs and the machine's load average before and after, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from .loadgen import ROWS, LoadError, Row, RunResult, capacity, log, ms, percentile, run_row
from .servers import (
    REFERENCE_DIR,
    REFERENCE_MODES,
    ReferenceServer,
    RunningServer,
    ServerStartError,
    TrioqServer,
    reference_available,
)

Results = dict[str, list[RunResult]]
FLOOR_ROWS = ("push", "wide", "seq")


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def start(kind: str, mode: str, reference_dir: Path = REFERENCE_DIR) -> RunningServer:
    """Start trioq, the reference (scripts in ``reference_dir``) or the null server."""
    if kind == "trioq":
        return TrioqServer.start(mode)
    if kind == "null":
        return TrioqServer.start("memory", module="benchmarks.nullserver")
    return ReferenceServer.start(mode, script_dir=reference_dir)


def run_rows(
    kind: str, mode: str, rows: Sequence[Row], args: argparse.Namespace, into: Results
) -> None:
    """Start one server, run ``rows`` against it, stop it; failures become notes."""
    log(f"[{mode}] {kind}: starting (load {load()})")
    try:
        server = start(kind, mode, args.reference_dir)
    except ServerStartError as exc:
        log(f"[{mode}] {kind}: did not start: {exc}")
        return
    try:
        for row in rows:
            try:
                result = run_row(
                    row, server.host, server.port, args.jobs, args.processes, args.rate
                )
            except (OSError, LoadError) as exc:
                log(f"[{mode}] {kind}: {row.title}: failed: {exc}")
                continue
            into[row.key].append(result)
            log(f"[{mode}] {kind}: {row.title:<38} {result.rate:>10,.0f} jobs/s")
    finally:
        server.stop()


def median_rate(results: list[RunResult]) -> float | None:
    """The median rate of the runs, None without runs."""
    return statistics.median(r.rate for r in results) if results else None


def rate_cell(results: list[RunResult]) -> str:
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


def mode_table(mode: str, trioq: Results, reference: Results | None, null: Results) -> str:
    """The side-by-side table of one mode."""
    rows = []
    for row in ROWS:
        if row.key == "wide":
            continue
        if row.paced:
            continue
        mine, theirs = trioq[row.key], reference[row.key] if reference else []
        rows.append(
            [
                row.title,
                rate_cell(mine),
                rate_cell(theirs) if reference else "—",
                ratio(median_rate(mine), median_rate(theirs)) if reference else "",
            ]
        )
    for fraction, name in ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")):
        rows.append(
            [
                f"{name} PUSH latency at 16 x 8 (ms)",
                latency_cell(trioq["push"], fraction),
                latency_cell(reference["push"], fraction) if reference else "—",
                "",
            ]
        )
    for fraction, name in ((0.5, "p50"), (0.99, "p99")):
        rows.append(
            [
                f"{name} push-to-start at fixed rate (ms)",
                latency_cell(trioq["paced"], fraction, True),
                latency_cell(reference["paced"], fraction, True) if reference else "—",
                "",
            ]
        )
    seq = median_rate(trioq["seq"])
    floor = median_rate(null["seq"])
    rows.append(
        [
            "sequential round trip / null Trio server's",
            ratio(floor, seq),  # round trip is the inverse of the rate
            "",
            "",
        ]
    )
    return table(["scenario (jobs/s, median (low-high))", "trioq", "reference", "ratio"], rows)


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


def run_compare(args: argparse.Namespace) -> int:
    """Interleave the servers ``args.repeat`` times; print one table per mode and the floor."""
    rows = [r for r in ROWS if r.key in args.rows and r.key != "wide"]
    floor_rows = [r for r in ROWS if r.key in FLOOR_ROWS]
    results: dict[tuple[str, str], Results] = defaultdict(lambda: defaultdict(list))
    null: Results = defaultdict(list)
    have_reference = reference_available(args.reference_dir)
    if not have_reference:
        log(f"reference: not available ({args.reference_dir}/start.sh is missing)")
    before = load()
    for rep in range(args.repeat):
        run_rows("null", "memory", floor_rows, args, null)
        for mode in args.modes:
            kinds = ["trioq"]
            if have_reference and mode in REFERENCE_MODES:
                kinds.append("reference")
            if rep % 2:
                kinds.reverse()
            for kind in kinds:
                run_rows(kind, mode, rows, args, results[(kind, mode)])
    after = load()
    print(
        f"{args.repeat} interleaved runs per server, {args.jobs:,} jobs per concurrent row"
        f" (sequential: a quarter), paced row at {args.rate:,.0f} jobs/s offered for 4 s;"
        f" generator: {args.processes} processes; load average before {before}, after {after}"
    )
    print()
    for mode in args.modes:
        reference = results[("reference", mode)] if mode in REFERENCE_MODES else None
        print(f"mode {mode}")
        print(mode_table(mode, results[("trioq", mode)], reference, null))
        print()
    print(floor_table(null))
    return 0
