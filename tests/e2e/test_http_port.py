"""The HTTP port of a real broker process: /ready, and /metrics as Prometheus text."""

from __future__ import annotations

import socket
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import BrokerFactory, FrameSocket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_metrics_scraped_over_http_parse(broker_factory: BrokerFactory) -> None:
    port = free_port()
    broker = broker_factory("--http-port", str(port))
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=5) as http:
        deadline = time.monotonic() + 10
        while True:
            try:
                if http.get(f"{base}/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the HTTP port never became ready"
            time.sleep(0.05)
        with FrameSocket(broker.address) as client:
            assert client.call("PUSH", queue="scraped", name="n", data=1)["ok"] is True
        response = http.get(f"{base}/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    depth = {
        (s.labels["queue"], s.labels["state"]): s.value for s in families["trioq_jobs"].samples
    }
    assert depth[("scraped", "waiting")] == 1
