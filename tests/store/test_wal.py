"""The SQLite store's write-ahead log: checkpointed by the store itself (after a flush from
another thread), so it stays bounded, and every committed row is in the database after it."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

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


class StepSync:
    """A sync function the test lets through one call at a time, noting the descriptors."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self._entered = threading.Semaphore(0)
        self._go = threading.Semaphore(0)

    def __call__(self, descriptor: int) -> None:
        self.calls.append(descriptor)
        self._entered.release()
        assert self._go.acquire(timeout=10)

    def wait_entered(self) -> None:
        """Wait until a flush started (it then waits for `let_go`)."""
        assert self._entered.acquire(timeout=10), "no flush started"

    def let_go(self, calls: int = 1) -> None:
        for _ in range(calls):
            self._go.release()


def descriptors_of(path: Path) -> list[int]:
    """This process's open descriptors of the file at `path`."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                found.append(int(name))
        except OSError:  # the descriptor listing itself, closed since
            pass
    return found


@pytest.fixture
def wal(tmp_path: Path) -> Path:
    log = tmp_path / "trioq.db-wal"
    log.write_bytes(b"frames")
    return log


def test_the_flusher_keeps_one_descriptor_of_the_log_until_closed(wal: Path) -> None:
    sync = StepSync()
    flusher = WalFlusher(str(wal), sync=sync)
    try:
        flusher.request(10)
        sync.wait_entered()
        sync.let_go()
        flusher.request(20)
        sync.wait_entered()
        assert descriptors_of(wal) == [sync.calls[0]] == [sync.calls[1]]  # opened once
        sync.let_go()
    finally:
        sync.let_go(5)
        flusher.close()
    assert flusher.flushed == 20
    assert descriptors_of(wal) == []


def test_the_flushing_thread_is_named_and_does_not_keep_the_process_alive(wal: Path) -> None:
    before = set(threading.enumerate())
    sync = StepSync()
    flusher = WalFlusher(str(wal), sync=sync)
    try:
        flusher.request(10)
        sync.wait_entered()  # a flush stuck in the kernel must not block the broker's exit
        started = [t for t in set(threading.enumerate()) - before if t.name == "wal-flush"]
        assert [thread.daemon for thread in started] == [True]
    finally:
        sync.let_go(5)
        flusher.close()


def test_a_failed_flush_is_logged_for_the_operator_and_not_counted(
    wal: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failed = threading.Event()

    def failing_sync(descriptor: int) -> None:
        failed.set()
        raise OSError(errno.EIO, "disk gone")

    flusher = WalFlusher(str(wal), sync=failing_sync)
    with caplog.at_level(logging.DEBUG, logger="store.walflush"):
        flusher.request(10)
        assert failed.wait(10)
        flusher.close()  # after the failed flush returned
    assert flusher.flushed == 0  # the checkpoint flushes the log itself
    assert f"flushing {wal} ahead of a checkpoint failed: [Errno 5] disk gone" in [
        record.getMessage() for record in caplog.records
    ]


def test_a_restart_drops_the_flush_asked_for_the_old_log(wal: Path) -> None:
    sync = StepSync()
    flusher = WalFlusher(str(wal), sync=sync)
    try:
        flusher.restarted()  # a checkpoint before the first flush
        flusher.request(100)
        sync.wait_entered()
        flusher.request(150)  # asked while the flush of 100 runs
        flusher.restarted()  # checkpointed again: neither counts for the new log
        sync.let_go()
        flusher.request(30)
        sync.wait_entered()
        sync.let_go()
    finally:
        sync.let_go(5)
        flusher.close()
    assert flusher.flushed == 30
    assert len(sync.calls) == 2  # the flush of 150 was never run
    flusher.restarted()
    assert flusher.flushed == 0


def test_closing_waits_for_the_flush_under_way_but_starts_no_other(wal: Path) -> None:
    sync = StepSync()
    flusher = WalFlusher(str(wal), sync=sync)
    flusher.request(100)
    sync.wait_entered()
    flusher.request(200)  # asked for while the flush of 100 runs
    closing = threading.Thread(target=flusher.close)
    closing.start()
    deadline = time.monotonic() + 10
    while not flusher._stopping and time.monotonic() < deadline:  # close() asked it to stop
        time.sleep(0.001)
    sync.let_go(5)
    closing.join(10)
    assert not closing.is_alive()
    assert (flusher.flushed, len(sync.calls)) == (100, 1)


def log_frames(path: str) -> int:
    """The most pages the store's log has held (a checkpointed log is reused, not shrunk)."""
    return (os.path.getsize(path + "-wal") - 32) // PAGE_FRAME


def commit_pass(store: SqliteStore, one: JobRow) -> None:
    """One engine pass's commit of one row, then the store's upkeep as the actor runs it once
    the pass's replies are out (the checkpoint, when due)."""
    store.commit([one], [], sync=False)
    store.tidy()


def commit_until(store: SqliteStore, path: str, frames: int) -> None:
    """Commit one job over and over (one page each time) until the log holds `frames` pages."""
    while log_frames(path) < frames:
        commit_pass(store, row("same"))
    assert log_frames(path) == frames


