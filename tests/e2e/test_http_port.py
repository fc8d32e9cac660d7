"""The HTTP port of a real broker process: /ready, /metrics as Prometheus text, HEAD, and
stored data JSON cannot hold, read back after a restart."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
from msgspec.msgpack import Ext
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import BrokerFactory, FrameSocket, free_port, poll_until


def test_metrics_scraped_over_http_parse(broker_factory: BrokerFactory) -> None:
    port = free_port()
    broker = broker_factory("--http-port", str(port))
    base = f"http://127.0.0.1:{port}"
    wait_ready(port)
    with FrameSocket(broker.address) as client:
        assert client.call("PUSH", queue="scraped", name="n", data=1)["ok"] is True
    response = httpx.get(f"{base}/metrics", timeout=5)
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    depth = {
        (s.labels["queue"], s.labels["state"]): s.value for s in families["trioq_jobs"].samples
    }
    assert depth[("scraped", "waiting")] == 1


def raw_http(port: int, request: bytes) -> bytes:
    """Send raw bytes to the HTTP port; everything received until the broker closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def ready_status(port: int) -> bytes:
    """The status line of `GET /ready`, or b"" while the port does not answer."""
    try:
        answer = raw_http(port, b"GET /ready HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    except OSError:
        return b""
    return answer.partition(b"\r\n")[0]


def wait_ready(port: int) -> None:
    """Until the broker's HTTP port answers `/ready` with 200 (a real process: real time)."""
    status = poll_until(lambda: ready_status(port), lambda line: line.startswith(b"HTTP/1.1 200"))
    assert status.startswith(b"HTTP/1.1 200"), "the HTTP port never became ready"


def test_head_requests_leave_the_broker_running(broker_factory: BrokerFactory) -> None:
    port = free_port()
    broker = broker_factory("--http-port", str(port), "--auth-token", "t")
    wait_ready(port)
    heads = b"".join(
        f"HEAD {path} HTTP/1.1\r\nhost: t\r\n\r\n".encode()
        for path in ("/health", "/nope", "/stats")
    )
    reply = raw_http(port, heads + b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    statuses = [line for line in reply.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert statuses == [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 401 Unauthorized",
        b"HTTP/1.1 401 Unauthorized",
        b"HTTP/1.1 200 OK",
    ]
    assert reply.endswith(b"\r\n\r\nOK") and broker.alive()


def test_stored_data_json_cannot_hold_reads_back_after_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    odd = {None: 1, (1, 2): 2, "x": Ext(5, b"\x01")}
    port = free_port()
    broker = broker_factory("--http-port", str(port), data_dir=data_dir)
    with FrameSocket(broker.address) as client:
        job_id = client.call("PUSH", queue="odd", data=odd)["id"]
    broker.stop()
    broker = broker_factory("--http-port", str(port), data_dir=data_dir)
    wait_ready(port)
    for _ in range(2):  # the first read used to end the broker, and the job survived it
        reply = raw_http(
            port, f"GET /jobs/{job_id} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n".encode()
        )
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
        data = json.loads(reply.partition(b"\r\n\r\n")[2])["job"]["data"]
        assert data == {"null": 1, "[1,2]": 2, "x": {"$ext": 5, "data": "AQ=="}}
    assert broker.alive()
