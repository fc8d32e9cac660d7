"""A do-nothing Trio server: the floor a Trio broker's round trip cannot beat, and the load
generator's ceiling.

    python -m benchmarks.nullserver --port 6799

It speaks just enough of the protocol for the load generator: it splits frames, decodes each
request's ``cmd`` and ``reqId`` with msgspec and answers ``ok`` (PUSH gets an ``id``; PULL gets a
job with an ``id``), writing every reply of one ``recv`` in one ``send``. Nothing is stored. The
same arguments as ``broker serve`` are accepted (``--memory``, ``--http-port`` are ignored), so the
harness starts it like a broker.
"""

from __future__ import annotations

import argparse
import itertools
import struct
import sys
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

HEADER = struct.Struct(">I")


class Request(msgspec.Struct):
    """The fields of a request the null server reads."""

    cmd: str = ""
    reqId: Any = None


def reply_frame(request: Request, ids: itertools.count[int]) -> bytes:
    """The ``ok`` reply to ``request``; a PUSH gets a fresh id and a PULL a job with one."""
    reply: dict[str, Any] = {"ok": True}
    if request.cmd == "PUSH":
        reply["id"] = str(next(ids))
    elif request.cmd == "PULL":
        reply["job"] = {"id": str(next(ids))}
    if request.reqId is not None:
        reply["reqId"] = request.reqId
    body = msgspec.msgpack.encode(reply)
    return HEADER.pack(len(body)) + body


async def serve_connection(stream: trio.SocketStream) -> None:
    """Answer every request on ``stream`` until the peer closes it."""
    decode = msgspec.msgpack.Decoder(Request).decode
    ids = itertools.count(1)
    buf = bytearray()
    async with stream:
        while True:
            try:
                chunk = await stream.receive_some(256 * 1024)
            except trio.BrokenResourceError:
                return
            if not chunk:
                return
            buf += chunk
            out = bytearray()
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = HEADER.unpack_from(buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                out += reply_frame(decode(buf[pos + 4 : pos + 4 + size]), ids)
                pos += 4 + size
            del buf[:pos]
            if out:
                try:
                    await stream.send_all(out)
                except trio.BrokenResourceError:
                    return


async def serve(host: str, port: int) -> None:
    """Listen on ``host:port`` forever."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    print(f"null server listening on {host}:{port}", flush=True)
    await trio.serve_listeners(serve_connection, listeners)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``[serve] --host H --port P`` (other broker options are ignored)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nullserver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6799)
    args, _ = parser.parse_known_args([a for a in (argv or sys.argv[1:]) if a != "serve"])
    trio.run(serve, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
