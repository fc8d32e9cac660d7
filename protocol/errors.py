"""Errors raised by the sans-IO protocol layer.

Every error carries the exact text a bunqueue client sees on the wire, because clients
match on message text (there are no error codes in this protocol).
"""

from __future__ import annotations


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
