"""`trioq worker module:attr` runs a worker from the shell and stops cleanly on SIGTERM."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from pathlib import Path

import trioq
from tests.support.client_broker import Broker, run_async

ROOT = Path(__file__).resolve().parents[2]


def start_worker(broker: Broker, target: str, queue: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "broker", "worker", target, "--url", broker.url,
               "--queue", queue, "--poll-timeout", "0.2"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    ready, _, _ = select.select([process.stderr], [], [], 20)
    line = process.stderr.readline() if ready else ""
    assert f"trioq worker: {queue} x" in line, line
    return process


def test_the_worker_command_works_a_queue_and_stops_on_sigterm(
    memory_broker: Broker, queue_name: str
) -> None:
    process = start_worker(memory_broker, "tests.client.cli_handlers:settings", queue_name)

    async def main() -> None:
        async with trioq.connect(memory_broker.url) as client:
            queue = client.queue(queue_name)
            jobs = [await queue.add("x", n) for n in range(5)]
            assert [await job.wait(timeout=10) for job in jobs] == [0, 2, 4, 6, 8]
            async with client.events(queue_name) as events:
                slow = await queue.add("x", "slow")
                async for event in events:
                    if event.type == "pulled" and event.job_id == slow.id:
                        break
            process.send_signal(signal.SIGTERM)  # the job in hand is finished first
            assert await slow.wait(timeout=10) == -1
            counts = await queue.counts()
            assert (counts["active"], counts["waiting"], counts["completed"]) == (0, 0, 6)

    try:
        run_async("trio", main)
        assert process.wait(timeout=20) == 0
        assert process.stderr is not None
        assert "stopped (6 done, 0 failed)" in process.stderr.read()
    finally:
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def test_the_worker_command_says_what_is_wrong() -> None:
    handler = "tests.client.cli_handlers:double"
    result = subprocess.run([sys.executable, "-m", "broker", "worker", handler],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 2
    assert "which queue? give --queue" in result.stderr
    result = subprocess.run([sys.executable, "-m", "broker", "worker", "no_such_module:x"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 2 and "No module named 'no_such_module'" in result.stderr
