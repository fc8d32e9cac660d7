"""A bunqueue frame client over any Trio stream, for tests."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import trio

from protocol import FrameDecoder, decode_any, frame

_encode = msgspec.msgpack.Encoder().encode


class FrameClient:
    """Sends commands and reads replies; `call` correlates by reqId."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self._pending: list[Any] = []
        self._ids = itertools.count(1)

    async def send(self, *messages: dict[str, Any]) -> None:
        """Send messages in one write (pipelined)."""
        await self.stream.send_all(b"".join(frame(_encode(m)) for m in messages))

    async def send_raw(self, data: bytes) -> None:
        """Send bytes as they are."""
        await self.stream.send_all(data)

    async def receive(self) -> Any:
        """The next reply, in arrival order."""
        while not self._pending:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError("connection closed")
            self._pending.extend(decode_any(p) for p in self.decoder.feed(chunk))
        return self._pending.pop(0)

    async def receive_for(self, req_id: Any) -> Any:
        """The reply carrying `req_id` (others that arrive first are kept for later)."""
        kept: list[Any] = []
        try:
            while True:
                reply = await self.receive()
                if isinstance(reply, dict) and reply.get("reqId") == req_id:
                    return reply
                kept.append(reply)
        finally:
            self._pending[:0] = kept

    async def call(self, cmd: str, **fields: Any) -> Any:
        """Send one command with a fresh reqId and return its reply."""
        req_id = str(next(self._ids))
        await self.send({"cmd": cmd, "reqId": req_id, **fields})
        return await self.receive_for(req_id)

    async def aclose(self) -> None:
        """Close the stream."""
        await self.stream.aclose()
