"""Pipelined job traffic over a FrameSocket: many requests in flight, their replies read back by
reqId (the crash, failover and PostgreSQL end-to-end tests)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from tests.support.broker import BrokerProcess, FrameSocket

WINDOW = 64  # requests in flight
LEASE_MS = 300_000  # long enough that no lease expires during a test
OWNER = "crash-worker"
DRAIN_TIMEOUT_S = 5.0


def pipeline(
    client: FrameSocket,
    requests: list[dict[str, Any]],
    *,
    kill_after: int | None = None,
    broker: BrokerProcess | None = None,
) -> Pipelined:
    """Send `requests` (each with a distinct reqId) keeping up to WINDOW in flight.

    Without `kill_after`, every reply is read. With it, once `kill_after` replies were read the
    window is topped up, the broker SIGKILLed at once, and whatever replies had already reached
    the socket are read until it closes.
    """
    run = Pipelined()
    while True:
        batch = []
        while run.sent < len(requests) and run.sent - len(run.replies) < WINDOW:
            batch.append(requests[run.sent])
            run.sent += 1
        if batch:
            client.send(*batch)
        if kill_after is not None and len(run.replies) >= kill_after:
            break
        if len(run.replies) == len(requests):
            return run
        reply = client.receive()
        assert reply["reqId"] not in run.replies, f"reply repeated: {reply}"
        run.replies[reply["reqId"]] = reply
    assert broker is not None
    run.read_before_kill = len(run.replies)
    run.in_flight_at_kill = run.sent - len(run.replies)
    assert run.in_flight_at_kill > 0, "the kill must land while requests are in flight"
    assert broker.kill_hard() == -signal.SIGKILL
    while True:
        try:
            reply = client.receive(DRAIN_TIMEOUT_S)
        except EOFError:
            break
        run.replies[reply["reqId"]] = reply
    return run


def get_jobs(client: FrameSocket, ids: list[str]) -> list[dict[str, Any]]:
    """GetJob for every id (pipelined); each must exist."""
    requests = [{"cmd": "GetJob", "reqId": f"get-{i}", "id": j} for i, j in enumerate(ids)]
    replies = call_all(client, requests)
    for job_id, reply in zip(ids, replies, strict=True):
        assert reply["ok"] is True and reply["job"] is not None, f"job {job_id} lost: {reply}"
        assert reply["job"]["id"] == job_id
    return [reply["job"] for reply in replies]


def push_batch(client: FrameSocket, queue: str, items: list[dict[str, Any]]) -> list[str]:
    """PUSHB `items`; the ids, one per item, all different."""
    reply = client.call("PUSHB", queue=queue, jobs=items)
    assert reply["ok"] is True, reply
    assert len(reply["ids"]) == len(items) == len(set(reply["ids"]))
    return reply["ids"]


def lease_all(client: FrameSocket, queue: str, ids: list[str]) -> list[str]:
    """Pull every job of the queue with a lease; returns the tokens in the order of `ids`."""
    pulled = pull_all(client, queue)
    tokens = {job["id"]: job["_token"] for job in pulled}
    assert set(tokens) == set(ids)
    assert all(isinstance(token, str) for token in tokens.values())
    return [tokens[job_id] for job_id in ids]


@dataclass
class Pipelined:
    """What a pipelined run saw: how many requests went out and the replies read, by reqId."""

    sent: int = 0
    replies: dict[str, Any] = field(default_factory=dict)
    read_before_kill: int = 0
    in_flight_at_kill: int = 0


def call_all(client: FrameSocket, requests: list[dict[str, Any]]) -> list[Any]:
    """Pipeline requests and return their replies in request order."""
    run = pipeline(client, requests)
    return [run.replies[request["reqId"]] for request in requests]


def pull_all(client: FrameSocket, queue: str, owner: str | None = OWNER) -> list[dict[str, Any]]:
    """PULLB (timeout 0) until the queue gives nothing; returns the jobs with their tokens."""
    pulled: list[dict[str, Any]] = []
    for _ in range(100):
        fields: dict[str, Any] = {"queue": queue, "count": 1000}
        if owner is not None:
            fields |= {"owner": owner, "lockTtl": LEASE_MS}
        reply = client.call("PULLB", **fields)
        assert reply["ok"] is True, reply
        if not reply["jobs"]:
            return pulled
        tokens = reply.get("tokens") or [None] * len(reply["jobs"])
        for job, token in zip(reply["jobs"], tokens, strict=True):
            pulled.append({**job, "_token": token})
    raise AssertionError("the queue never ran dry")
