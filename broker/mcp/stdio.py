"""`trioq mcp --url tcp://HOST:PORT [--token T]`: the MCP server over stdio, for desktop agents,
talking to a running broker over TCP (connection.py). Logs go to stderr: stdout is the
protocol's. HTTP handlers registered through it run in this process, as the reference's do."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import trio
from mcp.server.stdio import stdio_server

from .connection import BrokerUnavailable, connect, parse_url
from .handlers import HandlerRegistry
from .server import build_server
from .tools import Context

TOKEN_ENV = "TRIOQ_MCP_TOKEN"


def add_parser(commands: Any) -> None:
    """Add the `mcp` command to the CLI's subcommands."""
    mcp = commands.add_parser(
        "mcp",
        help="serve MCP over stdio for a running broker",
        description="Serve the MCP tools over stdio (for desktop agents), running them on the "
        "broker at --url over TCP.",
    )
    mcp.add_argument("--url", required=True, metavar="tcp://HOST:PORT", help="the broker")
    mcp.add_argument(
        "--token", default=os.environ.get(TOKEN_ENV), metavar="T",
        help=f"the broker's auth token (also {TOKEN_ENV})",
    )  # fmt: skip
    mcp.add_argument(
        "--no-private-handlers", action="store_true",
        help="refuse HTTP handlers on loopback and private addresses",
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """Run `trioq mcp` until stdin closes; 2 for a bad URL, 1 when the broker is unreachable."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        parse_url(args.url)
    except ValueError as exc:
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(serve, args.url, args.token, not args.no_private_handlers)
    except BrokerUnavailable as exc:
        print(f"trioq: error: {exc}", file=sys.stderr)
        return 1
    return 0


async def serve(url: str, token: str | None, allow_private: bool) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    async with connect(url, token) as broker, trio.open_nursery() as nursery:
        handlers = HandlerRegistry(broker.run, allow_private)
        await nursery.start(handlers.serve)
        server = build_server(Context(broker, handlers))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        nursery.cancel_scope.cancel()
