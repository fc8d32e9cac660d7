"""A framed, pipelining bunqueue client on one plain blocking socket.

Every message, in both directions, is a 4-byte big-endian length followed by that many bytes of
MessagePack. The client is built to stay out of the way of the server it measures:

* ``TCP_NODELAY`` is set, so small frames leave at once;
* the MessagePack encoder and decoder are built once per connection;
* :meth:`Client.send` frames a whole list of requests into one buffer and sends it with a single
  ``sendall`` (one system call per window refill);
* :meth:`Client.receive` reads up to 256 KiB per ``recv`` and decodes every complete frame in it;
* replies are decoded into a small :class:`Reply` struct that keeps only the fields a benchmark
  looks at, so msgspec skips the rest of each job without building Python objects for it.

Replies to pipelined requests may arrive in any order; callers correlate them by ``reqId``
(:meth:`Client.next_req_id` hands out fresh ones).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = [
    "Client",
    "ConnectionClosed",
    "JobRef",
    "ProtocolError",
    "Reply",
    "ServerError",
    "decode_ext",
]

_HEADER = struct.Struct(">I")
_RECV_SIZE = 256 * 1024
MAX_FRAME = 64 * 1024 * 1024
"""The largest frame payload the protocol allows (64 MiB)."""


class ProtocolError(Exception):
    """The server broke the protocol: bad framing, an unknown ``reqId``, a malformed reply."""


class ConnectionClosed(ProtocolError):
    """The server closed the connection while replies were still expected."""


class ServerError(ProtocolError):
    """The server answered ``ok: false``; the message is its ``error`` text."""


class JobRef(msgspec.Struct):
    """The part of a job a benchmark needs: its id. Every other job field is skipped."""

    id: Any = None


class Reply(msgspec.Struct):
    """A server reply, reduced to the fields the benchmarks read.

    ``id`` is set by PUSH, ``ids`` by PUSHB, ``job`` by PULL, ``jobs`` by PULLB; ``error`` carries
    the message of an ``ok: false`` reply. Fields the server leaves out (or sends as JS
    ``undefined``) are ``None``.
    """

    ok: bool = False
    reqId: Any = None  # the wire name, echoed from the request
    id: Any = None
    ids: list[Any] | None = None
    job: JobRef | None = None
    jobs: list[JobRef] | None = None
    error: Any = None


def decode_ext(code: int, data: memoryview) -> Any:
    """Map MessagePack ext type 0 (JS ``undefined`` as msgpackr writes it) to ``None``.

    Other extension types are returned as :class:`msgspec.msgpack.Ext` unchanged.
    """
    if code == 0:
        return None
    return msgspec.msgpack.Ext(code, bytes(data))


class Client:
    """One TCP connection to a bunqueue-protocol server.

    Use :meth:`call` for one request at a time, or :meth:`send` and :meth:`receive` to keep many
    requests in flight. The client is not thread-safe. Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, host: str, port: int, timeout: float | None = 30.0) -> None:
        """Connect to ``host:port``; ``timeout`` bounds each send/recv (None: no limit)."""
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Reply, ext_hook=decode_ext)
        self._rbuf = bytearray()
        self._wbuf = bytearray()
        self._counter = 0

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket. Jobs pulled and not acknowledged go back to their queue."""
        self._sock.close()

    def next_req_id(self) -> str:
        """Return a request id not used before on this connection ("1", "2", ...)."""
        self._counter += 1
        return str(self._counter)

    def send(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Frame every message into one buffer and send it with a single ``sendall``.

        Messages that will be pipelined must already carry a ``reqId``.
        """
        buf = self._wbuf
        del buf[:]
        encode_into = self._encoder.encode_into
        pack_into = _HEADER.pack_into
        for message in messages:
            start = len(buf)
            buf += b"\0\0\0\0"
            encode_into(message, buf, start + 4)
            pack_into(buf, start, len(buf) - start - 4)
        if buf:
            self._sock.sendall(buf)

    def receive(self) -> list[Reply]:
        """Block until at least one whole reply has arrived; return all complete replies buffered.

        Raises :class:`ConnectionClosed` if the server closes the connection first.
        """
        replies: list[Reply] = []
        while not replies:
            chunk = self._sock.recv(_RECV_SIZE)
            if not chunk:
                raise ConnectionClosed("the server closed the connection")
            self._rbuf += chunk
            self._parse_frames(replies)
        return replies

    def call(self, message: Mapping[str, Any]) -> Reply:
        """Send one request, wait for its reply and return it.

        The request gets a fresh ``reqId``. Raises :class:`ServerError` on ``ok: false`` and
        :class:`ProtocolError` if a reply for any other request arrives.
        """
        req_id = self.next_req_id()
        self.send(({**message, "reqId": req_id},))
        replies = self.receive()
        reply = replies[0]
        if len(replies) != 1 or reply.reqId != req_id:
            if not reply.ok and reply.reqId is None:
                raise ServerError(f"{message.get('cmd')}: {reply.error}")
            got = [r.reqId for r in replies]
            raise ProtocolError(f"expected one reply with reqId {req_id!r}, got reqIds {got!r}")
        if not reply.ok:
            raise ServerError(f"{message.get('cmd')}: {reply.error}")
        return reply

    def _parse_frames(self, out: list[Reply]) -> None:
        """Decode every complete frame at the front of the receive buffer into ``out``."""
        buf = self._rbuf
        end = len(buf)
        pos = 0
        decode = self._decoder.decode
        unpack_from = _HEADER.unpack_from
        with memoryview(buf) as view:
            while end - pos >= 4:
                (size,) = unpack_from(buf, pos)
                if size > MAX_FRAME:
                    raise ProtocolError(f"frame of {size} bytes exceeds the 64 MiB limit")
                stop = pos + 4 + size
                if stop > end:
                    break
                try:
                    out.append(decode(view[pos + 4 : stop]))
                except msgspec.DecodeError as exc:
                    raise ProtocolError(f"undecodable reply frame: {exc}") from exc
                pos = stop
        if pos:
            del buf[:pos]
