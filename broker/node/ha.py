"""High availability on PostgreSQL: several brokers on one schema, one of them active.

Every broker in PostgreSQL mode runs a role loop:

    standby  (HTTP up, /ready 503; TCP accepting and forwarding to the lease row's address,
              within bounds: forwarding.py; polling the lease)
      -> acquire the lease (a new epoch): when it is free or expired, or at once when its
         holder is provably this broker's own dead predecessor (a restart after a crash on
         the same address: identity.py)
      -> restore (EngineActor.restore: leased jobs keep their tokens, unleased pulls wait
         again, timers re-armed), with TCP already served here: Ping answers, commands wait
         for the load
      -> active (the engine, TCP served here, the lease renewed every third of its TTL)
      -> on a lost lease, or no renewal for a whole TTL (the database unreachable): close the
         client connections, drop the engine, back to standby

A broker that lost the lease can never write again: every commit checks the epoch in the
database (store/postgres.py), its replies are withheld until a commit succeeds, so none is sent.
A broker never forwards to itself: the lease row names its holder by identity (host, boot,
namespaces, pid, listening addresses), not only by address, and an address that is this
broker's own is never a forwarding target.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any, Protocol

import trio

from store import LeaseLost, StoreUnavailable
from store.postgres import Lease, PostgresStore

from ..clock import Clock
from ..engine.core import Engine
from ..engine.runtime.actor import EngineActor
from ..engine.state.engine_state import EngineState
from ..server.http import HttpServer
from ..server.tcp import TcpServer
from ..server.unsent import UnsentBytes
from ..services.broadcasts import Broadcasts
from ..services.metrics import Metrics
from ..services.webhooks import WebhookDispatcher
from .config import Config
from .forwarding import (
    MAX_WAITING,
    MIN_WAIT_S,
    NO_ACTIVE,
    TOO_MANY,
    WAIT_TTLS,
    Forwarder,
    address_of,
    split_address,
    turn_away,
)
from .identity import Holder, proven_gone, this_process

# Named as before the move to broker/node/: operators filter and alert on it.
log = logging.getLogger("broker.ha")

STANDBY, ACTIVE = "standby", "active"
POLLS_PER_TTL = 10
"""A standby reads the lease this often per TTL: it takes over at most TTL/10 after expiry."""
RECONNECT_WAIT_S = 0.2
"""A client waiting for an active broker looks again this often (or at a change)."""

__all__ = ["RoleHost", "RoleLoop", "StepDown", "advertised_address", "keep_lease", "split_address"]


class RoleHost(Protocol):
    """What the role loop needs of the broker it runs (app.py's `App`): its settings, its
    shutdown, how an engine is made and wired, and where each term's servers are shown."""

    config: Config
    clock: Clock | None
    unsent: UnsentBytes
    stopped: trio.Event
    actor: EngineActor | None
    """The active term's engine (kept after the term, as a single broker's is)."""
    tcp: TcpServer | None
    http: HttpServer | None
    http_listeners: list[Any]
    broadcasts: Broadcasts

    @property
    def stopping(self) -> bool:
        """Whether the broker is shutting down."""
        ...

    def new_state(self) -> EngineState:
        """An empty engine state, configured."""
        ...

    def wire(
        self, actor: EngineActor, tcp: TcpServer, role: Callable[[], str] | None = None
    ) -> tuple[Metrics, WebhookDispatcher]:
        """Connect an engine to its metrics and webhooks; sets `broadcasts`."""
        ...


class StepDown(Exception):
    """The active broker must stop being active (its lease could not be renewed in time)."""


async def keep_lease(store: PostgresStore) -> None:
    """Renew the store's lease every third of its TTL. A lost lease raises LeaseLost; an
    unreachable database is retried at each renewal (logged once per outage, with its cause),
    and raises StepDown once a whole TTL has passed since the last renewal sent: by then the
    lease may have expired and another broker may be writing."""
    renewed_at = trio.current_time()
    failing = False
    while True:
        await trio.sleep(store.lease_ttl_s / 3)
        sent_at = trio.current_time()
        try:
            store.renew_lease()
        except StoreUnavailable as exc:
            if not failing:
                log.warning("cannot renew the lease (retrying): %s", exc)
                failing = True
            if sent_at - renewed_at >= store.lease_ttl_s:
                raise StepDown(f"no lease renewal for {store.lease_ttl_s:g} s: {exc}") from None
            continue
        if failing:
            log.info("lease renewed again")
            failing = False
        renewed_at = sent_at


def advertised_address(host: str, listeners: list[trio.SocketListener]) -> str:
    """HOST:PORT for the lease row when --advertise is not given: the listening address, or
    this machine's name when listening on every interface."""
    port = listeners[0].socket.getsockname()[1]
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


class RoleLoop:
    """Runs one broker of a PostgreSQL schema: standby and active terms, one after another,
    on the same TCP and HTTP ports, until the App is shut down."""

    def __init__(self, app: RoleHost, store: PostgresStore) -> None:
        self.app = app
        self.store = store
        self.role = STANDBY
        self.epoch: int | None = None
        self.active_address: str | None = None
        """Where the active broker is (None: none known, or this one)."""
        self.changed = trio.Event()
        """Set, and replaced, whenever the active broker (epoch or role) changes."""
        self.tcp: TcpServer | None = None  # the active term's server, None in standby
        self._outage = False
        self._clock = app.clock or Clock()
        self.restore_s = 0.0  # how long the last takeover's restore took
        self._report_started: Any = None  # reports the listeners once: active, or standby
        self.identity: Holder | None = None
        """This process as the lease row names it (set once the listeners are bound)."""
        self.forwarder: Forwarder | None = None
        self._lease_address: str | None = None  # what the lease row names, own or not

    def status(self) -> dict[str, Any]:
        """What /health shows: role, epoch and the active broker's address."""
        active = self.store.advertise if self.role == ACTIVE else self.active_address
        return {"role": self.role, "epoch": self.epoch, "active": active}

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, then alternate standby and active terms until shutdown."""
        app, config = self.app, self.app.config
        listeners = await trio.open_tcp_listeners(config.port, host=config.host)
        if not self.store.advertise:
            self.store.advertise = advertised_address(config.host, listeners)
        bound = [listener.socket.getsockname() for listener in listeners]
        # Named by identity, after the listeners are bound: they are part of the proof a
        # successor on the same address makes that this process is gone (identity.py).
        self.identity = this_process(address_of(place) for place in bound)
        self.store.holder = self.identity.text()
        own = {self.store.advertise, *(address_of(place) for place in bound)}
        wait_s = max(WAIT_TTLS * self.store.lease_ttl_s, MIN_WAIT_S)
        self.forwarder = Forwarder(bound, own, wait_s)
        idle = EngineActor(Engine(app.new_state()), self._clock)  # what standby HTTP shows
        idle.loaded.set()  # nothing to load: standby pages answer at once
        metrics = Metrics(idle.engine.state, lambda: 0, self.role_of)
        http = HttpServer(idle, metrics, config.auth_tokens, app.unsent)
        http.role_status = self.status
        app.http = http
        try:
            async with trio.open_nursery() as nursery:
                if config.http_port:
                    app.http_listeners = await nursery.start(
                        http.run, config.host, config.http_port
                    )
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener, nursery)
                self._report_started = lambda: task_status.started(listeners)
                while not app.stopping:
                    if await self._standby():
                        await self._active(http)
                nursery.cancel_scope.cancel()
        finally:
            for listener in listeners:
                listener.socket.close()

    def role_of(self) -> str:
        """The role now (metrics carry it)."""
        return self.role

    def _started(self) -> None:
        """Report the listeners, the first time only: a broker that finds the lease free
        starts active (as a single broker always did), else it starts as a standby."""
        report, self._report_started = self._report_started, None
        if report is not None:
            report()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    # -- standby ------------------------------------------------------------------------------

    async def _standby(self) -> bool:
        """Poll the lease until this broker takes it (True) or the App stops (False)."""
        store = self.store
        while not self.app.stopping:
            try:
                lease = store.lease()
                gone = self._gone_predecessor(lease)
                if store.acquire_lease(gone):
                    if gone is not None:
                        log.warning(
                            "schema %s: the lease was held by this broker's predecessor on "
                            "%s, gone (restarted after a crash?): taken over without waiting "
                            "for its expiry", store.schema, lease.address,
                        )  # fmt: skip
                    self._end_outage()
                    return True
                self._observe(lease)
                self._end_outage()
            except StoreUnavailable as exc:
                if not self._outage:
                    log.warning("standby: cannot reach the database (retrying): %s", exc)
                    self._outage = True
            self._started()  # a standby: the lease is another broker's, or out of reach
            with trio.move_on_after(store.lease_ttl_s / POLLS_PER_TTL):
                await self.app.stopped.wait()
        return False

    def _end_outage(self) -> None:
        if self._outage:
            log.info("standby: the database is reachable again")
            self._outage = False

    def _gone_predecessor(self, lease: Lease) -> str | None:
        """The live lease's holder when it is provably gone (identity.py), else None."""
        if lease.expires_in_s <= 0 or self.identity is None:
            return None
        return lease.holder if proven_gone(lease.holder, self.identity) else None

    def _observe(self, lease: Lease) -> None:
        """Follow the lease row: who is active, under which epoch. An address that is this
        broker's own is no active broker to forward to (its holder is a process that is gone,
        or an alias of this one): clients then wait for the lease to expire or be taken."""
        live = lease.holder not in (None, self.store.holder) and lease.expires_in_s > 0
        address = lease.address if live else None
        if address is not None and self.forwarder is not None and self.forwarder.is_own(address):
            if address != self._lease_address:
                log.warning(
                    "standby: the lease names this broker's own address %s, held by %s: "
                    "not forwarding there; waiting for the lease", address, lease.holder,
                )  # fmt: skip
            self._lease_address = address
            address = None
        else:
            self._lease_address = address
        if (lease.epoch, address) != (self.epoch, self.active_address):
            self.epoch, self.active_address = lease.epoch, address
            self._changed()

    # -- active -------------------------------------------------------------------------------

    async def _active(self, http: HttpServer) -> None:
        """One active term: restore, serve, and end on shutdown or step-down."""
        store, app = self.store, self.app
        self.epoch, self.active_address = store.epoch, None
        self._changed()  # connections forwarded to the previous active broker close
        log.info("schema %s: took the lease (epoch %s); restoring", store.schema, self.epoch)
        actor = EngineActor(Engine(app.new_state()), self._clock, store)
        tcp = TcpServer(actor, app.config.auth_tokens, app.unsent)
        try:
            async with trio.open_nursery() as term:
                term.start_soon(self._keep_lease)
                await self._serve(actor, tcp, http)
                term.cancel_scope.cancel()
            store.release_lease()  # a clean stop: a standby may take over at once
        except* (LeaseLost, StepDown, StoreUnavailable) as group:
            log.warning("stepping down to standby: %s", _first(group))
            store.release_lease()  # forgets the epoch; frees the row if the database answers
        finally:
            http.ready = False
            self.tcp = None
            self.role = STANDBY
            self.active_address = None
            self._changed()

    async def _serve(self, actor: EngineActor, tcp: TcpServer, http: HttpServer) -> None:
        """Serve as the active broker until shutdown (a step-down cancels this): TCP clients
        are taken here at once (Ping answers; their commands wait for the load), then the
        stored jobs are restored, then the engine runs and the broker is ready."""
        app = self.app
        async with trio.open_nursery() as engine:
            async with trio.open_nursery() as servers:
                await servers.start(tcp.serve_handed_over)
                metrics, dispatcher = app.wire(actor, tcp, self.role_of)
                http.serve_engine(actor, metrics)
                self.tcp = tcp
                self.role = ACTIVE
                self._changed()  # connections waiting in standby are served here now
                app.actor, app.tcp = actor, tcp
                self._started()
                started = trio.current_time()
                await actor.restore()
                self.restore_s = trio.current_time() - started
                await engine.start(actor.run)
                servers.start_soon(dispatcher.run)
                servers.start_soon(app.broadcasts.run)
                http.ready = True
                log.info("active: serving (epoch %s), restored in %.2f s (%d jobs)",
                         self.epoch, self.restore_s, len(actor.engine.state.jobs))  # fmt: skip
                await app.stopped.wait()
                http.ready = False
                await actor.inbox.send(actor.answer_parked_message())
                await tcp.close_connections(app.config.shutdown_grace_s)
                servers.cancel_scope.cancel()
            await actor.inbox.aclose()

    async def _keep_lease(self) -> None:
        await keep_lease(self.store)

    # -- TCP: served here when active, forwarded when standby ---------------------------------

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept for the broker's whole life: the active term's server takes each client,
        or, in standby, a forwarder does."""
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. too many open files: wait, then accept again
                log.warning("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
            if self.tcp is not None:
                self.tcp.adopt(stream)
            else:
                nursery.start_soon(self._forward, stream)

    async def _forward(self, stream: trio.SocketStream) -> None:
        """Hand the client to the active broker: served here if this one becomes active first,
        else its bytes piped to the lease row's address until the active broker changes;
        turned away with an error frame when no active broker can be reached in time, or
        when too many clients wait (forwarding.py)."""
        forwarder = self.forwarder
        assert forwarder is not None
        if forwarder.is_loop(_peer(stream)):  # this broker's own forwarded connection
            await trio.aclose_forcefully(stream)
            return
        if forwarder.waiting >= MAX_WAITING:
            await turn_away(stream, TOO_MANY)
            return
        forwarder.waiting += 1
        waiting, handed_over = True, False
        deadline = trio.current_time() + forwarder.wait_s
        try:
            while not self.app.stopping:
                changed = self.changed
                if self.tcp is not None:
                    self.tcp.adopt(stream)
                    handed_over = True
                    return
                address = self.active_address
                now = trio.current_time()
                if address is not None and not forwarder.is_own(address):
                    if forwarder.full(address):
                        await turn_away(stream, TOO_MANY)
                        handed_over = True
                        return
                    if forwarder.may_try(address, now):
                        upstream = await forwarder.connect(address)
                        if upstream is not None:
                            forwarder.waiting -= 1
                            waiting = False
                            await forwarder.pipe(stream, address, upstream, changed)
                            return
                        continue  # refused (now backing off), or found to be this broker
                if now >= deadline:
                    await turn_away(stream, self._why_no_active(forwarder.wait_s))
                    handed_over = True
                    return
                with trio.move_on_at(min(deadline, now + RECONNECT_WAIT_S)):
                    await changed.wait()
        finally:
            if waiting:
                forwarder.waiting -= 1
            if not handed_over:
                await trio.aclose_forcefully(stream)

    def _why_no_active(self, waited_s: float) -> str:
        """The error a client turned away hears: how long it waited, and for whom."""
        named = self._lease_address
        if named is None:
            return f"{NO_ACTIVE} within {waited_s:g} s (no broker holds the lease)"
        if self.forwarder is not None and self.forwarder.is_own(named):
            return f"{NO_ACTIVE} within {waited_s:g} s (the lease still names this broker)"
        return f"{NO_ACTIVE} within {waited_s:g} s (the lease names {named})"


def _peer(stream: trio.SocketStream) -> Any:
    """The client's (host, port), or None (gone already, or not an IP socket)."""
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return None
    return peer if isinstance(peer, tuple) else None


def _first(group: BaseExceptionGroup[Any]) -> str:
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return "; ".join(str(exc) for exc in leaves)
