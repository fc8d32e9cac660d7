"""The README's command for a screenshot of the dashboard works as written (as root too) and
catches the loaded page, not `Loading…`."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.support.broker import ROOT, BrokerFactory, FrameSocket, free_port
from tests.support.browser import chromium_path

RUN_TIMEOUT_S = 120


def readme_screenshot_command() -> list[str]:
    """The `chromium ... --screenshot=...` command of the README, as argv."""
    readme = (ROOT / "README.md").read_text()
    [command] = re.findall(r"^    (chromium --headless .*?)\n\n", readme, re.MULTILINE | re.DOTALL)
    return shlex.split(command.replace("\\\n", " "))


def test_the_readmes_screenshot_command_shows_the_loaded_dashboard(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    command = readme_screenshot_command()
    assert "--no-sandbox" in command and any(a.startswith("--virtual-time-budget") for a in command)
    http_port = free_port()
    broker = broker_factory("--http-port", str(http_port))
    with FrameSocket(broker.address) as client:
        client.call("PUSH", queue="screenshot-queue", name="n", data=1)
    command = [a.replace("6790", str(http_port)) for a in command]
    command[0] = chromium_path()
    shot = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=RUN_TIMEOUT_S)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert (tmp_path / "dashboard.png").read_bytes().startswith(b"\x89PNG\r\n")
    # The same options, with the page's text instead of its picture: loaded, with the data.
    dump = [a for a in command if not a.startswith("--screenshot")] + ["--dump-dom"]
    dom = subprocess.run(dump, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "screenshot-queue" in dom.stdout and "Loading…" not in dom.stdout
