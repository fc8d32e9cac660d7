"""The SQLite store's write-ahead log: checkpointed by the store itself (after a flush from
another thread), so it stays bounded, and every committed row is in the database after it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from store import JobRow
from store.sqlite import SqliteStore
from store.walflush import WalFlusher

PAGE_FRAME = 4096 + 24  # a WAL frame: one page and its header


def row(job_id: str) -> JobRow:
    return JobRow(job_id, "q", "waiting", b"x" * 200)


def test_the_log_is_checkpointed_and_starts_over_instead_of_growing(tmp_path: Path) -> None:
    path = str(tmp_path / "trioq.db")
    store = SqliteStore(path, checkpoint_frames=40, flush_every=10)
    try:
        for n in range(2000):  # every commit writes at least one frame
            store.commit([row(f"job-{n:05}")], [], sync=False)
            store.tidy()  # as the actor does after each pass's replies
        # Checkpointed at the latest when the log is twice the checkpoint size (the flusher
        # may lag behind), then reused from its start.
        assert os.path.getsize(path + "-wal") <= (2 * 40 + 10) * PAGE_FRAME
    finally:
        store.close()
    reopened = SqliteStore(path)
    try:
        assert sorted(r.id for r in reopened.load()) == [f"job-{n:05}" for n in range(2000)]
    finally:
        reopened.close()


def test_a_store_that_writes_little_starts_no_flushing_thread(tmp_path: Path) -> None:
    before = {thread.name for thread in threading.enumerate()}
    store = SqliteStore(str(tmp_path / "trioq.db"))
    store.commit([row("a")], [], sync=False)
    assert "wal-flush" not in {t.name for t in threading.enumerate()} - before
    store.close()


class GatedSync:
    """A sync function that blocks until let go, noting the descriptors it was given."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, descriptor: int) -> None:
        self.calls.append(descriptor)
        self.entered.set()
        assert self.release.wait(10)


def test_the_flusher_reports_what_it_flushed(tmp_path: Path) -> None:
    log = tmp_path / "trioq.db-wal"
    log.write_bytes(b"frames")
    sync = GatedSync()
    flusher = WalFlusher(str(log), sync=sync)
    try:
        flusher.request(120)
        assert sync.entered.wait(10)
        assert flusher.flushed == 0  # not before the flush returned
        sync.release.set()
        flusher.close()  # waits for the flush under way
        assert flusher.flushed == 120
        assert len(sync.calls) == 1
    finally:
        sync.release.set()
        flusher.close()


def test_a_flush_of_the_log_before_a_restart_does_not_count_after_it(tmp_path: Path) -> None:
    log = tmp_path / "trioq.db-wal"
    log.write_bytes(b"frames")
    sync = GatedSync()
    flusher = WalFlusher(str(log), sync=sync)
    try:
        flusher.request(300)
        assert sync.entered.wait(10)
        flusher.restarted()  # checkpointed while the flush ran: the log starts over
        sync.release.set()
        flusher.close()
        assert flusher.flushed == 0
    finally:
        sync.release.set()
        flusher.close()


def test_a_missing_log_is_not_an_error_for_the_flusher(tmp_path: Path) -> None:
    flusher = WalFlusher(str(tmp_path / "absent-wal"))
    flusher.request(10)
    flusher.close()
    assert flusher.flushed == 0  # not flushed: the store checkpoints later, flushing itself
