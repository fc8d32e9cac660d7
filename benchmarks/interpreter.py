"""Which of several CPython interpreters runs trioq's kind of code fastest (`make` asks it).

    python3 benchmarks/interpreter.py [CANDIDATE ...]   (default: python3 /usr/bin/python3)

Prints the path of the fastest usable candidate, and on stderr one line saying what it measured.
The Makefile builds `.venv` with that interpreter (`make PYTHON=...` chooses one instead).

Why measure: the same CPython version can differ a lot by how it was built. On the machines
this project runs on, `python3` is a pyenv build of 3.11.7 made without profile-guided
optimisation (no `--enable-optimizations`), and Debian's `/usr/bin/python3` is 3.11.2 built
with it, and the broker's own work per produced-and-consumed job (the `mixed` workload of
`benchmarks.phase_instructions`, timed) took about 20% less CPU on Debian's. Which
build is faster elsewhere is not known in advance, so each candidate runs the same short
pure-Python probe (method calls, attribute and dict access, small tuples and lists: what the
engine's hot paths are made of), three rounds taken in turn, and the best round of each counts.

A candidate is usable when it is CPython 3.11 or newer and can make a virtual environment with
pip (`venv` and `ensurepip` import). Only the standard library is used: this runs before any
environment exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

MINIMUM = (3, 11)
ROUNDS = 3
DEFAULT_CANDIDATES = ("python3", "/usr/bin/python3")

# What each candidate runs: prints its best CPU time over its loop, in seconds.
PROBE = """
import time

class Job:
    __slots__ = ("id", "state", "timeline", "opts")

    def __init__(self, number):
        self.id = str(number)
        self.state = "waiting"
        self.timeline = ()
        self.opts = {"priority": 0}

def step(jobs, counts, number):
    job = Job(number)
    jobs[job.id] = job
    counts[job.state] = counts.get(job.state, 0) + 1
    job.timeline = job.timeline + (job.state, number, None)
    if job.opts["priority"] > 0 or len(jobs) > 512:
        jobs.clear()
    return len(job.timeline)

def run():
    started = time.process_time()
    jobs, counts = {}, {}
    for number in range(300_000):
        step(jobs, counts, number)
    return time.process_time() - started

print(run())
"""

USABLE = (
    "import platform, sys, venv, ensurepip; "
    "print(platform.python_implementation() == 'CPython' and sys.version_info >= {minimum})"
)


def resolve(candidate: str) -> str | None:
    """The candidate's real path (symlinks followed), or None when there is no such program."""
    found = shutil.which(candidate)
    return os.path.realpath(found) if found else None


def usable(path: str) -> bool:
    """Whether `path` is CPython >= MINIMUM that can make a virtual environment with pip."""
    try:
        run = subprocess.run(
            [path, "-c", USABLE.format(minimum=MINIMUM)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0 and run.stdout.strip() == "True"


def probe_seconds(path: str) -> float:
    """One round of the probe in `path` (CPU seconds; infinity when it fails)."""
    try:
        run = subprocess.run(
            [path, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
        )
        return float(run.stdout.strip()) if run.returncode == 0 else float("inf")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return float("inf")


def fastest(paths: list[str], rounds: int = ROUNDS) -> tuple[str, dict[str, float]]:
    """The path whose best round is shortest, with every path's best round; the candidates
    take turns, so a burst of load elsewhere on the machine falls on all of them."""
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(rounds):
        for path in paths:
            best[path] = min(best[path], probe_seconds(path))
    return min(paths, key=lambda path: best[path]), best


def main(argv: list[str]) -> int:
    """Print the fastest usable candidate; exit 1 when none is usable."""
    paths: list[str] = []
    for candidate in argv or DEFAULT_CANDIDATES:
        path = resolve(candidate)
        if path is not None and path not in paths and usable(path):
            paths.append(path)
    if not paths:
        print("no usable Python (CPython >= 3.11 with venv) among: " + " ".join(argv),
              file=sys.stderr)  # fmt: skip
        return 1
    if len(paths) == 1:
        print(paths[0])
        return 0
    chosen, best = fastest(paths)
    shown = ", ".join(f"{path} {seconds * 1000:.0f} ms" for path, seconds in best.items())
    print(f"interpreter for .venv: {chosen} (probe, best of {ROUNDS}: {shown})", file=sys.stderr)
    print(chosen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
