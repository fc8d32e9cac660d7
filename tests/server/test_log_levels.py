"""Log levels an operator reads: the end of a database outage is INFO (nothing to act on), its
start WARNING (broker/node/logs.py says which is which). The normal start-up of a PostgreSQL
broker is checked on a real process in tests/e2e/test_postgres.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from broker.node.app import App
from broker.node.config import Config
from broker.node.ha import RoleLoop, keep_lease
from store import StoreUnavailable
from store.postgres import Lease


def levels(caplog: pytest.LogCaptureFixture, logger: str) -> list[tuple[str, str]]:
    """(level, message) of each record of `logger`, in order."""
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == logger]


class FlakyLeaseStore:
    """As much of a PostgresStore as the lease keeper and a standby use: the database is
    unreachable for the first `outage` calls, then answers (the lease held by another)."""

    lease_ttl_s = 3.0
    holder = "this-broker"
    advertise = "127.0.0.1:1"

    def __init__(self, outage: int) -> None:
        self.outage = outage

    def _call(self) -> None:
        if self.outage > 0:
            self.outage -= 1
            raise StoreUnavailable("connection refused")

    def renew_lease(self) -> None:
        self._call()

    def acquire_lease(self, gone: str | None = None) -> bool:
        self._call()
        return False

    def lease(self) -> Lease:
        return Lease(4, "another-broker", "127.0.0.1:2", 5.0)


async def test_a_renewal_after_an_outage_is_info_the_outage_a_warning(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store: Any = FlakyLeaseStore(outage=2)
    with trio.move_on_after(store.lease_ttl_s / 3 * 4.5):  # two failures, then two renewals
        await keep_lease(store)
    assert levels(caplog, "broker.ha") == [
        ("WARNING", "cannot renew the lease (retrying): connection refused"),
        ("INFO", "lease renewed again"),
    ]


async def test_a_standby_reaching_the_database_again_is_info(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store: Any = FlakyLeaseStore(outage=2)
    app = App(Config(port=0, http_port=0), store=None)
    role = RoleLoop(app, store)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(role._standby)
        await trio.sleep(store.lease_ttl_s)  # ten polls: two fail, the rest answer
        app.shutdown()
    assert levels(caplog, "broker.ha") == [
        ("WARNING", "standby: cannot reach the database (retrying): connection refused"),
        ("INFO", "standby: the database is reachable again"),
    ]
    assert role.status() == {"role": "standby", "epoch": 4, "active": "127.0.0.1:2"}
