"""Crash durability against real trioq processes persisting to SQLite.

Each test pipelines one kind of change (PUSH, ACK, FAIL) with up to WINDOW requests in flight,
SIGKILLs the broker after a seed-chosen number of replies (with the window topped up just before,
so the broker is busy when it dies), restarts it on the same data directory and checks the
contract: every `ok` a client heard is on disk; what was not acknowledged may or may not have
happened, but nothing is lost, duplicated or half-applied. Replies that reached the client's
socket before the kill but were read only after it count as heard too.

The last test does the same after a clean SIGTERM, across every kind of job state.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker import BrokerFactory, BrokerProcess, FrameSocket
from tests.support.pipelines import (
    WINDOW,
    Pipelined,
    call_all,
    get_jobs,
    lease_all,
    pipeline,
    pull_all,
    push_batch,
)

# `make soak` sets TRIOQ_CRASH_ROUNDS=100: each kill test then runs that many seeded rounds.
ROUNDS = int(os.environ.get("TRIOQ_CRASH_ROUNDS", "0"))
SEEDS = [11 * (n + 1) for n in range(ROUNDS)] if ROUNDS else [11, 22, 33, 44]


def counts(client: FrameSocket, queue: str) -> dict[str, int]:
    reply = client.call("GetJobCounts", queue=queue)
    assert reply["ok"] is True, reply
    return reply["counts"]


def restart(broker_factory: BrokerFactory, data_dir: Path) -> BrokerProcess:
    return broker_factory(data_dir=data_dir)


def describe(run: Pipelined) -> str:
    return (
        f"sent {run.sent}, read {run.read_before_kill} before the kill "
        f"({run.in_flight_at_kill} in flight), {len(run.replies)} in all"
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_acknowledged_pushes_survive_kill(
    broker_factory: BrokerFactory, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    queue = f"crash-push-{seed}"
    total = 1500
    payloads = [
        {
            "seq": i,
            "seed": seed,
            "text": rng.randbytes(rng.randrange(0, 64)).hex(),
            "nested": {"x": rng.random(), "list": [i, str(i)]},
        }
        for i in range(total)
    ]
    requests = [
        {"cmd": "PUSH", "reqId": f"push-{i}", "queue": queue, "name": "crash", "data": payloads[i]}
        for i in range(total)
    ]
    broker = broker_factory(data_dir=data_dir)
    with FrameSocket(broker.address) as client:
        run = pipeline(client, requests, kill_after=rng.randrange(0, total - WINDOW), broker=broker)
    acked: dict[int, str] = {}
    for req_id, reply in run.replies.items():
        assert reply["ok"] is True, reply
        acked[int(req_id.removeprefix("push-"))] = reply["id"]
    assert len(set(acked.values())) == len(acked), "two pushes got the same id"

    broker = restart(broker_factory, data_dir)
    with FrameSocket(broker.address) as client:
        seqs = sorted(acked)
        jobs = get_jobs(client, [acked[seq] for seq in seqs])
        for seq, job in zip(seqs, jobs, strict=True):
            assert job["state"] == "waiting", (describe(run), job)
            assert job["data"] == payloads[seq], (describe(run), job)
            assert job["attempts"] == 0

        after = counts(client, queue)
        stored = sum(n for state, n in after.items() if state != "paused")
        assert after["waiting"] == stored, after
        assert len(acked) <= stored <= run.sent, (describe(run), after)

        # Everything in the queue is one of the pushes sent, each at most once, intact.
        pulled = pull_all(client, queue)
        assert len(pulled) == stored
        seen = [job["data"]["seq"] for job in pulled]
        assert len(seen) == len(set(seen)), "a push was stored twice"
        for job in pulled:
            seq = job["data"]["seq"]
            assert seq < run.sent, f"job {job['id']} was never sent"
            assert job["data"] == payloads[seq]
            if seq in acked:
                assert job["id"] == acked[seq]
        assert set(acked) <= set(seen)


def settle_then_kill(
    broker_factory: BrokerFactory, tmp_path: Path, seed: int, command: str
) -> tuple[BrokerProcess, FrameSocket, dict[str, Any]]:
    """Push N jobs (maxAttempts 1), lease them all, pipeline ACKs or FAILs in a seeded order and
    SIGKILL mid-stream; returns the restarted broker, a client to it, and what happened."""
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    queue = f"crash-{command.lower()}-{seed}"
    n = 400
    broker = broker_factory(data_dir=data_dir)
    with FrameSocket(broker.address) as client:
        ids = push_batch(
            client,
            queue,
            [{"name": "crash", "data": {"seq": i}, "maxAttempts": 1} for i in range(n)],
        )
        tokens = lease_all(client, queue, ids)
        order = list(range(n))
        rng.shuffle(order)
        outcomes = {
            i: {"seq": i, "value": rng.randbytes(rng.randrange(1, 32)).hex()} for i in range(n)
        }
        requests = []
        for i in order:
            request: dict[str, Any] = {
                "cmd": command,
                "reqId": f"{command}-{i}",
                "id": ids[i],
                "token": tokens[i],
            }
            if command == "ACK":
                request["result"] = outcomes[i]
            else:
                request["error"] = f"boom {outcomes[i]['value']}"
            requests.append(request)
        run = pipeline(client, requests, kill_after=rng.randrange(0, n - WINDOW), broker=broker)
    acked = set()
    for req_id, reply in run.replies.items():
        assert reply["ok"] is True and "data" not in reply, reply
        acked.add(int(req_id.removeprefix(f"{command}-")))
    sent = {order[k] for k in range(run.sent)}
    broker = restart(broker_factory, data_dir)
    client = FrameSocket(broker.address)
    return (
        broker,
        client,
        {
            "queue": queue,
            "ids": ids,
            "tokens": tokens,
            "outcomes": outcomes,
            "acked": acked,
            "sent": sent,
            "run": run,
        },
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_acknowledged_acks_survive_kill(
    broker_factory: BrokerFactory, tmp_path: Path, seed: int
) -> None:
    _, client, seen = settle_then_kill(broker_factory, tmp_path, seed, "ACK")
    ids, acked, sent, outcomes = seen["ids"], seen["acked"], seen["sent"], seen["outcomes"]
    context = describe(seen["run"])
    with client:
        jobs = get_jobs(client, ids)
        still_active = []
        for i, job in enumerate(jobs):
            if i in acked:
                assert job["state"] == "completed", (context, i, job)
            if job["state"] == "completed":
                assert i in sent, f"job {i} completed without an ACK"
                assert job["returnvalue"] == outcomes[i], (context, job)
            else:
                assert i not in acked
                assert job["state"] == "active", (context, i, job)  # still leased, not lost
                still_active.append(i)
        results = call_all(
            client, [{"cmd": "GetResult", "reqId": f"res-{i}", "id": ids[i]} for i in sorted(acked)]
        )
        for i, reply in zip(sorted(acked), results, strict=True):
            assert reply["ok"] is True and reply["result"] == outcomes[i], (context, reply)

        # Completed jobs are never handed out again, and the leased ones are still leased.
        repulled = pull_all(client, seen["queue"])
        assert repulled == [], (context, [job["id"] for job in repulled])

        # The leases survived with their tokens: the original worker can still finish its jobs.
        replies = call_all(
            client,
            [
                {
                    "cmd": "ACK",
                    "reqId": f"late-{i}",
                    "id": ids[i],
                    "token": seen["tokens"][i],
                    "result": outcomes[i],
                }
                for i in still_active
            ],
        )
        for reply in replies:
            assert reply["ok"] is True and "data" not in reply, (context, reply)
        after = counts(client, seen["queue"])
        assert after["completed"] == len(ids), after


@pytest.mark.parametrize("seed", SEEDS)
def test_acknowledged_fails_survive_kill(
    broker_factory: BrokerFactory, tmp_path: Path, seed: int
) -> None:
    _, client, seen = settle_then_kill(broker_factory, tmp_path, seed, "FAIL")
    ids, acked, sent, outcomes = seen["ids"], seen["acked"], seen["sent"], seen["outcomes"]
    context = describe(seen["run"])
    with client:
        jobs = get_jobs(client, ids)
        still_active = []
        for i, job in enumerate(jobs):
            if i in acked:
                assert job["state"] == "failed", (context, i, job)
            if job["state"] == "failed":
                assert i in sent, f"job {i} failed without a FAIL"
                assert job["failedReason"] == f"boom {outcomes[i]['value']}", (context, job)
                assert job["attempts"] == 1, (context, job)
            else:
                assert i not in acked
                assert job["state"] == "active", (context, i, job)
                assert job["attempts"] == 0, (context, job)
                still_active.append(i)

        repulled = pull_all(client, seen["queue"])
        assert repulled == [], (context, [job["id"] for job in repulled])

        replies = call_all(
            client,
            [
                {
                    "cmd": "FAIL",
                    "reqId": f"late-{i}",
                    "id": ids[i],
                    "token": seen["tokens"][i],
                    "error": "late",
                }
                for i in still_active
            ],
        )
        for reply in replies:
            assert reply["ok"] is True and "data" not in reply, (context, reply)
        after = counts(client, seen["queue"])
        assert after["failed"] == len(ids), after


KEPT_FIELDS = (
    "state",
    "data",
    "attempts",
    "maxAttempts",
    "priority",
    "runAt",
    "returnvalue",
    "failedReason",
    "name",
    "queue",
)


def snapshot(job: dict[str, Any]) -> dict[str, Any]:
    return {key: job[key] for key in KEPT_FIELDS}


@pytest.mark.parametrize("seed", SEEDS)
def test_clean_shutdown_keeps_everything(
    broker_factory: BrokerFactory, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    queue, leased_queue, unowned_queue = (f"clean-{tag}-{seed}" for tag in ("a", "b", "c"))
    broker = broker_factory(data_dir=data_dir)
    with FrameSocket(broker.address) as client:
        plain = push_batch(
            client, queue, [{"name": "w", "data": {"k": i}} for i in range(rng.randrange(5, 40))]
        )
        delayed = push_batch(
            client, queue, [{"name": "d", "data": {"k": i}, "delay": 600_000} for i in range(7)]
        )
        prioritized = push_batch(
            client, queue, [{"name": "p", "data": {"k": i}, "priority": 1 + i} for i in range(5)]
        )
        n = 60
        leased = push_batch(
            client,
            leased_queue,
            [
                {
                    "name": "l",
                    "data": {"k": i},
                    "maxAttempts": 1 if i % 3 else 3,
                    "backoff": 600_000,
                }
                for i in range(n)
            ],
        )
        tokens = dict(zip(leased, lease_all(client, leased_queue, leased), strict=True))
        picks = list(leased)
        rng.shuffle(picks)
        to_ack, to_fail, keep = picks[:20], picks[20:40], picks[40:]
        for i, job_id in enumerate(to_ack):
            reply = client.call("ACK", id=job_id, token=tokens[job_id], result={"r": i})
            assert reply["ok"] is True, reply
        for job_id in to_fail:
            reply = client.call("FAIL", id=job_id, token=tokens[job_id], error=f"e-{job_id}")
            assert reply["ok"] is True, reply
        unowned = push_batch(client, unowned_queue, [{"name": "u", "data": {}} for _ in range(9)])
        assert {job["id"] for job in pull_all(client, unowned_queue, owner=None)} == set(unowned)

        everything = plain + delayed + prioritized + leased
        before = {job["id"]: snapshot(job) for job in get_jobs(client, everything)}
        states = {state["state"] for state in before.values()}
        assert states == {"waiting", "delayed", "prioritized", "active", "completed", "failed"}
        counts_before = {q: counts(client, q) for q in (queue, leased_queue)}

        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=10) == 0, broker.stderr_text()

    broker = restart(broker_factory, data_dir)
    with FrameSocket(broker.address) as client:
        after = {job["id"]: snapshot(job) for job in get_jobs(client, everything)}
        assert after == before
        assert {q: counts(client, q) for q in (queue, leased_queue)} == counts_before
        # Jobs pulled without an owner go back to waiting, without spending an attempt.
        for job in get_jobs(client, unowned):
            assert (job["state"], job["attempts"]) == ("waiting", 0), job
        # Leases and tokens survive a restart.
        for job_id in keep:
            reply = client.call("ACK", id=job_id, token=tokens[job_id], result="done")
            assert reply["ok"] is True and "data" not in reply, reply
