"""Browser tests: the dashboard driven in headless Chromium through Playwright.

Chromium is Debian's (`/usr/bin/chromium`, or $TRIOQ_CHROMIUM); Playwright only drives it
(`playwright install` is never needed). One browser serves the whole session; each test gets a
fresh context (its own sessionStorage) and a private broker subprocess. A missing browser fails
these tests with what to install: they are never skipped. Screenshots go to
test-artifacts/browser/ (gitignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker import BrokerFactory, free_port
from tests.support.browser import WAIT_MS, Dashboard, chromium_path


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
