"""``python -m benchmarks.stacks FILE ...``: where the samples of py-spy profiles went.

Reads collapsed stacks (``py-spy record --format raw``, as ``benchmarks.sdk --py-spy`` writes
them: one line per distinct stack, ``outer;...;inner COUNT``, each frame ``function (file:line)``)
and prints the functions with the largest share of samples, by self time (the innermost frame)
and by total time (anywhere on the stack, counted once per stack), the callers of the hottest
functions by self time, and the share per source file group (the project's packages, Trio,
msgspec, apsw, the rest). Several files are added up.

    python -m benchmarks.stacks /tmp/prof/trioq-memory-process-*.txt [--top 25] [--callers 6]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
GROUPS = (
    ("broker/engine/", "broker engine"),
    ("broker/server/", "broker server"),
    ("broker/", "broker (other)"),
    ("protocol/", "protocol"),
    ("store/", "store"),
    ("trio/", "trio"),
    ("msgspec/", "msgspec"),
    ("apsw/", "apsw"),
    ("psycopg/", "psycopg"),
)
"""Source groups by a leading part of the file's path (py-spy shortens it to the package)."""
CALLER_DEPTH = 3
"""How many frames above a hot function its callers' lines show."""


@dataclass(frozen=True)
class Profile:
    """Sample counts: per function self and total, per (function, its caller) of the innermost
    frame, per file group, and the total."""

    samples: int
    self_counts: Counter[str]
    total_counts: Counter[str]
    group_counts: Counter[str]
    caller_counts: Counter[tuple[str, str]]


def frame_name(frame: str) -> tuple[str, str]:
    """``(function (short file), file)`` of one frame; the file keeps its last two parts."""
    match = FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    path = match["file"]
    short = "/".join(Path(path).parts[-2:]) if path else "?"
    return f"{match['function']} ({short})", path


def group_of(path: str) -> str:
    """The report group of a source file."""
    rooted = "/" + path
    for marker, name in GROUPS:
        if "/" + marker in rooted:
            return name
    return "other"


def parse(lines: Iterable[str]) -> Profile:
    """Add up collapsed-stack lines (blank or malformed lines are skipped)."""
    samples = 0
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    group_counts: Counter[str] = Counter()
    caller_counts: Counter[tuple[str, str]] = Counter()
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(frame) for frame in stack.split(";") if frame.strip()]
        if not frames:
            continue
        samples += count
        inner, inner_path = frames[-1]
        self_counts[inner] += count
        path = " < ".join(name for name, _ in reversed(frames[-1 - CALLER_DEPTH : -1]))
        caller_counts[(inner, path or "-")] += count
        group_counts[group_of(inner_path)] += count
        for name in {name for name, _ in frames}:
            total_counts[name] += count
    return Profile(samples, self_counts, total_counts, group_counts, caller_counts)


def report(profile: Profile, top: int, callers: int = 6) -> str:
    """The text summary: the groups, top functions by self and by total share, and the
    callers of the ``callers`` hottest functions by self time."""
    if not profile.samples:
        return "no samples"

    def share(count: int) -> str:
        return f"{100 * count / profile.samples:5.1f}%"

    out = [f"{profile.samples} samples"]
    out.append("self time by source group:")
    out += [f"  {share(n)}  {name}" for name, n in profile.group_counts.most_common()]
    out.append(f"top {top} functions by self time:")
    out += [f"  {share(n)}  {name}" for name, n in profile.self_counts.most_common(top)]
    out.append(f"top {top} functions by total time (on the stack):")
    out += [f"  {share(n)}  {name}" for name, n in profile.total_counts.most_common(top)]
    for name, _ in profile.self_counts.most_common(callers):
        out.append(f"callers of {name} (self time):")
        ranked = sorted(
            ((caller, n) for (inner, caller), n in profile.caller_counts.items() if inner == name),
            key=lambda item: -item[1],
        )
        out += [f"  {share(n)}  {caller}" for caller, n in ranked[:5]]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stacks", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--callers", type=int, default=6, help="callers of this many functions")
    args = parser.parse_args(argv)
    lines: list[str] = []
    for path in args.files:
        lines += path.read_text(errors="replace").splitlines()
    print(report(parse(lines), args.top, args.callers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
