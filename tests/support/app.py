"""An in-process broker (App) on memory streams, its clock pinned to EPOCH_MS, and a broker
restarted on one durable store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio
import trio.testing

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from tests.support.client import FrameClient
from tests.support.stores import StoreFactory

EPOCH_MS = 1_800_000_000_000.0
START_TIMEOUT_S = 20.0  # a broker that never starts fails the tests that need it
Connect = Callable[[], Awaitable[FrameClient]]


async def start_app(nursery: trio.Nursery, config: Config | None = None) -> App:
    """Start an App on port 0 with a clock pinned to EPOCH_MS at the current Trio time."""
    app = App(config or Config(port=0, http_port=0, memory=True), clock=Clock(EPOCH_MS))
    await nursery.start(app.run)
    return app


def memory_connector(app: App, nursery: trio.Nursery) -> Connect:
    """Returns a function that opens an in-memory connection to `app`."""

    async def connect() -> FrameClient:
        client_stream, server_stream = trio.testing.memory_stream_pair()
        assert app.tcp is not None
        app.tcp.adopt(server_stream)
        return FrameClient(client_stream)

    return connect


class Broker:
    """Runs the broker on one durable store, again and again, on one (mock) clock."""

    def __init__(self, open_store: StoreFactory, **config: object) -> None:
        self.open_store = open_store
        self.clock = Clock(EPOCH_MS)
        self.config = Config(port=0, http_port=0, **config)  # type: ignore[arg-type]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Connect]:
        store = self.open_store()
        try:
            async with trio.open_nursery() as nursery:
                app = App(self.config, store=store, clock=self.clock)
                await nursery.start(app.run)
                yield memory_connector(app, nursery)
                app.shutdown()
        finally:
            store.close()
