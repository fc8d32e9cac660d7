"""Length-prefixed framing: a 4-byte big-endian length, then that many bytes of MessagePack.

`FrameDecoder` is sans-IO: feed it whatever chunks the transport produced and it returns every
complete payload. The size limit is checked as soon as a header is readable, before any of the
body arrives, so a hostile peer cannot make us buffer a huge frame.
"""

from __future__ import annotations

from .errors import FrameTooLarge

MAX_FRAME_SIZE = 64 * 1024 * 1024
HEADER_SIZE = 4


class FrameDecoder:
    """Reassembles whole frame payloads from a stream of arbitrary chunks."""

    __slots__ = ("_buffer", "_limit")

    def __init__(self, limit: int = MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._limit = limit

    @property
    def limit(self) -> int:
        """The largest frame body accepted, in bytes."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value

    @property
    def buffered(self) -> int:
        """How many bytes of an unfinished frame are held."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add `chunk` and return every payload it completed, in order.

        Raises FrameTooLarge when a header announces more than the limit, carrying the whole
        frames that came before it and the bytes from the oversized header on (`rest`); the
        buffer is then cleared. A caller that raises the limit (a connection that has just
        authenticated) may feed `rest` again; otherwise the peer is out of sync.
        """
        buffer = self._buffer
        buffer += chunk
        payloads: list[bytes] = []
        start = 0
        end = len(buffer)
        limit = self._limit
        while end - start >= HEADER_SIZE:
            size = int.from_bytes(buffer[start : start + HEADER_SIZE], "big")
            if size > limit:
                rest = bytes(buffer[start:])
                buffer.clear()
                raise FrameTooLarge(size, limit, payloads, rest)
            body_end = start + HEADER_SIZE + size
            if body_end > end:
                break
            payloads.append(bytes(buffer[start + HEADER_SIZE : body_end]))
            start = body_end
        if start:
            del buffer[:start]
        return payloads

    def whole_frames(self, chunk: bytes) -> list[bytes] | None:
        """The payloads of `chunk` when, with nothing buffered, it holds only whole frames
        within the limit; else None, and nothing changes (`feed` then takes the chunk the
        usual way). A reader that can act on whole frames at once, and on nothing else,
        asks this first."""
        if self._buffer:
            return None
        payloads: list[bytes] = []
        start = 0
        end = len(chunk)
        limit = self._limit
        while start < end:
            body = start + HEADER_SIZE
            size = int.from_bytes(chunk[start:body], "big")
            if body > end or size > limit or body + size > end:
                return None
            start = body + size
            payloads.append(chunk[body:start])
        return payloads


def frame(payload: bytes) -> bytes:
    """Prefix one payload with its length."""
    return len(payload).to_bytes(HEADER_SIZE, "big") + payload
