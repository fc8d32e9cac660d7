"""`trioq worker module:attr`: run a Worker from the shell until SIGTERM or SIGINT.

`module:attr` names either a handler (an async or plain function taking a job; `--queue` says
which queue) or a dict of Worker settings: `{"queue": "emails", "handler": send, "concurrency":
10}` (any Worker keyword). Flags win over the dict. On SIGTERM or SIGINT the worker stops
taking jobs, lets running handlers finish within `--shutdown-grace` seconds, gives back the
rest and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from ._client import connect
from ._errors import TrioqError
from ._worker import Worker

log = logging.getLogger("trioq.cli")
WORKER_OPTIONS = ("concurrency", "prefetch", "poll_timeout", "lock_ttl", "shutdown_grace")


def build_parser() -> argparse.ArgumentParser:
    """The `trioq worker` arguments."""
    parser = argparse.ArgumentParser(
        prog="trioq worker",
        description="Run a trioq.Worker on a queue until SIGTERM or SIGINT (then stop gracefully).",
    )
    parser.add_argument(
        "target", metavar="module:attr", help="a handler, or a dict of Worker settings"
    )
    url = os.environ.get("TRIOQ_URL", "tcp://127.0.0.1:6789")
    parser.add_argument("--url", default=url, help=f"broker address (env TRIOQ_URL; now {url})")
    parser.add_argument("--token", default=os.environ.get("TRIOQ_TOKEN"),
                        help="auth token (env TRIOQ_TOKEN)")  # fmt: skip
    parser.add_argument("--queue", help="the queue to work (required for a plain handler)")
    parser.add_argument("--concurrency", type=int, help="handlers at once (default 1)")
    parser.add_argument("--prefetch", type=int, help="jobs held beyond concurrency")
    parser.add_argument("--poll-timeout", type=float, help="long-poll seconds (default 0.5)")
    parser.add_argument("--lock-ttl", type=float, help="lease seconds (default 30)")
    parser.add_argument("--shutdown-grace", type=float,
                        help="seconds handlers get to finish at a stop (default 10)")  # fmt: skip
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio",
                        help="event loop (default asyncio)")  # fmt: skip
    parser.add_argument("--log-level", default="INFO")
    return parser


def load_target(target: str) -> Any:
    """Import `module:attr` (attr may be dotted)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected module:attr, got {target!r}")
    sys.path.insert(0, os.getcwd())  # as `python -m` would: the current directory's modules
    found: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def worker_settings(target: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The Worker's keyword arguments: the target's dict (or handler), then the flags."""
    if isinstance(target, Mapping):
        settings = dict(target)
    elif callable(target):
        settings = {"handler": target}
    else:
        raise ValueError(f"{args.target} is neither a handler nor a dict of Worker settings")
    if args.queue:
        settings["queue"] = args.queue
    for name in WORKER_OPTIONS:
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if not settings.get("queue"):
        raise ValueError("which queue? give --queue (or `queue` in the settings dict)")
    if not callable(settings.get("handler")):
        raise ValueError("the settings dict has no callable `handler`")
    return settings


async def serve(args: argparse.Namespace, settings: dict[str, Any]) -> None:
    """Connect and run the worker until a signal arrives."""
    queue, handler = settings.pop("queue"), settings.pop("handler")
    async with connect(args.url, args.token) as client:
        worker = Worker(client, queue, handler, **settings)
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                group.start_soon(worker.run)
                log.info("trioq worker: %s x%d on %s", queue, worker.concurrency, args.url)
                async for signum in signals:
                    log.info("trioq worker: %s: stopping", signal.Signals(signum).name)
                    group.cancel_scope.cancel()
                    break
        log.info("trioq worker: stopped (%d done, %d failed)", worker.processed, worker.failed)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `trioq worker`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = worker_settings(load_target(args.target), args)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"trioq worker: error: {exc}", file=sys.stderr)
        return 2
    try:
        anyio.run(serve, args, settings, backend=args.backend)
    except TrioqError as exc:
        print(f"trioq worker: error: {exc}", file=sys.stderr)
        return 1
    return 0
