"""`trioq serve --postgres URL --pg-schema S` as a real process on the session's private
PostgreSQL: acknowledged jobs survive a SIGKILL, and one broker writes per schema."""

from __future__ import annotations

import subprocess
import sys

import psycopg

from tests.support.postgres import PrivateServer

from .conftest import BrokerFactory, FrameSocket
from .test_crash import WINDOW, get_jobs, pipeline

TTL = "1"  # --lease-ttl-s: a killed broker's lease keeps its successor waiting this long


def test_acknowledged_pushes_survive_a_kill_and_restart(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    requests = [
        {"cmd": "PUSH", "reqId": f"push-{i}", "queue": "pg", "data": {"n": i}, "priority": i % 3}
        for i in range(300)
    ]
    broker = broker_factory("--lease-ttl-s", TTL, postgres=where)
    with FrameSocket(broker.address) as client:
        run = pipeline(client, requests, kill_after=150, broker=broker)
    acked = {}
    for req_id, reply in run.replies.items():
        assert reply["ok"] is True, reply
        acked[int(req_id.removeprefix("push-"))] = reply["id"]
    assert len(acked) >= 150 and run.in_flight_at_kill <= WINDOW

    broker = broker_factory("--lease-ttl-s", TTL, postgres=where)  # waits out the dead lease
    with FrameSocket(broker.address) as client:
        jobs = get_jobs(client, [acked[n] for n in sorted(acked)])
    assert [job["data"]["n"] for job in jobs] == sorted(acked)
    assert {job["state"] for job in jobs} <= {"waiting", "prioritized"}
    with psycopg.connect(postgres_server.url) as sql:  # an operator's view of the same jobs
        rows = sql.execute(
            f"SELECT id, priority FROM {pg_schema}.jobs WHERE id = ANY(%s)", [list(acked.values())]
        ).fetchall()
    priorities = {job_id: priority for job_id, priority in rows}
    assert {n: priorities[acked[n]] for n in acked} == {n: n % 3 for n in acked}


def test_a_second_broker_on_a_led_schema_is_refused_in_one_line(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    first = broker_factory("--lease-ttl-s", TTL, "--advertise", "10.1.2.3:6789", postgres=where)
    storage = ["--postgres", postgres_server.url, "--pg-schema", pg_schema, "--lease-ttl-s", TTL]
    command = [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", "0", *storage]
    second = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines()[-1] == (
        f"trioq: error: PostgreSQL schema {pg_schema} is in use by another broker "
        "(10.1.2.3:6789); one per --pg-schema"
    )
    with FrameSocket(first.address) as client:  # the first kept its lease all along
        assert client.call("PUSH", queue="pg", data={})["ok"] is True
