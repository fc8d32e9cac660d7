"""The `trioq` command line: `trioq serve [options]`."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

import trio

from store import StoreError

from .app import open_store, serve_until_signalled
from .config import Config


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every option documents itself in `--help`."""
    parser = argparse.ArgumentParser(prog="trioq", description="A bunqueue-compatible job broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker")
    defaults = Config()
    serve.add_argument(
        "--host", default=defaults.host, help="address to bind (default %(default)s)"
    )
    serve.add_argument("--port", type=int, default=defaults.port, help="TCP port (0 picks one)")
    serve.add_argument(
        "--http-port",
        type=int,
        default=defaults.http_port,
        help="HTTP port (0 turns HTTP off; the HTTP surface is not served yet)",
    )
    serve.add_argument(
        "--data-dir",
        default=defaults.data_dir,
        help="directory of the SQLite store (default ./%(default)s; created if missing)",
    )
    serve.add_argument(
        "--memory", action="store_true", help="keep jobs in memory only (lost when it stops)"
    )
    serve.add_argument(
        "--auth-token",
        action="append",
        default=[],
        metavar="T",
        help="require Auth with this token (repeatable; also TRIOQ_AUTH_TOKENS, comma-separated)",
    )
    serve.add_argument(
        "--keep-completed",
        type=int,
        default=defaults.keep_completed,
        help="completed jobs kept for queries (default %(default)s)",
    )
    serve.add_argument(
        "--keep-failed",
        type=int,
        default=defaults.keep_failed,
        help="failed (dead-letter) jobs kept (default %(default)s)",
    )
    serve.add_argument(
        "--keep-completed-age",
        type=float,
        default=defaults.keep_completed_s,
        metavar="SECONDS",
        help="completed jobs are forgotten after this long (default 7 days)",
    )
    serve.add_argument(
        "--keep-failed-age",
        type=float,
        default=defaults.keep_failed_s,
        metavar="SECONDS",
        help="failed jobs are forgotten after this long (default 7 days)",
    )
    serve.add_argument("--log-level", default="INFO", help="logging level (default %(default)s)")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    """Turn parsed arguments (and TRIOQ_AUTH_TOKENS) into a Config."""
    tokens = [t.strip() for t in args.auth_token]
    tokens += [t.strip() for t in os.environ.get("TRIOQ_AUTH_TOKENS", "").split(",")]
    return Config(
        host=args.host,
        port=args.port,
        http_port=args.http_port,
        memory=args.memory,
        data_dir=args.data_dir,
        auth_tokens=frozenset(t for t in tokens if t),
        keep_completed=args.keep_completed,
        keep_failed=args.keep_failed,
        keep_completed_s=args.keep_completed_age,
        keep_failed_s=args.keep_failed_age,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `trioq` console script."""
    args = build_parser().parse_args(argv)
    # The engine holds many long-lived objects (jobs) that form no reference cycles; with the
    # default thresholds the cyclic collector would rescan them all again and again.
    gc.set_threshold(100_000, 50, 100)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    config = config_from_args(args)
    try:
        store = None if config.memory else open_store(config)
    except StoreError as exc:
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(serve_until_signalled, config, store)
    finally:
        if store is not None:
            store.close()
    return 0
