"""Shared fixtures and hooks: an in-process broker on memory streams, a real one in a subprocess,
private trioq processes (`broker_factory`), the session's private PostgreSQL server (started on
first use, one per test session), and the real-time limit of every Trio test. Their helpers live
in tests/support/."""

from __future__ import annotations

import inspect
import itertools
import os
import secrets
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.node.app import App
from store import Store, open_postgres, open_sqlite
from tests.support.app import START_TIMEOUT_S, Connect, memory_connector, start_app
from tests.support.broker import BrokerFactory, BrokerProcess
from tests.support.client import FrameClient
from tests.support.postgres import PrivateServer, drop_schemas, kept_server, start_private_server
from tests.support.stores import StoreFactory
from tests.support.time_limits import (
    real_time_limit_s,
    with_real_time_limit,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every Trio test a real-time limit that fails that test alone."""
    for item in items:
        test = getattr(item, "obj", None)
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(test):
            item.obj = with_real_time_limit(test, real_time_limit_s(item))


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


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start private trioq processes (`factory(*extra_args, data_dir=None, postgres=None)`); all
    are stopped at teardown. Memory-only unless `data_dir` names a directory for the SQLite
    store or `postgres` a (URL, schema) for the PostgreSQL one."""
    started: list[BrokerProcess] = []
    counter = itertools.count(1)

    def start(
        *args: str,
        command: list[str] | None = None,
        data_dir: Path | None = None,
        postgres: tuple[str, str] | None = None,
    ) -> BrokerProcess:
        path = tmp_path / f"broker-{next(counter)}.stderr"
        broker = BrokerProcess(
            *args, stderr_path=path, command=command, data_dir=data_dir, postgres=postgres
        )
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