def wait_until(condition: Callable[[], bool]) -> None:
    """Wait for another thread to make `condition` true (at most 10 s)."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_the_log_is_flushed_every_few_pages_and_checkpointed_once_flushed(tmp_path: Path) -> None:
    path = str(tmp_path / "trioq.db")
    sync = StepSync()
    store = SqliteStore(path, checkpoint_frames=35, flush_every=10, wal_sync=sync)
    try:
        for frames in (10, 20, 30, 35):  # every 10 pages, and at the checkpoint's size
            commit_until(store, path, frames)
            sync.wait_entered()
            assert os.readlink(f"/proc/self/fd/{sync.calls[-1]}") == path + "-wal"
            sync.let_go()
        wait_until(lambda: store._flusher.flushed == 35)
        store.tidy()  # a pass that wrote nothing (a Ping): the log is due and flushed
        for _ in range(10):  # the log starts over: a flush of its first 10 pages
            commit_pass(store, row("same"))
        sync.wait_entered()
        sync.let_go()
        assert log_frames(path) == 35  # checkpointed at its size, never grew past it
    finally:
        sync.let_go(10)
        store.close()
    assert len(sync.calls) == 5


def test_after_the_flush_at_the_checkpoint_size_the_next_is_a_full_step_later(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "trioq.db")
    sync = StepSync()
    store = SqliteStore(path, checkpoint_frames=35, flush_every=10, wal_sync=sync)
    try:
        for frames in (10, 20, 30):
            commit_until(store, path, frames)
            sync.wait_entered()
            sync.let_go()
        commit_until(store, path, 35)
        sync.wait_entered()  # the flush at the checkpoint's size, held in the kernel
        commit_until(store, path, 45)  # not checkpointed: that flush has not finished
        sync.let_go()
        sync.wait_entered()  # the next flush asked for: at 35 + 10 pages, not at 36
        sync.let_go()
        wait_until(lambda: store._flusher.flushed == 45)
    finally:
        sync.let_go(10)
        store.close()
    assert len(sync.calls) == 5


def test_a_log_the_flusher_cannot_flush_is_checkpointed_at_twice_the_size(tmp_path: Path) -> None:
    path = str(tmp_path / "trioq.db")
    sync = StepSync()
    store = SqliteStore(path, checkpoint_frames=20, flush_every=1000, wal_sync=sync)
    try:
        commit_until(store, path, 20)
        sync.wait_entered()  # and stuck in the kernel
        commit_until(store, path, 40)  # checkpointed by the commit that reached 40 pages
        for _ in range(5):
            commit_pass(store, row("same"))
        assert log_frames(path) == 40
    finally:
        sync.let_go(5)
        store.close()
    assert len(sync.calls) == 1


class FaultyFile(apsw.VFSFile):
    """A file of FaultyDisk: writes to a database file fail while the disk is failing."""

    def __init__(self, disk: FaultyDisk, name: apsw.URIFilename | str | None, flags: list[int]):
        self.disk = disk
        self.database = bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        super().__init__(disk.base, name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self.database and self.disk.failing:
            raise apsw.IOError("disk write failed")
        super().xWrite(data, offset)


class FaultyDisk(apsw.VFS):
    """SQLite's default file system, made the default, failing writes to database files (not
    to their logs) while `failing` is set."""

    def __init__(self) -> None:
        self.base = apsw.vfs_names()[0]
        self.failing = False
        super().__init__("faulty-disk", base=self.base, makedefault=True)

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> FaultyFile:
        return FaultyFile(self, name, flags)


@pytest.fixture
def faulty_disk() -> Iterator[FaultyDisk]:
    disk = FaultyDisk()
    yield disk
    disk.unregister()


def test_a_failed_checkpoint_is_logged_and_tried_again_next_pass(
    tmp_path: Path, faulty_disk: FaultyDisk, caplog: pytest.LogCaptureFixture
) -> None:
    def failing_sync(descriptor: int) -> None:
        raise OSError(errno.EIO, "no flush")  # so the checkpoint waits for 2 x 10 pages

    path = str(tmp_path / "trioq.db")
    store = SqliteStore(path, checkpoint_frames=10, flush_every=1000, wal_sync=failing_sync)
    bodies = (b"%d" % n for n in range(1000))
    try:
        faulty_disk.failing = True
        with caplog.at_level(logging.WARNING, logger="store.sqlite"):
            while log_frames(path) < 21:  # the commits themselves succeed: the log has them
                commit_pass(store, row("same")._replace(body=next(bodies)))
        assert [record.getMessage() for record in caplog.records] == [
            f"checkpoint of {path} failed (tried again next pass): disk write failed"
        ] * 2  # at 20 pages and again at 21
        faulty_disk.failing = False
        for _ in range(6):  # the first one checkpoints; the log starts over
            last = next(bodies)
            commit_pass(store, row("same")._replace(body=last))
        assert log_frames(path) == 22
    finally:
        faulty_disk.failing = False
        store.close()
    reopened = SqliteStore(path)
    try:
        assert [r.body for r in reopened.load()] == [last]
    finally:
        reopened.close()



class ParkedCondition(threading.Condition):
    """The flusher's condition, telling the test when its thread waits for work."""

    def __init__(self) -> None:
        super().__init__()
        self.parked = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.parked.set()
        return super().wait(timeout)


def test_the_flusher_goes_on_flushing_after_a_restart_during_a_flush(wal: Path) -> None:
    sync = StepSync()
    flusher = WalFlusher(str(wal), sync=sync)
    flusher._wake = condition = ParkedCondition()
    try:
        flusher.request(300)
        sync.wait_entered()
        flusher.restarted()  # checkpointed while the flush runs: the request is moot
        sync.let_go()
        assert condition.parked.wait(10), "the flusher stopped after the restart"
        flusher.request(40)  # of the new log: still flushed
        sync.wait_entered()
        sync.let_go()
    finally:
        sync.let_go(5)
        flusher.close()
    assert flusher.flushed == 40
