"""The application: the engine actor and the TCP server under one root nursery.

Start-up runs in steps: open the HTTP port (`/ready` answers 503), restore the engine from the
store, start the engine actor, open the TCP port, report ready.

Shutdown runs in layers: stop accepting, answer parked long polls, give in-flight replies a
grace period, close the connections (each tells the engine, which releases its jobs), then close
the engine's inbox so the actor finishes its last pass and returns.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

import trio

from store import Store, StoreError, StoreUnavailable, open_postgres, open_sqlite
from store.postgres import PostgresStore

from .clock import Clock
from .config import Config
from .engine.actor import EngineActor
from .engine.core import Engine
from .engine.state import EngineState
from .metrics import Metrics
from .server.http import HttpServer
from .server.tcp import TcpServer
from .webhooks import WebhookDispatcher

log = logging.getLogger(__name__)


class App:
    """A running broker; `run` serves until `shutdown` is called.

    The store (None: memory only) is opened and closed by the caller; the App only uses it.
    """

    def __init__(
        self, config: Config, store: Store | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.store = store
        self._clock = clock
        self._stop = trio.Event()
        self.actor: EngineActor | None = None
        self.tcp: TcpServer | None = None
        self.http: HttpServer | None = None
        self.http_listeners: list[Any] = []

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start everything, report the TCP listeners, serve until shutdown, then stop cleanly."""
        config = self.config
        state = EngineState(
            keep_completed=config.keep_completed,
            keep_failed=config.keep_failed,
            keep_completed_ms=config.keep_completed_s * 1000,
            keep_failed_ms=config.keep_failed_s * 1000,
        )
        actor = self.actor = EngineActor(Engine(state), self._clock or Clock(), self.store)
        await self._serve(actor, task_status)

    async def _serve(self, actor: EngineActor, task_status: Any) -> None:
        config = self.config
        tcp = self.tcp = TcpServer(actor, config.auth_tokens)
        metrics = Metrics(actor.engine.state, lambda: len(tcp.connections))
        actor.engine.state.on_start = metrics.job_started
        actor.engine.state.on_complete = metrics.job_completed
        actor.on_pass = metrics.pass_commands.observe
        http = self.http = HttpServer(actor, metrics, config.auth_tokens)
        engine = actor.engine
        engine.prometheus = lambda: metrics.render().decode()  # the Prometheus command
        engine.webhooks.allow_private = config.allow_private_webhooks
        dispatcher = WebhookDispatcher(
            engine.webhooks, actor.submit, retry_base_s=config.webhook_retry_s
        )
        actor.bus.add_listener(dispatcher.on_event, engine.webhooks.has_enabled)
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as servers:
                # Start-up order: the HTTP port first, answering /ready with 503 while the
                # engine restores from the store; then the engine; then the TCP port.
                if config.http_port:
                    self.http_listeners = await servers.start(
                        http.run, config.host, config.http_port
                    )
                await actor.restore()
                await nursery.start(actor.run)
                servers.start_soon(dispatcher.run)  # cancelled with the servers at shutdown
                listeners = await servers.start(tcp.run, config.host, config.port)
                http.ready = True
                task_status.started(listeners)
                await self._stop.wait()
                http.ready = False
                tcp.stop_accepting()
                await actor.inbox.send(actor.answer_parked_message())
                await tcp.close_connections(config.shutdown_grace_s)
                servers.cancel_scope.cancel()  # the HTTP port closes with the rest
            await actor.inbox.aclose()

    def shutdown(self) -> None:
        """Begin the graceful shutdown."""
        self._stop.set()


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
    """The PostgreSQL store holding its schema's lease. A lease still held (a broker that was
    killed, or another one) is waited for until it expires; one renewed meanwhile by a live
    broker is refused: one broker per --pg-schema."""
    store = open_postgres(
        config.postgres_url, config.pg_schema,
        lease_ttl_s=config.lease_ttl_s, advertise=config.advertise,
    )  # fmt: skip
    try:
        lease = store.lease()
        deadline = time.monotonic() + max(lease.expires_in_s, 0) + config.lease_ttl_s
        if not store.acquire_lease():
            holder = lease.address or "a broker"
            log.warning("schema %s: waiting up to %.1f s for the lease of %s to expire",
                        config.pg_schema, deadline - time.monotonic(), holder)  # fmt: skip
        while not store.acquire_lease():
            if time.monotonic() > deadline:
                raise StoreError(
                    f"PostgreSQL schema {config.pg_schema} is in use by another broker "
                    f"({store.lease().address or 'no --advertise address'}); one per --pg-schema"
                )
            time.sleep(config.lease_ttl_s / 10)  # blocking: nothing else runs yet
    except BaseException:
        store.close()
        raise
    return store


async def keep_lease(store: PostgresStore) -> None:
    """Renew the store's lease every third of its TTL. A lost lease stops the broker at once,
    as a failed commit does (LeaseLost propagates: fail-stop); an unreachable database is
    retried at the next renewal."""
    while True:
        await trio.sleep(store.lease_ttl_s / 3)
        try:
            store.renew_lease()
        except StoreUnavailable as exc:
            log.warning("cannot renew the lease (will retry): %s", exc)


async def serve_until_signalled(config: Config, store: Store | None) -> None:
    """Run the broker until SIGINT or SIGTERM, printing where it listens."""
    app = App(config, store)
    async with trio.open_nursery() as nursery:

        async def run_app(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await app.run(task_status=task_status)
            nursery.cancel_scope.cancel()  # stopped: so are the lease keeper and signal wait

        listeners = await nursery.start(run_app)
        if isinstance(store, PostgresStore):
            nursery.start_soon(keep_lease, store)
        for listener in listeners:
            host, port = listener.socket.getsockname()[:2]
            print(f"trioq listening on tcp {host}:{port}", flush=True)
        for listener in app.http_listeners:
            host, port = listener.socket.getsockname()[:2]
            print(f"trioq serving http on {host}:{port}", flush=True)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("signal %s: shutting down", signum)
                print("trioq shutting down", flush=True)
                app.shutdown()
                break
