"""The front door: what happens to a client's request between its transport and the engine.

TCP, HTTP and WebSocket differ only in how bytes come and go. Everything else about a request is
decided here, once, for all of them, without I/O:

- **auth**: whether the connection may send commands yet, checking an `Auth` token (in constant
  time), counting failed attempts and asking the shared `AuthThrottle` how long to pause;
- **triage**: the commands a connection answers itself (a rejected frame, Hello, Ping, Auth,
  SubscribeEvents/UnsubscribeEvents) and those that go to the engine (`is_local`, `answer`);
- **flow control**: one in-flight budget per connection (`InFlight`) that every command takes
  until its reply is written, whoever answered it, so a client that does not read stops being
  read;
- **the disconnect rules**: which answers end the connection (`Local.close`), and that a
  connection which has not authenticated in time is closed.

A `FrontDoor` is a plain object per connection; the transports do the I/O around it: they sleep
for `auth_pause`, send `Local.reply`, (un)subscribe for `Local.events`, and close when told.
Containing one connection's unexpected error (`contain_failures`) also lives here, so no
transport can bring the broker down.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from protocol import Rejected
from protocol import commands as cmd
from store import StoreError

from .. import __version__
from ..engine.errors import INVALID_TOKEN, NOT_AUTHENTICATED
from ..engine.sink import Reply
from ..events import invalid_patterns
from .guards import AuthThrottle

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 3
CAPABILITIES = ["pipelining", "separate-job-name"]
MAX_IN_FLIGHT = 50  # commands read and not yet answered on the wire, per connection
MAX_AUTH_FAILURES = 3  # per connection (with tokens configured); then it is closed
AUTH_TIMEOUT_S = 30  # with tokens configured, a connection must authenticate this soon

EventCommand = cmd.SubscribeEvents | cmd.UnsubscribeEvents
# The commands a connection answers itself (no engine state involved).
LOCAL_COMMANDS = (
    Rejected,
    cmd.Auth,
    cmd.Hello,
    cmd.Ping,
    cmd.SubscribeEvents,
    cmd.UnsubscribeEvents,
)


def tokens_match(presented: object, configured: frozenset[str]) -> bool:
    """Compare a presented token with every configured one in constant time."""
    if not isinstance(presented, str) or not presented.strip():
        return False
    candidate = presented.strip().encode()
    found = False
    for token in configured:
        found |= hmac.compare_digest(candidate, token.encode())
    return found


def bearer_authorized(headers: Iterable[tuple[bytes, bytes]], tokens: frozenset[str]) -> bool:
    """Whether HTTP headers carry `Authorization: Bearer <a configured token>` (always, when no
    tokens are configured). HTTP requests and WebSocket upgrades authenticate this way."""
    if not tokens:
        return True
    for name, value in headers:
        if name.lower() == b"authorization" and value.startswith(b"Bearer "):
            return tokens_match(value[7:].decode("latin-1"), tokens)
    return False


def hello_reply() -> Reply:
    """The Hello answer: protocol 3 with pipelining and a separate job name."""
    return {
        "ok": True,
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": CAPABILITIES,
        "server": "trioq",
        "version": __version__,
    }


def ping_reply(now_ms: float) -> Reply:
    """The Ping answer. The time is a float: as a 64-bit integer, msgpackr (the official
    client) would decode it as a BigInt, which JSON.stringify refuses."""
    return {"ok": True, "data": {"pong": True, "time": float(int(now_ms))}}


def req_id_of(command: object) -> object:
    """The reqId a command (or a rejected frame) carried, or None."""
    if isinstance(command, Rejected):
        return command.req_id
    return getattr(command, "reqId", None)


class InFlight:
    """One connection's flow-control budget: commands read and not yet answered on the wire.

    Every command takes a slot when it is read (`take`) and gives it back when its reply has
    been written (`give`), whether the engine or the front door answered it."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self.limit = limit
        self.count = 0

    def room(self) -> int:
        """How many more commands may be read now (0 or less: none)."""
        return self.limit - self.count

    def take(self, count: int = 1) -> None:
        """`count` commands were read."""
        self.count += count

    def give(self, count: int = 1) -> None:
        """The replies to `count` commands were written."""
        self.count -= count


@dataclass(slots=True)
class Local:
    """The front door's answer to a command it handles itself."""

    reply: Reply
    req_id: object
    close: bool = False  # the connection ends once `reply` is sent
    events: EventCommand | None = None  # (un)subscribe this connection before sending `reply`


