"""Fixtures of the client tests: real brokers in subprocesses, and a runner that runs a test's
async body under asyncio or Trio.

These tests are plain `def` functions that call `anyio.run` themselves, once per backend (the
`backend` fixture), so they stay clear of pytest-trio's trio_mode (which takes every
`async def` test for Trio) and need no async test plugin of their own.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import pytest

from tests.support.client_broker import Broker, Run, run_async


@pytest.fixture(scope="session")
def memory_broker() -> Iterator[Broker]:
    """A broker in memory mode, shared by the session's client tests."""
    broker = Broker()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def sqlite_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker with its SQLite store, shared by the session's client tests."""
    broker = Broker(data_dir=tmp_path_factory.mktemp("trioq-client-sqlite"))
    yield broker
    broker.stop()


@pytest.fixture(params=["memory", "sqlite"])
def broker(request: pytest.FixtureRequest) -> Broker:
    """Each store in turn."""
    found: Broker = request.getfixturevalue(f"{request.param}_broker")
    return found


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each async backend in turn."""
    return str(request.param)


@pytest.fixture
def run(backend: str) -> Run:
    """`run(fn, *args)`: run the async function under the test's backend (run_async)."""
    return functools.partial(run_async, backend)


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses (the brokers are shared)."""
    return f"t-{uuid.uuid4().hex[:12]}"
