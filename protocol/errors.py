"""Errors raised by the sans-IO protocol layer.

Every error carries the exact text a bunqueue client sees on the wire, because clients
match on message text (there are no error codes in this protocol).
"""

from __future__ import annotations

import re

_MSGSPEC_TYPE_ERROR = re.compile(r"Expected `(?P<kind>[^`]+)`, got `[^`]+` - at `\$\.(?P<path>.+)`")
_KIND_WORDS = {"array": "an array", "object": "an object", "str": "a string", "bool": "a boolean"}


class ProtocolError(Exception):
    """Base class of every error this package raises on purpose."""


class CommandError(ProtocolError):
    """A command was well framed but its content is invalid; the text is sent as `error`."""


class FrameTooLarge(ProtocolError):
    """A frame header announced more bytes than the limit; the connection must close."""

    def __init__(
        self, size: int, limit: int, complete: list[bytes] | None = None, rest: bytes = b""
    ) -> None:
        super().__init__(f"Frame too large: {size} bytes exceeds maximum {limit}")
        self.size = size
        self.limit = limit
        # Whole frames that arrived before the oversized header: still to be answered.
        self.complete = complete or []
        # The bytes from the oversized header on, for a caller that may raise its limit.
        self.rest = rest


def readable_validation_error(text: str) -> str:
    """Turn msgspec's "Expected `array | null`, got `int` - at `$.jobs`" into "jobs must be..."."""
    match = _MSGSPEC_TYPE_ERROR.fullmatch(text)
    if not match:
        return text
    kinds = [kind for kind in match["kind"].split(" | ") if kind != "null"]
    words = " or ".join(_KIND_WORDS.get(kind, kind) for kind in kinds)
    return f"{match['path']} must be {words}"
