"""Several brokers on one PostgreSQL schema, as real processes: the standby takes over from a
killed active broker with nothing acknowledged lost or duplicated, a paused active broker that
lost its lease never writes again, and a database outage withholds replies instead of lying.

Clients use the standby's address throughout, as they would behind a load balancer: their bytes
are forwarded to the active broker, and when it changes their connections close and they
reconnect. Every check is on the database or on the replies, never on logs.
"""

from __future__ import annotations

import os
import random
import signal
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.broker import BrokerFactory, BrokerProcess, FrameSocket, poll_until
from tests.support.pipelines import get_jobs, lease_all, pipeline, push_batch
from tests.support.postgres import PrivateServer, free_port

TTL = "1"  # --lease-ttl-s: short, so that a takeover comes within a second or two
SEEDS = range(int(os.environ.get("TRIOQ_FAILOVER_SEEDS", "3")))  # `make soak` sets more
TAKEOVER_TIMEOUT_S = 30.0
# Where the active broker commits: on its event loop (the default) or on a worker thread
# pipelined with the next pass (--pg-commit-thread); fencing and outages hold for both.
COMMITS = {"loop": (), "thread": ("--pg-commit-thread",)}


class Pair:
    """Two brokers on one schema: `active` started first and holds the lease, `standby` waits."""

    def __init__(
        self, factory: BrokerFactory, where: tuple[str, str], commit: str = "loop"
    ) -> None:
        self.http_ports = free_port(), free_port()
        self.active = self._start(factory, where, commit, self.http_ports[0])
        self.standby = self._start(factory, where, commit, self.http_ports[1])
        self.active_address = f"127.0.0.1:{self.active.address[1]}"
        status = self.wait_for(1, lambda s: s["active"] == self.active_address)
        assert status["role"] == "standby", status

    @staticmethod
    def _start(factory: BrokerFactory, where: tuple[str, str], commit: str, port: int) -> Any:
        options = ("--lease-ttl-s", TTL, "--http-port", str(port), *COMMITS[commit])
        return factory(*options, postgres=where)

    def health(self, which: int) -> dict[str, Any]:
        """/health of broker 0 (first active) or 1 (first standby); {} while it cannot answer."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.http_ports[which]}/health", timeout=2).json()
        except httpx.TransportError:
            return {}

    def wait_for(self, which: int, accept: Any) -> dict[str, Any]:
        """Poll /health of a broker until `accept(status)`; returns the status."""
        status = poll_until(
            lambda: self.health(which), lambda s: bool(s) and accept(s), TAKEOVER_TIMEOUT_S
        )
        assert status and accept(status), f"broker {which} never got there: {status}"
        return status


def stored(url: str, schema: str, queue: str) -> dict[str, str]:
    """id -> state of the queue's jobs, as the database has them."""
    with psycopg.connect(url) as sql:
        rows = sql.execute(f"SELECT id, state FROM {schema}.jobs WHERE queue = %s", [queue])
        return dict(rows.fetchall())


def lease_epoch(url: str, schema: str) -> int:
    with psycopg.connect(url) as sql:
        row = sql.execute(f"SELECT epoch FROM {schema}.lease").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("seed", "commit"), [*((s, "loop") for s in SEEDS), (0, "thread")])
