"""The `trioq` command line: `trioq serve [options]`, and `trioq worker module:attr` (the
client package's worker runner, trioq/cli.py, imported only when that command is used).

Every setting of config.py is a flag (`--http-port`), an environment variable
(`TRIOQ_HTTP_PORT`) and a key of the optional TOML file (`http_port`); `--help` lists them
with their defaults.
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import gc
import os
import socket
import sys

import trio

from store import StoreError

from .. import __version__
from ..mcp import stdio as mcp_stdio
from . import logs
from .app import open_store, serve_until_signalled
from .config import DB_FILE, ENV_PREFIX, Config, ConfigError, load, settings

ALIASES = {"postgres_url": ["--postgres"]}
"""Shorter flags some settings also answer to (the issue's and README's spelling)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, made from the settings table."""
    parser = argparse.ArgumentParser(prog="trioq", description="A bunqueue-compatible job broker.")
    parser.add_argument("--version", action="version", version=f"trioq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the broker",
        description="Run the broker. Each option can also be set in the environment "
        f"({ENV_PREFIX}NAME) or in a TOML file (--config); flags win over both.",
    )
    serve.set_defaults(parser=serve)  # for errors given with serve's usage (`parse`)
    serve.add_argument(
        "--config", default=os.environ.get(ENV_PREFIX + "CONFIG"), metavar="FILE",
        help=f"TOML file of settings (also {ENV_PREFIX}CONFIG)",
    )  # fmt: skip
    commands.add_parser(
        "worker", add_help=False, help="run a trioq.Worker: trioq worker module:attr --queue Q"
    )  # its options are trioq/cli.py's (`trioq worker --help`)
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
            flags = [*ALIASES.get(field.name, []), flag]
            serve.add_argument(*flags, dest=field.name, default=argparse.SUPPRESS,
                               metavar=field.name.upper(), help=help_text)  # fmt: skip
    mcp_stdio.add_parser(commands)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line. An option `serve` does not know is refused with `serve`'s
    usage and the closest option name (`--prot` -> `--port`), not the top-level usage
    argparse would print; exits with code 2 as argparse does."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # the subcommand's own parser, where it named itself (serve); else the top level's
        command: argparse.ArgumentParser = getattr(args, "parser", parser)
        message = f"unrecognized arguments: {' '.join(unknown)}"
        hint = _closest_option(command, unknown)
        command.error(message + (f" (did you mean {hint}?)" if hint else ""))
    return args


def _closest_option(parser: argparse.ArgumentParser, unknown: list[str]) -> str | None:
    """The option of `parser` closest to the first unknown one given (`--prot=1`: `--prot`)."""
    known = [flag for action in parser._actions for flag in action.option_strings]
    for word in unknown:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.6)
            if close:
                return close[0]
    return None


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


def check_listen(config: Config) -> None:
    """Bind (and let go of) every socket the broker will listen on, so a host that does not
    resolve or a port in use is refused at once, before anything is created; raises
    ConfigError naming the host or the port.

    It resolves and binds as Trio's listeners do (passive, SO_REUSEADDR, IPv6 only on IPv6
    sockets) and holds all of them until the end, so the TCP and HTTP ports cannot clash.
    """
    ports = [("--port", config.port), ("--http-port", config.http_port)]
    held: list[socket.socket] = []
    try:
        for flag, port in ports[: 2 if config.http_port else 1]:
            for family, kind, proto, _, address in _resolve(config.host, port):
                sock = socket.socket(family, kind, proto)
                held.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                    sock.listen()  # two sockets bound to one port clash only once listening
                except OSError as exc:
                    where = f"{address[0]}:{port}"
                    raise ConfigError(
                        f"cannot listen on {where} ({flag}): {exc.strerror}"
                    ) from None
    finally:
        for sock in held:
            sock.close()


def _resolve(host: str, port: int) -> list[tuple]:  # type: ignore[type-arg]
    try:
        return socket.getaddrinfo(
            host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"cannot resolve --host {host}: {reason}") from None


def claim_data_dir(data_dir: str) -> int:
    """Create the data directory if missing and lock it for this process; returns the open
    descriptor that holds the lock (closing it lets go). Raises StoreError at once, without
    waiting, when another process holds it: one broker per data directory.

    The lock is on the directory itself (flock), so it creates no file and goes away with
    the process however it ends.
    """
    try:
        os.makedirs(data_dir, exist_ok=True)
        descriptor = os.open(data_dir, os.O_RDONLY)
    except OSError as exc:
        raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        db = os.path.join(data_dir, DB_FILE)
        raise StoreError(f"{db} is in use by another process (one trioq per --data-dir)") from None
    return descriptor


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `trioq` console script."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from trioq.cli import main as worker_main

        return worker_main(argv[1:])
    args = parse(build_parser(), argv)
    if args.command == "mcp":
        return mcp_stdio.main(args)
    try:
        config = config_from_args(args)
        logs.configure(config.log_level, config.log_format)
        check_listen(config)
    except (ConfigError, ValueError) as exc:
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 2
    # The engine holds many long-lived objects (jobs) that form no reference cycles; with the
    # default thresholds the cyclic collector would rescan them all again and again.
    gc.set_threshold(100_000, 50, 100)
    lock = store = None
    try:
        if config.postgres_url:  # the lease, not a file lock, keeps one writer per schema
            store = open_store(config)
        elif not config.memory:
            lock = claim_data_dir(config.data_dir)
            store = open_store(config)
    except StoreError as exc:
        if lock is not None:
            os.close(lock)
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(serve_until_signalled, config, store)
    finally:
        if store is not None:
            store.close()
        if lock is not None:
            os.close(lock)  # after the store: the next broker may open the file at once
    return 0
