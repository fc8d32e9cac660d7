"""The examples/trioq_*.py scripts run against a broker and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client_broker import Broker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, broker: Broker, *args: str) -> str:
    env = {**os.environ, "TRIOQ_URL": broker.url}
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("args", [(), ("--trio",)])
def test_quickstart(memory_broker: Broker, args: tuple[str, ...]) -> None:
    out = run_example("trioq_quickstart.py", memory_broker, *args)
    assert "result: {'sent': True, 'to': 'ada@example.com'}" in out
    assert "'active': 0" in out


def test_sync(memory_broker: Broker) -> None:
    out = run_example("trioq_sync.py", memory_broker)
    assert "results: [{'width': 320}, {'width': 512}, {'width': 1024}]" in out


def test_flow(memory_broker: Broker) -> None:
    out = run_example("trioq_flow.py", memory_broker)
    assert "report total: 30" in out
    assert "event: completed True" in out
