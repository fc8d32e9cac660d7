"""`python -m broker serve` runs the broker, like the `trioq` console script."""

from .node.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
