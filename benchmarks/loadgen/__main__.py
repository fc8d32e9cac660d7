"""`python -m benchmarks.loadgen`: against a running server (`--port`), or side by side with
the reference (`--compare`, compare.py). The entry point sits apart from the generator so that
compare.py, which runs the generator's rows, and the generator do not import each other."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..compare import compare_loadgen
from . import parse_args, run_single


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if args.compare:
        return compare_loadgen(args)
    return run_single(args)


if __name__ == "__main__":
    sys.exit(main())
