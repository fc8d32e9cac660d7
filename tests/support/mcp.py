"""Calling the broker's MCP tools through an SDK client session."""

from __future__ import annotations

import json
from typing import Any

from mcp import ClientSession


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """Call `bunqueue_<tool>`; its JSON result (AssertionError if the tool failed)."""
    result = await session.call_tool(f"bunqueue_{tool}", arguments)
    assert not result.isError, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """Call `bunqueue_<tool>`, expecting it to fail; its error JSON."""
    result = await session.call_tool(f"bunqueue_{tool}", arguments)
    assert result.isError, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]
