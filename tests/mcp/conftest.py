"""An MCP client session (the official SDK's) on a broker's MCP server, over memory streams."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from mcp import ClientSession
from mcp.shared.memory import create_connected_server_and_client_session

from broker.mcp.backend import EngineBackend
from broker.mcp.handlers import HandlerRegistry
from broker.mcp.server import build_server
from broker.mcp.tools import Context
from broker.node.app import App


@pytest.fixture
async def context(app: App, nursery: trio.Nursery) -> Context:
    """The tools' context on the `app` broker's engine, with HTTP handlers allowed anywhere."""
    assert app.actor is not None
    actor = app.actor
    backend = EngineBackend(lambda: actor)
    handlers = HandlerRegistry(backend.run, allow_private=True)
    await nursery.start(handlers.serve)
    return Context(backend, handlers)


@pytest.fixture
async def session(context: Context) -> AsyncIterator[ClientSession]:
    """An SDK client session on the MCP server (no elicitation: confirm by argument)."""
    async with create_connected_server_and_client_session(build_server(context)) as client:
        yield client


