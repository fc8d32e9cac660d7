"""Browser tests: the dashboard driven in headless Chromium through Playwright.

Chromium is Debian's (`/usr/bin/chromium`, or $TRIOQ_CHROMIUM); Playwright only drives it
(`playwright install` is never needed). One browser serves the whole session; each test gets a
fresh context (its own sessionStorage) and a private broker subprocess. A missing browser fails
these tests with what to install: they are never skipped. Screenshots go to
test-artifacts/browser/ (gitignored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, BrokerFactory, BrokerProcess, broker_factory
from tests.e2e.test_http_port import free_port

__all__ = ["broker_factory"]

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


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole session."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox"]
        )
        yield launched
        launched.close()


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


@pytest.fixture
def dashboard_factory(browser: Any, broker_factory: BrokerFactory) -> Iterator[Any]:
    """Start a broker (extra CLI args) and open a fresh browser context on its dashboard."""
    contexts: list[Any] = []

    def start(*args: str) -> Dashboard:
        port = free_port()
        process = broker_factory("--http-port", str(port), *args)
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        contexts.append(context)
        return Dashboard(process, port, context.new_page())

    yield start
    for context in contexts:
        context.close()