def test_failover_under_load_loses_and_duplicates_nothing(
    broker_factory: BrokerFactory,
    postgres_server: PrivateServer,
    pg_schema: str,
    seed: int,
    commit: str,
) -> None:
    rng = random.Random(seed)
    where = (postgres_server.url, pg_schema)
    pair = Pair(broker_factory, where, commit)
    leased_queue, pushed_queue = f"leased-{seed}", f"pushed-{seed}"
    with FrameSocket(pair.standby.address) as client:  # forwarded to the active broker
        ids = push_batch(client, leased_queue, [{"data": {"n": i}} for i in range(200)])
        tokens = lease_all(client, leased_queue, ids)
        requests: list[dict[str, Any]] = []
        for i in range(400):  # a producer's pushes and a worker's acks, interleaved
            requests.append({"cmd": "PUSH", "reqId": f"push-{i}", "queue": pushed_queue,
                             "data": {"n": i}})  # fmt: skip
            if i < len(ids):
                requests.append({"cmd": "ACK", "reqId": f"ack-{i}", "id": ids[i],
                                 "token": tokens[i], "result": {"n": i}})  # fmt: skip
        run = pipeline(
            client, requests, kill_after=rng.randrange(20, 500), broker=pair.active
        )  # kill -9 at a random moment under load
    acked_pushes = {r["reqId"]: r["id"] for r in run.replies.values() if r["reqId"][0] == "p"}
    acked_acks = {int(r["reqId"][4:]) for r in run.replies.values() if r["reqId"][0] == "a"}
    assert all(reply["ok"] is True for reply in run.replies.values())

    pair.wait_for(1, lambda s: s["role"] == "active")
    with FrameSocket(pair.standby.address) as client:  # the same address, now the active one
        jobs = get_jobs(client, list(acked_pushes.values()))
        assert [job["data"]["n"] for job in jobs] == [int(r[5:]) for r in acked_pushes]
        sent_acks = {int(r["reqId"][4:]) for r in requests[: run.sent] if r["cmd"] == "ACK"}
        for i in range(len(ids)):  # leases survived with their tokens
            reply = client.call("ACK", id=ids[i], token=tokens[i], result={"n": i})
            if i in acked_acks or i not in sent_acks:  # done once, or never sent: settles now
                assert reply["ok"] is (i not in acked_acks), (i, reply)
            # An ACK in flight at the kill may have been applied (its reply lost) or not.
    in_db = stored(postgres_server.url, pg_schema, pushed_queue)
    sent_pushes = sum(1 for request in requests[: run.sent] if request["cmd"] == "PUSH")
    assert set(acked_pushes.values()) <= set(in_db) and len(in_db) <= sent_pushes
    assert set(stored(postgres_server.url, pg_schema, leased_queue).values()) == {"completed"}


@pytest.mark.parametrize("commit", COMMITS)
def test_a_paused_active_broker_that_lost_its_lease_never_writes_again(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str, commit: str
) -> None:
    where = (postgres_server.url, pg_schema)
    pair = Pair(broker_factory, where, commit)
    old_epoch = lease_epoch(postgres_server.url, pg_schema)
    with FrameSocket(pair.active.address) as old:  # straight to the old active broker
        assert old.call("PUSH", queue="fenced", data="before")["ok"] is True
        pair.active.send_signal(signal.SIGSTOP)
        try:
            old.send({"cmd": "PUSH", "reqId": "late", "queue": "fenced", "data": "late"})
            new_status = pair.wait_for(1, lambda s: s["role"] == "active")
            with FrameSocket(pair.standby.address) as new:
                assert new.call("PUSH", queue="fenced", data="new")["ok"] is True
        finally:
            pair.active.send_signal(signal.SIGCONT)
        replies = old.read_until_eof()  # it steps down: its client connections close
    assert [reply for reply in replies if reply.get("ok")] == []
    pair.wait_for(0, lambda s: s["role"] == "standby")
    assert new_status["epoch"] == lease_epoch(postgres_server.url, pg_schema) > old_epoch
    with FrameSocket(pair.standby.address) as client:
        jobs = client.call("GetJobs", queue="fenced", state="waiting")["jobs"]
    assert sorted(job["data"] for job in jobs) == ["before", "new"]
    assert len(stored(postgres_server.url, pg_schema, "fenced")) == 2  # nothing from "late"
    assert pair.active.alive()


@pytest.mark.parametrize("commit", COMMITS)
def test_a_database_outage_withholds_replies_and_the_broker_serves_again(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str, commit: str
) -> None:
    where = (postgres_server.url, pg_schema)
    http_port = free_port()
    broker: BrokerProcess = broker_factory(
        "--lease-ttl-s", TTL, "--http-port", str(http_port), *COMMITS[commit], postgres=where
    )
    before = [{"cmd": "PUSH", "reqId": f"b{i}", "queue": "out", "data": i} for i in range(100)]
    during = [{"cmd": "PUSH", "reqId": f"d{i}", "queue": "out", "data": i} for i in range(50)]
    with FrameSocket(broker.address) as client:
        acked = {r["id"] for r in pipeline(client, before).replies.values() if r["ok"]}
        postgres_server.stop()
        try:
            client.send(*during)
            # No reply while nothing can be committed; after a TTL the broker steps down to
            # standby and closes its client connections.
            replies = client.read_until_eof(timeout=TAKEOVER_TIMEOUT_S)
        finally:
            postgres_server.start()
    assert [reply for reply in replies if reply.get("ok")] == []
    assert broker.alive()
    with FrameSocket(broker.address) as client:  # it competes again and takes the lease
        assert client.call("PUSH", queue="out", data="after")["ok"] is True
        get_jobs(client, sorted(acked))
    assert len(acked) == 100 and acked <= set(stored(postgres_server.url, pg_schema, "out"))
