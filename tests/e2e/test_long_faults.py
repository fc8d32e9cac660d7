"""kill -9 rounds over a mixed workload on several connections, against a broker on SQLite.

Every round restarts the broker on the same data directory, checks that everything a client
heard `ok` for in earlier rounds is stored, then runs five connections at once, each pipelining
one kind of work:

- durable PUSHes (their data must come back);
- ACKs of leased jobs (an acked job stays completed);
- FAILs of leased jobs into retry (a failed job keeps its attempt and is not active again);
- PUSHF flows (a parent and two children, all or nothing);
- bulk PUSHes of 16 KiB jobs that keep the SQLite write-ahead log busy, so that some kills land
  while it is being checkpointed (it is checkpointed about every 40 MiB);

while a cron fires every 20 ms. After a seed-chosen number of replies the broker is SIGKILLed with
requests in flight. What was not acknowledged may or may not have happened, but nothing heard is
lost, nothing is half-applied and no job is duplicated.

CI runs KILL_ROUNDS rounds (2); `TRIOQ_KILL_ROUNDS=100` (`make soak`) runs the long version. The
seed is fresh each run and printed on failure (`TRIOQ_KILL_SEED` replays it).
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker import BrokerFactory, BrokerProcess, FrameSocket, poll_until

ROUNDS = int(os.environ.get("TRIOQ_KILL_ROUNDS", "2"))
SEED = int(os.environ.get("TRIOQ_KILL_SEED", str(random.randrange(2**32))))
WINDOW = 32
LEASE_MS = 600_000  # no lease runs out within a round
WORK_JOBS = 120  # leased per round, half to be acked and half failed
PUSHES, FLOWS, BULK = 300, 40, 500
BULK_BYTES = 16 * 1024
CRON = {"name": "mixed-cron", "queue": "mixed-cron", "repeatEvery": 20, "data": {"cron": 1}}


@dataclass
class Heard:
    """Everything a client heard `ok` for, over all rounds."""

    pushed: dict[str, Any] = field(default_factory=dict)  # job id -> its data
    acked: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    flows: list[list[str]] = field(default_factory=list)
    cron: bool = False
    unsettled: set[str] = field(default_factory=set)  # an ACK or FAIL sent, reply not heard
    in_flight_at_kills: list[int] = field(default_factory=list)


class Connection(threading.Thread):
    """One client connection pipelining its requests (WINDOW in flight) until done or closed."""

    def __init__(self, address: tuple[str, int], requests: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.client = FrameSocket(address)
        self.requests = requests
        self.sent = 0
        self.replies: dict[str, Any] = {}

    def run(self) -> None:
        try:
            while len(self.replies) < len(self.requests):
                room = WINDOW - (self.sent - len(self.replies))
                batch = self.requests[self.sent : self.sent + max(room, 0)]
                if batch:
                    self.client.send(*batch)
                    self.sent += len(batch)
                reply = self.client.receive()
                self.replies[reply["reqId"]] = reply
        except (EOFError, OSError):  # the broker was killed: what was read is what was heard
            pass
        finally:
            self.client.close()

    def heard_ok(self, request: dict[str, Any]) -> bool:
        """Whether the client heard `ok` for `request`."""
        return self.replies.get(request["reqId"], {}).get("ok") is True


def request(cmd: str, req_id: str, **fields: Any) -> dict[str, Any]:
    return {"cmd": cmd, "reqId": req_id, **fields}


def check_everything_heard(client: FrameSocket, heard: Heard, context: str) -> None:
    """After a restart: every `ok` is stored, and nothing is half-applied."""
    for job_id, data in heard.pushed.items():
        job = client.call("GetJob", id=job_id)["job"]
        assert job is not None and job["data"] == data, (context, job_id, job)
    for job_id in heard.acked:
        assert client.call("GetState", id=job_id)["state"] == "completed", (context, job_id)
    for job_id in heard.failed:
        job = client.call("GetJob", id=job_id)["job"]
        assert job["attempts"] == 1 and job["state"] in ("delayed", "waiting"), (context, job)
    for job_id in heard.unsettled:
        job = client.call("GetJob", id=job_id)["job"]
        assert job is not None, (context, "a job with an unanswered ACK/FAIL was lost", job_id)
        assert (job["state"], job["attempts"]) in {
            ("active", 0), ("completed", 0), ("delayed", 1), ("waiting", 1),
        }, (context, "half-applied", job)  # fmt: skip
    for flow in heard.flows:
        states = [client.call("GetState", id=job_id).get("state") for job_id in flow]
        assert all(isinstance(state, str) for state in states), (context, flow, states)
    if heard.cron:
        assert client.call("CronGet", name=CRON["name"])["ok"] is True, context


def lease_work(client: FrameSocket, queue: str) -> list[tuple[str, str]]:
    """Push WORK_JOBS jobs (3 attempts) and pull them all with a lease: (id, token) pairs."""
    jobs = [{"data": {"w": n}, "maxAttempts": 3, "backoff": 600_000} for n in range(WORK_JOBS)]
    pushed = client.call("PUSHB", queue=queue, jobs=jobs)
    assert pushed["ok"] is True, pushed
    reply = client.call("PULLB", queue=queue, count=WORK_JOBS, owner="w", lockTtl=LEASE_MS)
    assert reply["ok"] is True and len(reply["jobs"]) == WORK_JOBS, reply
    return [(job["id"], token) for job, token in zip(reply["jobs"], reply["tokens"], strict=True)]


def workloads(round_no: int, leased: list[tuple[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """The requests of each connection of one round."""
    half = len(leased) // 2
    tag = f"r{round_no}"
    return {
        "push": [
            request("PUSH", f"{tag}-p{n}", queue=f"mixed-push-{tag}", data={"r": round_no, "n": n},
                    durable=True)
            for n in range(PUSHES)
        ],
        "ack": [
            request("ACK", f"{tag}-a{n}", id=job_id, token=token, result={"n": n})
            for n, (job_id, token) in enumerate(leased[:half])
        ],
        "fail": [
            request("FAIL", f"{tag}-f{n}", id=job_id, token=token, error="retry me")
            for n, (job_id, token) in enumerate(leased[half:])
        ],
        "flow": [
            request("PUSHF", f"{tag}-F{n}", jobs=[
                {"id": f"{tag}-f{n}-c1", "queue": "mixed-flow", "input": {
                    "data": 1, "parentId": f"{tag}-f{n}-p"}},
                {"id": f"{tag}-f{n}-c2", "queue": "mixed-flow", "input": {
                    "data": 2, "parentId": f"{tag}-f{n}-p"}},
                {"id": f"{tag}-f{n}-p", "queue": "mixed-parent", "input": {
                    "data": 3, "dependsOn": [f"{tag}-f{n}-c1", f"{tag}-f{n}-c2"],
                    "childrenIds": [f"{tag}-f{n}-c1", f"{tag}-f{n}-c2"]}},
            ])
            for n in range(FLOWS)
        ],
        "bulk": [
            request("PUSH", f"{tag}-b{n}", queue="mixed-bulk", data={"blob": "x" * BULK_BYTES})
            for n in range(BULK)
        ],
    }  # fmt: skip


def record(heard: Heard, kind: str, connection: Connection) -> None:
    """Add what one connection heard to the ledger."""
    for sent_index, req in enumerate(connection.requests):
        ok = connection.heard_ok(req)
        if kind == "push" and ok:
            heard.pushed[connection.replies[req["reqId"]]["id"]] = req["data"]
        elif kind in ("ack", "fail"):
            if ok:
                (heard.acked if kind == "ack" else heard.failed).add(req["id"])
            elif sent_index < connection.sent:
                heard.unsettled.add(req["id"])
        elif kind == "flow" and ok:
            heard.flows.append([node["id"] for node in req["jobs"]])


def one_round(broker: BrokerProcess, round_no: int, heard: Heard, rng: random.Random) -> None:
    """Run the mixed workload and SIGKILL the broker part way through."""
    with FrameSocket(broker.address) as control:
        # Keep the data directory from growing round after round (this writes to the WAL too).
        for queue in ("mixed-bulk", "mixed-cron"):
            assert control.call("Drain", queue=queue)["ok"] is True
        heard.cron |= control.call("Cron", **CRON)["ok"] is True
        leased = lease_work(control, f"mixed-work-r{round_no}")
    connections = {
        kind: Connection(broker.address, requests)
        for kind, requests in workloads(round_no, leased).items()
    }
    total = sum(len(c.requests) for c in connections.values())
    kill_at = rng.randrange(total // 10, total * 9 // 10)
    for connection in connections.values():
        connection.start()
    poll_until(lambda: sum(len(c.replies) for c in connections.values()), lambda n: n >= kill_at)
    in_flight = sum(c.sent - len(c.replies) for c in connections.values())
    broker.kill_hard()
    for connection in connections.values():
        connection.join(timeout=30)
        assert not connection.is_alive(), "a connection did not see the broker die"
    heard.in_flight_at_kills.append(in_flight)
    for kind, connection in connections.items():
        record(heard, kind, connection)


def test_mixed_workload_survives_kill_rounds(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    heard = Heard()
    for round_no in range(ROUNDS + 1):
        context = f"round {round_no}, TRIOQ_KILL_SEED={SEED}"
        broker = broker_factory(data_dir=data_dir)
        with FrameSocket(broker.address) as client:
            check_everything_heard(client, heard, context)
        if round_no == ROUNDS:
            broker.stop()
            break
        one_round(broker, round_no, heard, rng)
        broker.stop()
    print(
        f"\nkill -9 rounds: {ROUNDS}, seed {SEED}; heard ok: {len(heard.pushed)} pushes, "
        f"{len(heard.acked)} acks, {len(heard.failed)} fails, {len(heard.flows)} flows; "
        f"{len(heard.unsettled)} settlements unanswered; in flight at the kills: "
        f"{sum(heard.in_flight_at_kills)}; lost: 0"
    )
