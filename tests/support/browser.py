"""The dashboard in headless Chromium: where Chromium is, and a page of the dashboard on a
broker."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker import ROOT, BrokerProcess

ARTIFACTS = ROOT / "test-artifacts" / "browser"

# Waits in the page: a loaded 2-core machine can take seconds to run a step.
WAIT_MS = 15_000


def chromium_path() -> str:
    """The Chromium executable, or a test failure naming what to install."""
    path = os.environ.get("TRIOQ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            "the browser tests need Chromium: apt-get install chromium chromium-driver "
            "(make test does it as root), or set TRIOQ_CHROMIUM to a Chromium executable"
        )
    return path


class Dashboard:
    """A broker subprocess with its HTTP port, and a page of the dashboard on it."""

    def __init__(self, process: BrokerProcess, http_port: int, page: Any) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{http_port}/"
        self.page = page
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.set_default_timeout(WAIT_MS)

    def open(self, fragment: str = "") -> Any:
        """Load the dashboard (at `#/...` when given) and return the page."""
        self.page.goto(self.url + fragment)
        return self.page

    def screenshot(self, name: str) -> Path:
        """Save a full-page screenshot as test-artifacts/browser/<name>.png."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path
