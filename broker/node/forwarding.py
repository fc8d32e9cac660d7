"""A standby broker's TCP clients, forwarded to the active broker, within bounds.

A standby (ha.py) pipes each client's bytes to the address the lease row names. Issue 29: a
broker restarted on its own address found its dead predecessor's lease naming that very
address and forwarded every client to itself (6,500 self-connections a second, 20,000 open
files in 3 s, then it died of EMFILE). What bounds forwarding now:

* never to itself: not to an address this broker listens on or advertises, and a connection
  that arrives at one of this broker's own listeners is dropped and its address remembered
  as its own (an alias: a host name, another interface);
* connections: at most MAX_WAITING clients wait for an active broker, at most MAX_PIPED are
  piped to one target; past either, the client hears an error frame and is closed;
* attempts: a target that refused is tried again after a backoff (doubling from
  FIRST_BACKOFF_S to MAX_BACKOFF_S), one attempt at a time, never in a loop;
* time: a client that found no reachable active broker within the wait (two lease TTLs, so a
  takeover after a crash comes first; at least 10 s) hears an error frame naming why, and is
  closed.

The error frames are `{ok: false, error}` replies to each request the client had sent (with
its reqId), or one such frame without reqId when it had sent none.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import attrs
import msgspec
import trio

from protocol import FrameDecoder, FrameTooLarge

# Named as before the move to broker/node/: operators filter and alert on it.
log = logging.getLogger("broker.forwarding")

MAX_WAITING = 1024
"""Clients of a standby waiting for an active broker it can reach, at most."""
MAX_PIPED = 1024
"""Clients piped to one target at once, at most."""
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
CONNECT_TIMEOUT_S = 5.0
WAIT_TTLS = 2
MIN_WAIT_S = 10.0
"""A client waits at most WAIT_TTLS lease TTLs, and at least MIN_WAIT_S (a database outage
or restart may outlast a short TTL), for an active broker this one can reach."""
READ_PENDING_S = 0.05
"""Before an error frame, how long the client's requests already sent are read for."""
NO_ACTIVE = "No active broker reachable from this standby"
TOO_MANY = "Too many connections to this standby broker: connect to the active broker"
FORWARD_READ = 64 * 1024

_encode = msgspec.msgpack.Encoder().encode


@attrs.define
class Target:
    """What the forwarder knows of one target address."""

    piped: int = 0
    connecting: int = 0
    failures: int = 0
    retry_at: float = 0.0


