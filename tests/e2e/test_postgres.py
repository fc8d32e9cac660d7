"""`trioq serve --postgres URL --pg-schema S` as a real process on the session's private
PostgreSQL: acknowledged jobs survive a SIGKILL, and a second broker on the schema is a standby
that forwards its clients to the active one."""

from __future__ import annotations

import httpx
import psycopg

from tests.support.broker import BrokerFactory, FrameSocket, poll_until
from tests.support.pipelines import WINDOW, get_jobs, pipeline
from tests.support.postgres import PrivateServer, free_port

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


def test_a_second_broker_is_a_standby_that_forwards_to_the_active_one(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    first_http, second_http = free_port(), free_port()
    ttl = "10"  # nothing here waits for an expiry: a loaded machine must not cause a takeover
    first = broker_factory("--lease-ttl-s", ttl, "--http-port", str(first_http), postgres=where)
    second = broker_factory("--lease-ttl-s", ttl, "--http-port", str(second_http), postgres=where)
    active_address = f"127.0.0.1:{first.address[1]}"
    with httpx.Client(timeout=5) as http:
        standby = poll_until(
            lambda: http.get(f"http://127.0.0.1:{second_http}/health").json(),
            lambda health: health["active"] == active_address,
        )
        assert (standby["role"], standby["active"]) == ("standby", active_address)
        assert http.get(f"http://127.0.0.1:{second_http}/ready").status_code == 503
        refused = http.post(f"http://127.0.0.1:{second_http}/queues/q/jobs", json={"data": {}})
        assert refused.status_code == 503 and active_address in refused.json()["error"]
        assert (
            'trioq_role{role="standby"} 1.0'
            in http.get(f"http://127.0.0.1:{second_http}/metrics").text
        )
        active = http.get(f"http://127.0.0.1:{first_http}/health").json()
        assert (active["role"], active["epoch"]) == ("active", standby["epoch"])
        dashboard = http.get(f"http://127.0.0.1:{first_http}/dashboard").json()["data"]
        assert (dashboard["broker"]["role"], dashboard["broker"]["store"]) == ("active", "postgres")
        assert http.get(f"http://127.0.0.1:{first_http}/ready").status_code == 200
    with FrameSocket(second.address) as client:  # the standby's address reaches the active
        pushed = client.call("PUSH", queue="pg", data={"via": "standby"})
    assert pushed["ok"] is True
    with FrameSocket(first.address) as client:
        assert client.call("GetJob", id=pushed["id"])["job"]["data"] == {"via": "standby"}
    with psycopg.connect(postgres_server.url) as sql:  # the first kept its lease all along
        lease = sql.execute(f"SELECT epoch, address FROM {pg_schema}.lease").fetchone()
    assert lease == (standby["epoch"], active_address)


def test_a_normal_start_and_restart_log_at_info_only(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    for epoch in (1, 2):  # a first start, then a restart after a clean stop
        broker = broker_factory("--lease-ttl-s", "10", postgres=where)
        # It takes clients (and prints its address) before it restores: the serving line
        # follows once the stored jobs are loaded.
        text = poll_until(broker.stderr_text, lambda text: "active: serving" in text)
        lines = text.splitlines()
        assert lines[0] == (
            f"INFO broker.ha: schema {pg_schema}: took the lease (epoch {epoch}); restoring"
        )
        assert lines[1].startswith(f"INFO broker.ha: active: serving (epoch {epoch}), restored in ")
        assert not [line for line in lines if not line.startswith("INFO ")], lines
        broker.stop()


def test_an_sse_client_of_a_standby_hears_the_events_once_it_takes_over(
    broker_factory: BrokerFactory, postgres_server: PrivateServer, pg_schema: str
) -> None:
    where = (postgres_server.url, pg_schema)
    second_http = free_port()
    first = broker_factory("--lease-ttl-s", "10", postgres=where)
    second = broker_factory("--lease-ttl-s", "10", "--http-port", str(second_http), postgres=where)
    base = f"http://127.0.0.1:{second_http}"
    with httpx.Client(timeout=10) as http, http.stream("GET", f"{base}/events") as events:
        lines = events.iter_lines()
        assert next(lines) == "retry: 3000"
        first.stop()  # a clean stop releases the lease: the standby takes it at once
        health = poll_until(
            lambda: http.get(f"{base}/health").json(), lambda health: health["role"] == "active"
        )
        assert health["role"] == "active"
        with FrameSocket(second.address) as client:
            pushed = client.call("PUSH", queue="sse", data={"after": "takeover"})
        heard = next(line for line in lines if line.startswith("data:") and pushed["id"] in line)
    assert '"queue":"sse"' in heard
