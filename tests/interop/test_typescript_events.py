"""Interop: the official TypeScript SDK (run with bun) drives trioq while a WebSocket subscriber
(in the same script, as the reference's dashboard subscribes) waits for every event type of the
reference's catalogue; see ts/events.ts."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.app import START_TIMEOUT_S
from tests.support.typescript import BUN, HERE

EVENTS = {
    "job:pushed", "job:active", "job:completed", "job:failed", "job:removed", "job:progress",
    "job:promoted", "job:discarded", "job:priority-changed", "job:data-updated",
    "job:delay-changed", "queue:counts", "queue:paused", "queue:resumed", "queue:drained",
    "queue:cleaned", "queue:obliterated", "cron:created", "cron:deleted", "dlq:added",
    "dlq:purged", "dlq:retry-all", "worker:connected", "worker:disconnected", "ratelimit:set",
    "ratelimit:cleared", "concurrency:set", "concurrency:cleared", "webhook:added",
    "webhook:removed", "config:dlq-changed", "config:stall-changed", "health:status",
    "stats:snapshot",
}  # fmt: skip


@pytest.fixture
def broker_ports() -> Iterator[tuple[str, int, int]]:
    """A real trioq process (memory mode): its host, TCP port and HTTP port."""
    with socket.socket() as probe:  # `--http-port 0` turns HTTP off: a free port, found now
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    command = [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", str(free)]
    process = subprocess.Popen([*command, "--memory"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        assert ready, f"broker printed nothing in {START_TIMEOUT_S}s"
        # "listening on tcp HOST:PORT", then at once "serving http on HOST:PORT"
        lines = [process.stdout.readline(), process.stdout.readline()]
        assert "listening on tcp" in lines[0] and "serving http" in lines[1], lines
        (host, tcp), (_, http) = (line.rsplit(" ", 1)[1].strip().rsplit(":", 1) for line in lines)
        yield host, int(tcp), int(http)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def test_a_websocket_subscriber_hears_every_event_type(broker_ports: tuple[str, int, int]) -> None:
    host, port, http_port = broker_ports
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    environment = {"TRIOQ_HOST": host, "TRIOQ_PORT": str(port), "TRIOQ_HTTP_PORT": str(http_port)}
    result = subprocess.run(
        [str(BUN), "run", "events.ts"], cwd=HERE, env={**os.environ, **environment},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["subscribed"]["ok"] is True
    seen, queue = report["seen"], report["queue"]
    assert set(seen) == EVENTS
    assert seen["job:pushed"]["data"]["queue"] == queue
    assert seen["job:progress"]["data"]["progress"] == 50
    assert seen["job:priority-changed"]["data"]["newPriority"] == 3
    assert seen["job:delay-changed"]["data"]["newDelay"] == 30_000
    assert seen["dlq:added"]["data"]["reason"] == "explicit_fail"  # the discarded job, first
    assert seen["queue:cleaned"]["data"] == {"queue": queue, "state": "completed", "count": 1}
    assert seen["worker:connected"]["data"]["queues"] == [queue]  # the SDK Worker registers
    assert seen["cron:created"]["data"]["pattern"] == "0 3 * * *"
    assert seen["health:status"]["data"]["ok"] is True
    snapshot = seen["stats:snapshot"]["data"]
    assert snapshot["totalPushed"] >= 3 and snapshot["workers"]["total"] >= 0
    assert all(isinstance(entry["ts"], int | float) for entry in seen.values())
