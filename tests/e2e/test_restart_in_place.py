"""A PostgreSQL broker restarted on its own address (issue 29), as a process supervisor does it:
the same command again after `kill -9`. The other end-to-end tests start every broker on port
0, so none of them restarted on the address its dead predecessor's lease still names; here the
ports are fixed. It must take its own dead lease over at once, never forward to itself, and keep
its open files bounded; a client that no active broker can be found for hears why."""

from __future__ import annotations

import time
from typing import Any

import httpx
import psutil
import psycopg

from store import open_postgres
from tests.support.broker import REPLY_TIMEOUT_S, BrokerFactory, BrokerProcess, FrameSocket
from tests.support.postgres import PrivateServer, free_port

LONG_TTL = "60"  # a restart that waited for the dead broker's lease would wait a minute
FEW_FILES = 100  # a broker's open files: listeners, a database session, a few clients


def lease_row(url: str, schema: str) -> tuple[int, str, str, float]:
    """(epoch, holder, address, seconds until it expires) of the schema's lease."""
    with psycopg.connect(url) as sql:
        row = sql.execute(
            f"SELECT epoch, holder, address, extract(epoch FROM expires_at - now())::float8 "
            f"FROM {schema}.lease"
        ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1]), str(row[2]), float(row[3])


def open_files(broker: BrokerProcess) -> int:
    return psutil.Process(broker.process.pid).num_fds()


def test_a_broker_restarted_on_its_address_after_kill_9_takes_its_lease_over_at_once(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    port, http_port = free_port(), free_port()
    command = ("--port", str(port), "--http-port", str(http_port), "--lease-ttl-s", LONG_TTL)
    first = broker_factory(*command, postgres=where)
    with FrameSocket(first.address) as client:
        pushed = client.call("PUSH", queue="q", data={"n": 1})
    epoch, _, address, _ = lease_row(postgres_server.url, pg_schema)
    assert address == f"127.0.0.1:{port}"
    first.kill_hard()

    second = broker_factory(*command, postgres=where)  # the same command, the same address
    assert second.address == first.address
    with FrameSocket(second.address) as client:  # served by the new process, not forwarded
        assert client.call("GetJob", id=pushed["id"])["job"]["data"] == {"n": 1}
        assert client.call("PUSH", queue="q", data={"n": 2})["ok"] is True
    new_epoch, new_holder, _, expires_in_s = lease_row(postgres_server.url, pg_schema)
    assert f"pid={second.process.pid}" in new_holder and new_epoch == epoch + 1
    # Taken while the dead broker's lease had most of its minute left (renewed just now).
    assert expires_in_s > float(LONG_TTL) / 2
    health = httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=REPLY_TIMEOUT_S).json()
    assert (health["role"], health["active"]) == ("active", f"127.0.0.1:{port}")
    assert open_files(second) < FEW_FILES
    assert "accept failed" not in second.stderr_text()


def claim_lease(url: str, schema: str, holder: str, address: str, seconds: float) -> None:
    """Make the schema (as a broker would) and write a lease held by someone else."""
    open_postgres(url, schema).close()  # creates the schema; holds no lease
    with psycopg.connect(url, autocommit=True) as sql:
        sql.execute(
            f"UPDATE {schema}.lease SET epoch = epoch + 1, holder = %s, address = %s, "
            f"expires_at = now() + make_interval(secs => %s)",
            [holder, address, seconds],
        )


def replies_and_files(broker: BrokerProcess, client: FrameSocket, until_s: float) -> Any:
    """Wait for the client's next reply, sampling the broker's open files meanwhile: (reply,
    most files seen). The reply is None when the connection closed without one."""
    most = 0
    deadline = time.monotonic() + until_s
    while True:
        most = max(most, open_files(broker))
        try:
            return client.receive(timeout=0.05), most
        except TimeoutError:
            assert time.monotonic() < deadline, "no reply in time"
        except EOFError:
            return None, most


def test_a_lease_naming_the_brokers_own_address_is_waited_out_not_forwarded_to(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    # A holder this broker cannot prove gone (another machine's id, say) whose lease names
    # the address this broker listens on: clients wait for the lease, they are not sent to
    # this very broker again and again (issue 29: 20,000 open files in 3 s, then EMFILE).
    port = free_port()
    claim_lease(postgres_server.url, pg_schema, "another-machine", f"127.0.0.1:{port}", 60)
    broker = broker_factory("--port", str(port), "--lease-ttl-s", "2",
                            postgres=(postgres_server.url, pg_schema))  # fmt: skip
    with FrameSocket(broker.address) as client:
        client.send({"cmd": "PUSH", "reqId": "p", "queue": "q", "data": 1})
        most_files = 0
        for _ in range(20):  # a second of waiting for the lease (the client is held)
            most_files = max(most_files, open_files(broker))
            time.sleep(0.05)
        with psycopg.connect(postgres_server.url, autocommit=True) as sql:  # the holder goes
            sql.execute(f"UPDATE {pg_schema}.lease SET expires_at = now()")
        reply, most_after = replies_and_files(broker, client, 30)
    assert reply is not None and (reply["reqId"], reply["ok"]) == ("p", True)
    assert max(most_files, most_after) < FEW_FILES
    _, holder, _, _ = lease_row(postgres_server.url, pg_schema)
    assert f"pid={broker.process.pid}" in holder  # it took the lease once it expired


def test_a_client_no_active_broker_can_be_found_for_is_told_so_and_closed(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    # The lease is held for a minute by a broker at an address where nothing listens: the
    # standby tries it with a backoff, and after two TTLs (at least 10 s) turns it away.
    nowhere = f"127.0.0.1:{free_port()}"
    claim_lease(postgres_server.url, pg_schema, "another-machine", nowhere, 60)
    standby = broker_factory("--lease-ttl-s", "1", postgres=(postgres_server.url, pg_schema))
    with FrameSocket(standby.address) as client:
        client.send({"cmd": "PUSH", "reqId": "p", "queue": "q", "data": 1})
        reply, most_files = replies_and_files(standby, client, 30)
        assert reply is not None, "closed without a reply"
        assert (reply["reqId"], reply["ok"]) == ("p", False)
        assert reply["error"] == (
            f"No active broker reachable from this standby within 10 s (the lease names {nowhere})"
        )
        with_eof = client.read_until_eof()
    assert with_eof == [] and most_files < FEW_FILES
