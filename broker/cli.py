"""The `trioq` command line: `trioq serve [options]`.

Every setting of broker/config.py is a flag (`--http-port`), an environment variable
(`TRIOQ_HTTP_PORT`) and a key of the optional TOML file (`http_port`); `--help` lists them
with their defaults.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import trio

from store import StoreError

from . import logs
from .app import open_store, serve_until_signalled
from .config import ENV_PREFIX, Config, ConfigError, load, settings


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, made from the settings table."""
    parser = argparse.ArgumentParser(prog="trioq", description="A bunqueue-compatible job broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the broker",
        description="Run the broker. Each option can also be set in the environment "
        f"({ENV_PREFIX}NAME) or in a TOML file (--config); flags win over both.",
    )
    serve.add_argument(
        "--config", default=os.environ.get(ENV_PREFIX + "CONFIG"), metavar="FILE",
        help=f"TOML file of settings (also {ENV_PREFIX}CONFIG)",
    )  # fmt: skip
    for field in settings():
        flag = "--" + field.name.replace("_", "-")
        env = ENV_PREFIX + field.name.upper()
        help_text = f"{field.metadata['help']} (default: {_shown(field.default)}; env {env})"
        if isinstance(field.default, bool):
            serve.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=help_text)
        elif isinstance(field.default, frozenset):
            serve.add_argument(
                "--auth-token", dest=field.name, action="append", default=argparse.SUPPRESS,
                metavar="T", help=f"{field.metadata['help']} (repeatable; env {env})",
            )  # fmt: skip
        else:
            serve.add_argument(flag, default=argparse.SUPPRESS, metavar=field.name.upper(),
                               help=help_text)  # fmt: skip
    return parser


def _shown(default: object) -> str:
    if isinstance(default, frozenset):
        return "none"
    return str(default)


def config_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Config:
    """The Config for parsed arguments, the environment and the TOML file."""
    flags = {
        field.name: getattr(args, field.name) for field in settings() if hasattr(args, field.name)
    }
    return load(args.config, os.environ if environ is None else environ, flags)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `trioq` console script."""
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        logs.configure(config.log_level, config.log_format)
    except (ConfigError, ValueError) as exc:
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 2
    # The engine holds many long-lived objects (jobs) that form no reference cycles; with the
    # default thresholds the cyclic collector would rescan them all again and again.
    gc.set_threshold(100_000, 50, 100)
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
