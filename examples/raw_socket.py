"""A producer and a worker on trioq over a plain TCP socket, with nothing but msgspec.

    .venv/bin/python examples/raw_socket.py [HOST:PORT]     # default 127.0.0.1:6789

It pushes three emails to the queue `emails`, then works the queue as a worker does: PULL with
an `owner` (a lease: the job is this worker's for `lockTtl` ms, and settling it needs the
`token` the reply carries), ACK with a result, or FAIL with an error and a stack. One address
is bad: its job fails, is retried once after 100 ms, fails again and ends `failed`. The loop
stops once the queue stays empty for a second (a real worker keeps polling), then it prints each
job's state. Reply shapes: docs/commands.md.

The protocol: every frame is a 4-byte big-endian length, then that many bytes of MessagePack; a
request is a map with `cmd` (and an optional `reqId` its reply echoes); every reply has `ok`,
and `error` (a string) when `ok` is false. This client sends one request at a time, so each
reply is the answer to the request before it.
"""

from __future__ import annotations

import socket
import struct
import sys
import traceback
from typing import Any

import msgspec

QUEUE = "emails"
WORKER = "raw-socket-worker"  # the `owner` of this worker's leases
LEASE_MS = 30_000  # a job running longer would call ExtendLock with its token
POLL_MS = 1_000  # how long PULL waits for a job before answering `job: null`


class Broker:
    """One connection to trioq: `call` sends a command and returns its reply."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send `{cmd, **fields}`; the reply, or RuntimeError with the broker's error text."""
        body = msgspec.msgpack.encode({"cmd": cmd, **fields})
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        (size,) = struct.unpack(">I", self._read(4))
        reply: dict[str, Any] = msgspec.msgpack.decode(self._read(size))
        if not reply["ok"]:
            raise RuntimeError(f"{cmd}: {reply['error']}")
        return reply

    def _read(self, size: int) -> bytes:
        """Exactly `size` bytes: a bare recv(size) may return fewer."""
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data), socket.MSG_WAITALL)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        """Close the connection (jobs it pulled without `owner` would go back to waiting)."""
        self.sock.close()


def send_email(data: dict[str, Any]) -> dict[str, Any]:
    """The work itself: here it only checks the address."""
    if "@" not in data["to"]:
        raise ValueError(f"not an email address: {data['to']!r}")
    return {"sent": True, "to": data["to"]}


def produce(broker: Broker) -> list[str]:
    """Push three jobs; their ids. Each may be tried twice, 100 ms apart."""
    ids = []
    for to in ("ada@example.com", "grace@example.com", "nobody"):
        reply = broker.call(
            "PUSH", queue=QUEUE, name="welcome", data={"to": to}, maxAttempts=2, backoff=100
        )
        ids.append(reply["id"])  # {ok: true, id}
    print(f"pushed {len(ids)} jobs to {QUEUE}")
    return ids


def work(broker: Broker) -> None:
    """Lease a job, run it, settle it; until no job comes for POLL_MS."""
    while True:
        reply = broker.call("PULL", queue=QUEUE, owner=WORKER, lockTtl=LEASE_MS, timeout=POLL_MS)
        job, token = reply["job"], reply["token"]  # {ok: true, job: Job | null, token}
        if job is None:
            return
        attempt = f"attempt {job['attempts'] + 1} of {job['maxAttempts']}"
        try:
            result = send_email(job["data"])
        except Exception as exc:
            # `stack` is a list of strings (the broker keeps the job's stackTraceLimit lines).
            stack = traceback.format_exception(exc)
            broker.call("FAIL", id=job["id"], token=token, error=str(exc), stack=stack)
            print(f"FAIL {job['data']['to']} ({attempt}): {exc}")
        else:
            broker.call("ACK", id=job["id"], token=token, result=result)
            print(f"ACK  {job['data']['to']} ({attempt}): {result}")


def report(broker: Broker, ids: list[str]) -> None:
    """Print each job's final state, with its result or its error."""
    for job_id in ids:
        job = broker.call("GetJob", id=job_id)["job"]
        outcome = job["returnvalue"] if job["state"] == "completed" else job["failedReason"]
        print(f"{job['data']['to']}: {job['state']}, {outcome}")


def main() -> None:
    """Run the producer, the worker and the report against HOST:PORT."""
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:6789").rpartition(":")
    broker = Broker(host, int(port))
    try:
        ids = produce(broker)
        work(broker)
        report(broker, ids)
    finally:
        broker.close()


if __name__ == "__main__":
    main()
