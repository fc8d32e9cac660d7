"""What the HTTP port adds for the dashboard: its static files (package `broker.ui`), the
`/dashboard...` JSON built from the engine's Dashboard* commands, and `/heapstats` and `/gc`.

Static files are read once from the package and served from memory; only the names listed in
ASSETS exist, so a path can never reach the file system. `/heapstats` reports what is cheap to
know in Python (resident memory, allocated blocks, the collector's counters) and never walks
the heap; `/gc` runs one full collection, at most once per GC_MIN_INTERVAL_S.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from importlib import resources
from typing import Any

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
GC_MIN_INTERVAL_S = 10.0


class StaticFiles:
    """The dashboard's files, loaded from the `broker.ui` package on first use."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}

    def get(self, path: str) -> tuple[str, bytes] | None:
        """(content type, bytes) for `/`, `/ui`, `/ui/` or `/ui/<asset>`; None otherwise."""
        name = "index.html" if path in ("/", "/ui", "/ui/") else path.removeprefix("/ui/")
        if name not in ASSETS or (path not in ("/", "/ui", "/ui/") and not path.startswith("/ui/")):
            return None
        if name not in self._files:
            self._files[name] = resources.files("broker.ui").joinpath(name).read_bytes()
        return ASSETS[name], self._files[name]


def whole_number(text: str) -> int | None:
    """`text` as a whole number of at most 15 ASCII digits, else None. (`str.isdigit` alone
    accepts digits such as '²' that `int` refuses, and `int` refuses over 4,300 digits.)"""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    return None


def page_bounds(query: dict[str, list[str]]) -> tuple[int, int] | str:
    """(limit, offset) from `?limit=&offset=`, or the error text: limit is 1..500 (default 100),
    offset a whole number ≥ 0 (default 0)."""
    limit_text = (query.get("limit") or [str(DEFAULT_LIMIT)])[0]
    offset_text = (query.get("offset") or ["0"])[0]
    limit, offset = whole_number(limit_text), whole_number(offset_text)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        return f"limit must be a whole number from 1 to {MAX_LIMIT}"
    if offset is None:
        return "offset must be a whole number of at least 0"
    return limit, offset


def flag(query: dict[str, list[str]], name: str) -> bool:
    """Whether a query flag is on (`true` or `1`)."""
    return (query.get(name) or [""])[0].lower() in ("true", "1")


def rss_bytes() -> int:
    """This process's resident memory in bytes (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def heap_stats() -> dict[str, Any]:
    """Cheap memory facts: nothing here walks the objects of the heap."""
    return {
        "rssBytes": rss_bytes(),
        "allocatedBlocks": sys.getallocatedblocks(),
        "gc": {
            "enabled": gc.isenabled(),
            "pending": list(gc.get_count()),
            "thresholds": list(gc.get_threshold()),
            "frozen": gc.get_freeze_count(),
            "generations": gc.get_stats(),
        },
    }


class Collector:
    """Runs `gc.collect()` on request, at most once per GC_MIN_INTERVAL_S."""

    def __init__(self) -> None:
        self.last_run: float | None = None

    def collect(self, now: float) -> dict[str, Any] | None:
        """One full collection and what it freed; None when one ran too recently."""
        if self.last_run is not None and now - self.last_run < GC_MIN_INTERVAL_S:
            return None
        self.last_run = now
        rss_before = rss_bytes()
        started = time.perf_counter()
        collected = gc.collect()
        took_ms = (time.perf_counter() - started) * 1000
        return {
            "collected": collected,
            "durationMs": round(took_ms, 3),
            "rssBeforeBytes": rss_before,
            "rssAfterBytes": rss_bytes(),
        }