def address_of(sockname: Any) -> str:
    """HOST:PORT of a socket address (IPv6 in brackets)."""
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT (IPv6 in brackets), or None when malformed."""
    host, _, port = address.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        return None
    return host.strip("[]"), int(port)


def connects_to_itself(local: Any, peer: Any, listening: list[Any]) -> bool:
    """Whether an outgoing connection (`local` -> `peer`) reached one of this process's own
    listening sockets (`listening`: their addresses). A listener on every interface is
    reached through any local address, and a connection to a local address is made from
    that very address (the kernel's choice of source), so its two ends share the host."""
    for own in listening:
        if own[1] != peer[1]:
            continue
        if own[0] == peer[0] or (own[0] in ("0.0.0.0", "::") and local[0] == peer[0]):
            return True
    return False


class Forwarder:
    """Bounded forwarding of a standby's clients (see the module docstring)."""

    def __init__(self, listening: list[Any], own: set[str], wait_s: float) -> None:
        self.listening = listening
        """The addresses of this broker's own listening sockets."""
        self.own = own
        """Addresses that are this broker's (never forwarded to)."""
        self.wait_s = wait_s
        self.waiting = 0
        self.targets: dict[str, Target] = {}
        self.outbound: set[str] = set()
        """Local addresses of the connections piped out now (a loop is seen arriving)."""

    def is_own(self, address: str | None) -> bool:
        """Whether `address` is this broker's own."""
        return address in self.own

    def target(self, address: str) -> Target:
        """The state of a target address (made on first use; forgotten when idle)."""
        found = self.targets.get(address)
        if found is None:
            if len(self.targets) > 64:  # an address changes with each takeover: forget idle
                self.targets = {a: t for a, t in self.targets.items() if t.piped or t.connecting}
            found = self.targets[address] = Target()
        return found

    def may_try(self, address: str, now: float) -> bool:
        """Whether a client may try to connect to `address` now: not while its backoff runs,
        and, once it has refused, one attempt at a time."""
        target = self.target(address)
        if now < target.retry_at:
            return False
        return not (target.failures and target.connecting)

    def refused(self, address: str, now: float) -> None:
        """A connection attempt failed: back off before the next one."""
        target = self.target(address)
        target.failures += 1
        backoff = min(FIRST_BACKOFF_S * 2 ** (target.failures - 1), MAX_BACKOFF_S)
        target.retry_at = now + backoff

    def is_loop(self, peer: Any) -> bool:
        """Whether an accepted connection (from `peer`, None if unknown) is one this broker
        made to itself."""
        return peer is not None and address_of(peer) in self.outbound

    async def connect(self, address: str) -> trio.SocketStream | None:
        """A connection to the target, or None: refused, timed out, at MAX_PIPED (the caller
        tells the client), or this broker itself (the address is then remembered as own)."""
        place = split_address(address)
        if place is None:
            return None
        target = self.target(address)
        target.connecting += 1
        try:
            with trio.move_on_after(CONNECT_TIMEOUT_S):
                upstream = await trio.open_tcp_stream(*place)
                break_loop = connects_to_itself(
                    upstream.socket.getsockname(), upstream.socket.getpeername(), self.listening
                )
                if break_loop:
                    await trio.aclose_forcefully(upstream)
                    log.warning("standby: %s is this broker itself; not forwarding there", address)
                    self.own.add(address)
                    return None
                target.failures = 0
                target.retry_at = 0.0
                return upstream
        except OSError:
            pass
        finally:
            target.connecting -= 1
        self.refused(address, trio.current_time())
        return None

    async def pipe(
        self, client: trio.SocketStream, address: str, upstream: trio.SocketStream,
        changed: trio.Event,
    ) -> None:  # fmt: skip
        """Copy bytes both ways until either side closes or `changed` is set."""
        target = self.target(address)
        local = address_of(upstream.socket.getsockname())
        target.piped += 1
        self.outbound.add(local)
        try:
            await pipe(client, upstream, changed)
        finally:
            target.piped -= 1
            self.outbound.discard(local)

    def full(self, address: str) -> bool:
        """Whether the target has MAX_PIPED clients piped to it already."""
        return self.target(address).piped >= MAX_PIPED


async def pipe(client: trio.SocketStream, upstream: trio.SocketStream, changed: trio.Event) -> None:
    """Copy bytes both ways until either side closes or `changed` is set."""
    async with upstream, trio.open_nursery() as nursery:

        async def copy(source: trio.SocketStream, sink: trio.SocketStream) -> None:
            try:
                while data := await source.receive_some(FORWARD_READ):
                    await sink.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(copy, client, upstream)
        nursery.start_soon(copy, upstream, client)
        await changed.wait()
        nursery.cancel_scope.cancel()


def error_frames(sent: bytes, message: str) -> bytes:
    """The replies to send a client turned away: `{ok: false, error: message}` for each whole
    request in `sent` (with its reqId), or one without reqId when there is none."""
    decoder = FrameDecoder(1 << 20)
    try:
        payloads = decoder.feed(sent)
    except FrameTooLarge as exc:
        payloads = exc.complete
    replies = []
    for payload in payloads:
        try:
            request = msgspec.msgpack.decode(payload)
        except (msgspec.DecodeError, ValueError):
            request = None
        reply: dict[str, Any] = {"ok": False, "error": message}
        if isinstance(request, dict) and "reqId" in request:
            reply["reqId"] = request["reqId"]
        replies.append(reply)
    frames = [_encode(reply) for reply in replies or [{"ok": False, "error": message}]]
    return b"".join(len(frame).to_bytes(4, "big") + frame for frame in frames)


GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


async def turn_away(stream: trio.SocketStream, message: str) -> None:
    """Answer what the client has sent so far (read for READ_PENDING_S, at most 64 KiB) with
    `message` (error_frames), then close its connection."""
    sent = b""
    with trio.move_on_after(READ_PENDING_S), contextlib.suppress(*GONE):
        while len(sent) < FORWARD_READ:
            chunk = await stream.receive_some(FORWARD_READ)
            if not chunk:
                break
            sent += chunk
    with trio.move_on_after(READ_PENDING_S), contextlib.suppress(*GONE):
        await stream.send_all(error_frames(sent, message))
    await trio.aclose_forcefully(stream)
