"""For the trioq client's tests: a broker subprocess that restarts on its port, and a runner of
async test bodies under asyncio or Trio."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

START_TIMEOUT_S = 20.0
TEST_LIMIT_S = 40.0  # an async test body that takes longer fails (a hang is a failure)
Run = Callable[..., Any]


class Broker:
    """A trioq broker in a subprocess; `restart()` stops it and starts it again on its port
    (with its data directory, when it has one)."""

    def __init__(self, *args: str, data_dir: Path | None = None) -> None:
        self.args = list(args)
        self.data_dir = data_dir
        self.port = 0
        self.process: subprocess.Popen[str] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self) -> None:
        store = ["--data-dir", str(self.data_dir)] if self.data_dir else ["--memory"]
        command = [sys.executable, "-m", "broker", "serve", "--port", str(self.port),
                   "--http-port", "0", "--shutdown-grace-s", "1", *store, *self.args]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if "listening on tcp" not in line:
            process.kill()
            process.wait()
            pytest.fail(f"broker did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        self.process = process

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        self.process.wait(timeout=20)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def run_async(backend: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Run `fn(*args)` under `backend` in a thread of its own (the main thread may hold an
    event loop of an earlier test's: Playwright's sync API keeps one running for the session),
    failing it after TEST_LIMIT_S seconds."""

    async def limited() -> Any:
        with anyio.fail_after(TEST_LIMIT_S):
            return await fn(*args)

    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = anyio.run(limited, backend=backend)
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"client-test-{backend}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
