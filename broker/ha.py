"""High availability on PostgreSQL: several brokers on one schema, one of them active.

Every broker in PostgreSQL mode runs a role loop:

    standby  (HTTP up, /ready 503; TCP accepting and forwarding to the lease row's address;
              polling the lease)
      -> acquire the lease (a new epoch)
      -> restore (EngineActor.restore: leased jobs keep their tokens, unleased pulls wait
         again, timers re-armed)
      -> active (the engine, TCP served here, the lease renewed every third of its TTL)
      -> on a lost lease, or no renewal for a whole TTL (the database unreachable): close the
         client connections, drop the engine, back to standby

A broker that lost the lease can never write again: every commit checks the epoch in the
database (store/postgres.py), its replies are withheld until a commit succeeds, so none is sent.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import trio

from store import LeaseLost, StoreUnavailable
from store.postgres import Lease, PostgresStore

from .clock import Clock
from .engine.actor import EngineActor
from .engine.core import Engine
from .metrics import Metrics
from .server.http import HttpServer
from .server.tcp import TcpServer

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger(__name__)

STANDBY, ACTIVE = "standby", "active"
POLLS_PER_TTL = 10
"""A standby reads the lease this often per TTL: it takes over at most TTL/10 after expiry."""
RECONNECT_WAIT_S = 0.2
"""A forwarded connection whose target refused waits this long (or for a change) to retry."""
FORWARD_READ = 64 * 1024


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
            log.warning("lease renewed again")
            failing = False
        renewed_at = sent_at


def advertised_address(host: str, listeners: list[trio.SocketListener]) -> str:
    """HOST:PORT for the lease row when --advertise is not given: the listening address, or
    this machine's name when listening on every interface."""
    port = listeners[0].socket.getsockname()[1]
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT (IPv6 in brackets), or None when malformed."""
    host, _, port = address.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        return None
    return host.strip("[]"), int(port)


class RoleLoop:
    """Runs one broker of a PostgreSQL schema: standby and active terms, one after another,
    on the same TCP and HTTP ports, until the App is shut down."""

    def __init__(self, app: App, store: PostgresStore) -> None:
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
        idle = EngineActor(Engine(app.new_state()), self._clock)  # what standby HTTP shows
        metrics = Metrics(idle.engine.state, lambda: 0, self.role_of)
        http = HttpServer(idle, metrics, config.auth_tokens)
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
                if store.acquire_lease():
                    self._end_outage()
                    return True
                self._observe(store.lease())
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
            log.warning("standby: the database is reachable again")
            self._outage = False

    def _observe(self, lease: Lease) -> None:
        """Follow the lease row: who is active, under which epoch."""
        live = lease.holder not in (None, self.store.holder) and lease.expires_in_s > 0
        address = lease.address if live else None
        if (lease.epoch, address) != (self.epoch, self.active_address):
            self.epoch, self.active_address = lease.epoch, address
            self._changed()

    # -- active -------------------------------------------------------------------------------

    async def _active(self, http: HttpServer) -> None:
        """One active term: restore, serve, and end on shutdown or step-down."""
        store, app = self.store, self.app
        self.epoch, self.active_address = store.epoch, None
        self._changed()  # connections forwarded to the previous active broker close
        log.warning("schema %s: took the lease (epoch %s); restoring", store.schema, self.epoch)
        actor = EngineActor(Engine(app.new_state()), self._clock, store)
        tcp = TcpServer(actor, app.config.auth_tokens)
        try:
            async with trio.open_nursery() as term:
                term.start_soon(self._keep_lease)
                started = trio.current_time()
                await actor.restore()
                self.restore_s = trio.current_time() - started
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
        """Serve as the active broker until shutdown (a step-down cancels this)."""
        app = self.app
        async with trio.open_nursery() as engine:
            async with trio.open_nursery() as servers:
                await engine.start(actor.run)
                metrics, dispatcher = app.wire(actor, tcp, self.role_of)
                servers.start_soon(dispatcher.run)
                servers.start_soon(app.broadcasts.run)
                await servers.start(tcp.serve_handed_over)
                http.actor, http.metrics = actor, metrics
                self.tcp = tcp
                self.role = ACTIVE
                self._changed()  # connections waiting in standby are served here now
                http.ready = True
                app.actor, app.tcp = actor, tcp
                log.warning("active: serving (epoch %s), restored in %.2f s (%d jobs)",
                            self.epoch, self.restore_s, len(actor.engine.state.jobs))  # fmt: skip
                self._started()
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
        else its bytes piped to the lease row's address until the active broker changes."""
        handed_over = False
        try:
            while not self.app.stopping:
                changed = self.changed
                if self.tcp is not None:
                    self.tcp.adopt(stream)
                    handed_over = True
                    return
                target = split_address(self.active_address or "")
                if target is not None:
                    try:
                        upstream = await trio.open_tcp_stream(*target)
                    except OSError:
                        pass
                    else:
                        await pipe(stream, upstream, changed)
                        return
                with trio.move_on_after(RECONNECT_WAIT_S):
                    await changed.wait()
        finally:
            if not handed_over:
                await trio.aclose_forcefully(stream)


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
