"""Shared fixtures: an in-process broker on memory streams, a real one in a subprocess, and the
session's private PostgreSQL server (started on first use, one per test session)."""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import secrets
import select
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from store import Store, open_postgres, open_sqlite
from tests.support.client import FrameClient
from tests.support.postgres import PrivateServer, kept_server, start_private_server

EPOCH_MS = 1_800_000_000_000.0
START_TIMEOUT_S = 20.0  # a broker that never starts fails the tests that need it

TRIO_TEST_TIMEOUT_S = 60.0
"""Real seconds a Trio test may run. pytest-timeout's limit (pyproject.toml) is the backstop for
everything else: its signal method breaks a Trio run, so it ends the whole run instead."""
MUTANT_TEST_TIMEOUT_S = 30.0
"""The limit while mutmut tests a mutant (`make mutation`): a mutant that leaves a test waiting
for ever (a poll never answered) is killed in 30 s, not 60. The slowest test but the model test
takes about 5 s there; the model test (tests/model) keeps the full limit."""

Connect = Callable[[], Awaitable[FrameClient]]
StoreFactory = Callable[[], Store]
"""Opens one broker's durable store, again after each close (a restart)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every Trio test a real-time limit that fails that test alone."""
    for item in items:
        test = getattr(item, "obj", None)
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(test):
            item.obj = with_real_time_limit(test, real_time_limit_s(item))


def real_time_limit_s(item: pytest.Item) -> float:
    """TRIO_TEST_TIMEOUT_S, or MUTANT_TEST_TIMEOUT_S while mutmut runs a mutant's tests (it
    names the mutant in MUTANT_UNDER_TEST; its clean and statistics runs keep the full limit)."""
    testing_a_mutant = "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")
    if testing_a_mutant and not item.nodeid.startswith("tests/model/"):
        return MUTANT_TEST_TIMEOUT_S
    return TRIO_TEST_TIMEOUT_S


def with_real_time_limit(test: Any, limit_s: float) -> Any:
    """The async test `test`, failed (its fixtures torn down as usual) after `limit_s` seconds
    of wall-clock time. The wait runs in a thread, so MockClock tests are timed in real time."""

    @functools.wraps(test)
    async def limited(*args: Any, **kwargs: Any) -> None:
        finished = threading.Event()

        async def watchdog() -> None:
            wait = functools.partial(finished.wait, limit_s)
            if not await trio.to_thread.run_sync(wait, abandon_on_cancel=True):
                pytest.fail(f"{test.__name__} still running after {limit_s:.0f} s (real time)")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog)
            try:
                await test(*args, **kwargs)
            finally:
                finished.set()
                nursery.cancel_scope.cancel()

    return limited


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


@pytest.fixture
async def app(nursery: trio.Nursery) -> AsyncIterator[App]:
    """A broker running in this test's Trio run (use with autojump_clock for timers)."""
    app = await start_app(nursery)
    yield app
    app.shutdown()


@pytest.fixture
async def connect(app: App, nursery: trio.Nursery) -> Connect:
    """Open in-memory client connections to the `app` broker."""
    return memory_connector(app, nursery)


@pytest.fixture
async def client(connect: Connect) -> FrameClient:
    """One in-memory client connection."""
    return await connect()


@pytest.fixture(scope="session")
def broker_address() -> Iterator[tuple[str, int]]:
    """A real trioq process (memory mode) on 127.0.0.1 and a free port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", "0", "--memory"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        assert ready, f"broker printed nothing in {START_TIMEOUT_S}s"
        line = process.stdout.readline()
        assert "listening on tcp" in line, f"broker did not start: {line!r}"
        host, port = line.rsplit(" ", 1)[1].strip().rsplit(":", 1)
        yield host, int(port)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


_schemas = itertools.count(1)


@pytest.fixture(scope="session")
def session_tag() -> str:
    """A tag naming this test session's schemas, drawn when the session starts. Not at import:
    mutmut forks every mutant's session from one process that imported this file, and schemas
    named alike would then carry one mutant's jobs and leases into the next one's tests."""
    return secrets.token_hex(4)


@pytest.fixture(scope="session")
def postgres_server(session_tag: str) -> Iterator[PrivateServer]:
    """The session's private PostgreSQL server (tests may stop, kill and restart it, and must
    leave it running). With TRIOQ_TEST_POSTGRES_DIR set, one server kept in that directory
    serves every session and outlives them (mutation runs start a session per mutant); each
    session then drops its own schemas at its end, so thousands of sessions do not pile up."""
    kept = os.environ.get("TRIOQ_TEST_POSTGRES_DIR")
    if kept:
        server = kept_server(Path(kept))
        yield server
        drop_schemas(server, f"t{session_tag}_")
        return
    server = start_private_server()
    try:
        yield server
    finally:
        server.destroy()


def drop_schemas(server: PrivateServer, prefix: str) -> None:
    """Drop every schema whose name starts with `prefix` (starting the server if a test left
    it down)."""
    import psycopg

    if not server.running():
        server.start()
    with psycopg.connect(server.url, autocommit=True) as connection:
        names = connection.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchall()
        for (name,) in names:
            connection.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def pg_schema(postgres_server: PrivateServer, session_tag: str) -> str:
    """A schema name no other test of the session, nor any other session, uses, so tests do
    not see each other."""
    if not postgres_server.running():  # a test that stopped it failed before restarting it
        postgres_server.start()
    return f"t{session_tag}_{next(_schemas)}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Any) -> StoreFactory:
    """Each durable backend in turn: SQLite in a file of this test, or PostgreSQL in a schema
    of this test (the store opened holds the schema's lease, as a broker's does)."""
    if request.param == "sqlite":
        path = str(tmp_path / "trioq.db")
        return lambda: open_sqlite(path)
    url = request.getfixturevalue("postgres_server").url
    schema = request.getfixturevalue("pg_schema")

    def open_leading_postgres() -> Store:
        store = open_postgres(url, schema)
        assert store.acquire_lease(), "the previous store did not let go of the lease"
        # These tests run the engine in-process, often under an autojump MockClock, which
        # jumps to the next timer whenever every task waits, as they all do while a commit
        # runs on a worker thread: time would pass during commits. The store is committed on
        # the loop here, as by default; tests/engine/test_threaded_commit.py and the e2e tests
        # (brokers in their own processes, real time) cover the threaded commit.
        store.commit_in_thread = False
        return store

    return open_leading_postgres
