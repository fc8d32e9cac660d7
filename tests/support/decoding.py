"""Decoding one request map as the broker would, for the field tests of this package."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol import decode_command
from protocol.codec import Rejected


def decode(message: dict[str, Any]) -> Any:
    """The command `message` decodes to; fails the test if it was rejected."""
    command = decode_command(msgspec.msgpack.encode(message))
    assert not isinstance(command, Rejected), command
    return command


def error_of(message: dict[str, Any]) -> str:
    """The error text `message` is rejected with; fails the test if it was accepted."""
    command = decode_command(msgspec.msgpack.encode(message))
    assert isinstance(command, Rejected), command
    return command.error
