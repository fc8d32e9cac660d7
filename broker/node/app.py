"""The application: the engine actor and the TCP server under one root nursery.

Start-up runs in steps: open the HTTP port (`/ready` answers 503) and the TCP port (Ping is
answered; commands wait for the load, at most EngineActor's LOADING_HOLD_S), restore the engine
from the store, start the engine actor, report ready.

Shutdown runs in layers: stop accepting, answer parked long polls, give in-flight replies a
grace period, close the connections (each tells the engine, which releases its jobs), then close
the engine's inbox so the actor finishes its last pass and returns.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from store import Store, StoreError, open_postgres, open_sqlite

from ..clock import Clock
from ..engine.core import Engine
from ..engine.runtime.actor import EngineActor
from ..engine.state.engine_state import EngineState
from ..server.http import HttpServer
from ..server.tcp import TcpServer
from ..server.unsent import MIB, UnsentBytes
from ..services.broadcasts import Broadcasts
from ..services.metrics import Metrics
from ..services.webhooks import WebhookDispatcher
from .config import Config

if TYPE_CHECKING:
    from store.postgres import PostgresStore

__all__ = ["App", "open_store", "serve_until_signalled"]

# Named as before the move to broker/node/: operators filter and alert on it.
log = logging.getLogger("broker.app")


class App:
    """A running broker; `run` serves until `shutdown` is called.

    The store (None: memory only) is opened and closed by the caller; the App only uses it.
    """

    broadcasts: Broadcasts
    """The serving engine's snapshots and counts (events.py), made by `wire`."""

    def __init__(
        self, config: Config, store: Store | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.stopped = trio.Event()
        """Set by `shutdown`."""
        self.actor: EngineActor | None = None
        self.tcp: TcpServer | None = None
        self.http: HttpServer | None = None
        self.http_listeners: list[Any] = []
        self.unsent = UnsentBytes(config.max_unsent_mib * MIB, config.max_unsent_total_mib * MIB)
        """Reply bytes clients have not read, against their budgets (TCP and HTTP ports)."""

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start everything, report the TCP listeners, serve until shutdown, then stop cleanly.
        On PostgreSQL the role loop (ha.py) runs instead: standby or active, as the lease says."""
        # The PostgreSQL module (psycopg) is imported only when such a store was opened: a
        # SQLite broker's start-up, before its ports open, need not import it (~0.03 s).
        postgres = sys.modules.get("store.postgres")
        if postgres is not None and isinstance(self.store, postgres.PostgresStore):
            from .ha import RoleLoop

            await RoleLoop(self, self.store).run(task_status=task_status)
            return
        actor = self.actor = EngineActor(
            Engine(self.new_state()), self.clock or Clock(), self.store
        )
        await self._serve(actor, task_status)

    def new_state(self) -> EngineState:
        """An empty engine state with the configured retention."""
        config = self.config
        return EngineState(
            keep_completed=config.keep_completed,
            keep_failed=config.keep_failed,
            keep_completed_ms=config.keep_completed_s * 1000,
            keep_failed_ms=config.keep_failed_s * 1000,
            max_queues=config.max_queues,
        )

    def wire(
        self, actor: EngineActor, tcp: TcpServer, role: Callable[[], str] | None = None
    ) -> tuple[Metrics, WebhookDispatcher]:
        """Connect an engine to its metrics and webhooks (the dispatcher still has to run)."""
        config = self.config
        metrics = Metrics(actor.engine.state, lambda: len(tcp.connections), role)
        # The histograms' `record`, a list's append: the engine calls them for every job.
        actor.engine.state.observers.watch_latency(
            metrics.push_to_start.record, metrics.processing.record
        )
        actor.on_pass = metrics.after_pass
        engine = actor.engine
        metrics.add_reference(engine, actor.clock.now_ms, getattr(actor.store, "path", None))
        engine.prometheus = lambda: metrics.render().decode()  # the Prometheus command
        engine.webhooks.allow_private = config.allow_private_webhooks
        dispatcher = WebhookDispatcher(
            engine.webhooks, actor.submit, retry_base_s=config.webhook_retry_s
        )
        actor.bus.add_listener(dispatcher.on_event, engine.webhooks.has_enabled)
        self.broadcasts = Broadcasts(
            actor.bus, engine, actor.clock.now_ms,
            lambda: (len(tcp.connections), *metrics.http_transports()),
        )  # fmt: skip
        return metrics, dispatcher

    @property
    def stopping(self) -> bool:
        """Whether `shutdown` was called."""
        return self.stopped.is_set()

    async def _serve(self, actor: EngineActor, task_status: Any) -> None:
        config = self.config
        tcp = self.tcp = TcpServer(actor, config.auth_tokens, self.unsent)
        metrics, dispatcher = self.wire(actor, tcp)
        http = self.http = HttpServer(actor, metrics, config.auth_tokens, self.unsent)
        http.mcp.handlers.allow_private = config.allow_private_webhooks  # HTTP handlers' targets
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as servers:
                # Start-up order: both ports at once (issue 29: a restart on a million jobs
                # kept them shut for 14 s, as if the broker were gone), answering Ping,
                # /health and /ready (503) while the engine restores from the store; commands
                # wait for the load (EngineActor.submit). Then the engine runs: ready.
                if config.http_port:
                    self.http_listeners = await servers.start(
                        http.run, config.host, config.http_port
                    )
                listeners = await servers.start(tcp.run, config.host, config.port)
                task_status.started(listeners)
                await actor.restore()
                await nursery.start(actor.run)
                servers.start_soon(dispatcher.run)  # cancelled with the servers at shutdown
                servers.start_soon(self.broadcasts.run)
                http.ready = True
                await self.stopped.wait()
                http.ready = False
                tcp.stop_accepting()
                await actor.inbox.send(actor.answer_parked_message())
                await tcp.close_connections(config.shutdown_grace_s)
                servers.cancel_scope.cancel()  # the HTTP port closes with the rest
            await actor.inbox.aclose()

    def shutdown(self) -> None:
        """Begin the graceful shutdown."""
        self.stopped.set()


def open_store(config: Config) -> Store:
    """Open the PostgreSQL store (holding its lease) when configured, else the SQLite store in
    the data directory (created if missing); raises StoreError."""
    if config.postgres_url:
        return _open_postgres(config)
    try:
        os.makedirs(config.data_dir, exist_ok=True)
    except OSError as exc:
        message = f"cannot create data directory {config.data_dir}: {exc.strerror}"
        raise StoreError(message) from None
    return open_sqlite(config.db_path)


def _open_postgres(config: Config) -> PostgresStore:
    """The PostgreSQL store, schema created or checked; the lease is the role loop's (ha.py):
    a broker that finds the schema led by another starts as its standby."""
    return open_postgres(
        config.postgres_url, config.pg_schema,
        lease_ttl_s=config.lease_ttl_s, advertise=config.advertise,
        commit_in_thread=config.pg_commit_thread,
    )  # fmt: skip


async def serve_until_signalled(config: Config, store: Store | None) -> None:
    """Run the broker until SIGINT or SIGTERM, printing where it listens."""
    app = App(config, store)
    async with trio.open_nursery() as nursery:

        async def run_app(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await app.run(task_status=task_status)
            nursery.cancel_scope.cancel()  # stopped: so are the lease keeper and signal wait

        listeners = await nursery.start(run_app)
        # Caught before the address is printed: a SIGTERM sent as soon as a script reads it
        # stops the broker cleanly (on PostgreSQL: releasing the lease) instead of killing it.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            for listener in listeners:
                host, port = listener.socket.getsockname()[:2]
                print(f"trioq listening on tcp {host}:{port}", flush=True)
            for listener in app.http_listeners:
                host, port = listener.socket.getsockname()[:2]
                print(f"trioq serving http on {host}:{port}", flush=True)
            async for signum in signals:
                log.info("signal %s: shutting down", signum)
                print("trioq shutting down", flush=True)
                app.shutdown()
                break
