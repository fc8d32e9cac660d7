"""Driving the engine actor directly: commands decoded from fields, sessions that record replies."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol import decode_command


class RecordingSession:
    """A session that records the replies the engine gives it."""

    full = False  # never holds its commands back (ReplySink.full)

    def __init__(self, outbox: set[Any]) -> None:
        self.closed = False
        self.replies: list[dict[str, Any]] = []
        self._outbox = outbox

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        self.replies.append(msgspec.msgpack.decode(msgspec.msgpack.encode(reply)))  # as sent
        self._outbox.add(self)

    def send_staged(self) -> None:
        pass


def command(**fields: Any) -> Any:
    """A command as the broker decodes it from these fields."""
    return decode_command(msgspec.msgpack.encode(fields))


class LoggingSession:
    """A session that writes "reply" into the shared log when its replies are released (the
    moment a real session hands them to its connection's writer)."""

    full = False  # never holds its commands back (ReplySink.full)

    def __init__(self, outbox: set[Any], log: list[str]) -> None:
        self.closed = False
        self.staged: list[dict[str, Any]] = []
        self.log = log
        self._outbox = outbox

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        self.staged.append(reply)
        self._outbox.add(self)

    def send_staged(self) -> None:
        if self.staged:
            self.log.append("reply")
            self.staged.clear()
