"""What the MCP tools run commands through: one protocol command in, its reply out (as JSON
values: job data the broker holds as MessagePack is shown as the HTTP port shows it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from protocol import Rejected

from ..engine.runtime.actor import EngineActor
from ..server.jsonwire import command_from, reply_json
from ..server.slots import call

Reply = dict[str, Any]


class Backend(Protocol):
    """Runs protocol commands for the MCP tools."""

    async def run(self, message: dict[str, Any]) -> Reply:
        """Run one command (`{"cmd": ..., fields}`) and return its reply."""
        ...


def as_json(reply: Any) -> Reply:
    """A reply as plain JSON values (what `reply_json` shows for MessagePack-only values)."""
    plain: Reply = json.loads(reply_json(reply))
    return plain


class EngineBackend:
    """Runs commands on this broker's engine, as the HTTP routes do: validated like a TCP
    frame, answered once committed. Not tied to a connection: a job pulled without `owner`
    is not released when the MCP session ends (as `GET /queues/:q/jobs`). `actor` returns
    the engine serving now (with several brokers on PostgreSQL, each active term has its own)."""

    def __init__(self, actor: Callable[[], EngineActor]) -> None:
        self.actor = actor

    async def run(self, message: dict[str, Any]) -> Reply:
        """Run one command on the engine."""
        command = command_from(message)
        if isinstance(command, Rejected):
            return {"ok": False, "error": command.error}
        return as_json(await call(self.actor(), command))
