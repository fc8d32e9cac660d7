"""The engine's routing: every command the protocol decodes reaches exactly one handler."""

from __future__ import annotations

import pytest

from broker.engine.core import Engine
from broker.engine.routing import Routes
from protocol import commands as cmd
from protocol.codec import ALL_COMMANDS

# Answered by the connection itself on every transport, never sent to the engine.
CONNECTION_COMMANDS = {cmd.Hello, cmd.Auth, cmd.Ping}


def test_every_decoded_command_has_a_handler() -> None:
    engine = Engine()
    unrouted = {kind.__name__ for kind in ALL_COMMANDS if not engine.handles(kind)}
    assert unrouted == {kind.__name__ for kind in CONNECTION_COMMANDS}


def test_a_command_routed_twice_is_refused() -> None:
    def handler(session: object, command: cmd.Ping, now: float) -> None:
        return None

    first, second = Routes(), Routes()
    first.add(cmd.Ping, handler)
    second.add(cmd.Ping, handler)
    with pytest.raises(ValueError, match="Ping is routed twice"):
        first.add(cmd.Ping, handler)
    with pytest.raises(ValueError, match="Ping is routed twice"):
        first.merge(second)