class FrontDoor:
    """One connection's front door: auth state, failed attempts, in-flight budget, triage.

    `authenticated` starts True when no tokens are configured or the transport already
    authenticated the client (an HTTP request's or WebSocket upgrade's Bearer header). Failed
    `Auth` attempts are counted, throttled per peer and end the connection after
    MAX_AUTH_FAILURES only on a connection that authenticates by command (TCP): elsewhere the
    header already proved the client, and a wrong `Auth` is just answered as such.
    """

    def __init__(
        self,
        tokens: frozenset[str],
        now_ms: Callable[[], float],
        *,
        throttle: AuthThrottle | None = None,
        peer: object = None,
        preauthenticated: bool = False,
        events_local: bool = True,
        limit: int = MAX_IN_FLIGHT,
    ) -> None:
        self.tokens = tokens
        self.authenticated = preauthenticated or not tokens
        self.in_flight = InFlight(limit)
        self.auth_failures = 0
        self._now_ms = now_ms
        self._throttle = throttle
        self._peer = peer
        self._counts_failures = bool(tokens) and not preauthenticated
        # SubscribeEvents/UnsubscribeEvents are answered here on TCP; other transports send
        # them to the engine, which explains that they subscribe with `Subscribe`.
        self.local_commands = LOCAL_COMMANDS if events_local else LOCAL_COMMANDS[:4]
        """The command types `is_local` answers here (once authenticated)."""

    def is_local(self, command: object) -> bool:
        """Whether the front door answers `command` (`answer`) rather than the engine: a
        command it handles itself, or any command before the connection authenticated."""
        return not self.authenticated or isinstance(command, self.local_commands)

    def auth_pause(self, command: object, now: float) -> float:
        """Seconds to wait before answering `command`: a token check from a peer that failed
        repeatedly is slowed down (AuthThrottle); anything else is answered at once."""
        if not isinstance(command, cmd.Auth) or not self._counts_failures:
            return 0.0
        if self._throttle is None:
            return 0.0
        return self._throttle.delay(self._peer, now)

    def answer(self, command: object, now: float) -> Local:
        """The answer to a command `is_local` accepted (after its `auth_pause`). Before the
        connection authenticated only `Auth` is heard."""
        if isinstance(command, cmd.Auth):
            return self._auth(command, now)
        req_id = req_id_of(command)
        if not self.authenticated:
            return Local({"ok": False, "error": NOT_AUTHENTICATED}, req_id)
        if isinstance(command, Rejected):
            return Local({"ok": False, "error": command.error}, req_id)
        if isinstance(command, cmd.Hello):
            return Local(hello_reply(), req_id)
        if isinstance(command, cmd.SubscribeEvents) and command.events is not None:
            invalid = invalid_patterns(command.events)
            if invalid:
                return Local({"ok": False, "error": f"Invalid: {', '.join(invalid)}"}, req_id)
        if isinstance(command, cmd.SubscribeEvents | cmd.UnsubscribeEvents):
            return Local({"ok": True}, req_id, events=command)
        return Local(ping_reply(self._now_ms()), req_id)

    def must_close_unauthenticated(self) -> bool:
        """Checked AUTH_TIMEOUT_S after the connection opened: an anonymous connection may not
        hold its socket (and its slot) for ever."""
        return not self.authenticated

    def _auth(self, command: cmd.Auth, now: float) -> Local:
        if tokens_match(command.token, self.tokens):
            if self._throttle is not None:
                self._throttle.succeeded(self._peer)
            self.authenticated = True
            return Local({"ok": True}, command.reqId)
        refused = Local({"ok": False, "error": INVALID_TOKEN}, command.reqId)
        if not self._counts_failures:
            return refused  # nothing to guess, or the transport already admitted the client
        if self._throttle is not None:
            self._throttle.failed(self._peer, now)
        self.auth_failures += 1
        refused.close = self.auth_failures >= MAX_AUTH_FAILURES
        return refused


@contextmanager
def contain_failures(what: str, peer_gone: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Serve one connection inside this: its unexpected error is logged (once, with its
    traceback) and ends that connection only. An error in `peer_gone` (the client left or
    broke the protocol) ends it silently. A store failure is not contained: the broker stops
    (fail-stop, see CommitPipeline in engine/runtime/commits.py)."""
    try:
        yield
    except* StoreError:
        raise
    except* peer_gone:
        pass
    except* Exception as failure:
        log.error("%s failed and was closed", what, exc_info=failure)
