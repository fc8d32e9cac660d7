"""`durable: true` jobs reach stable storage before their reply: the SQLite store flushes (fsyncs)
the write-ahead log during a `sync` commit, and only then.

The test watches the disk through an apsw VFS that notes every file flush SQLite asks for, so
it checks what the guarantee is about (the flush), not how the store asks for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
import trio

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from store import JobRow, open_sqlite
from tests.support.app import EPOCH_MS, memory_connector
from tests.support.engine import push


class FlushRecordingFile(apsw.VFSFile):
    """A file of the real VFS whose flushes are noted (by file name)."""

    def __init__(self, base: str, name: str | apsw.URIFilename, flags: list[int], flushes) -> None:
        super().__init__(base, name, flags)
        self.path = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self.flushes = flushes

    def xSync(self, flags: int) -> None:
        """Note the flush, then do it."""
        self.flushes.append(self.path)
        super().xSync(flags)


class FlushRecordingVFS(apsw.VFS):
    """The default VFS while registered: every file it opens notes its flushes in `flushes`."""

    def __init__(self) -> None:
        self.base = apsw.vfs_names()[0]  # the platform's real VFS
        self.flushes: list[str] = []
        super().__init__("flush-recording", self.base, makedefault=True)

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        """Open through the real VFS, recording flushes."""
        return FlushRecordingFile(self.base, name or "", flags, self.flushes)

    def wal_flushes(self) -> int:
        """How many flushes of a write-ahead log were asked for."""
        return sum(path.endswith("-wal") for path in self.flushes)


@pytest.fixture
def disk() -> Iterator[FlushRecordingVFS]:
    vfs = FlushRecordingVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()


def row(job_id: str) -> JobRow:
    return JobRow(job_id, "q", "waiting", b"body")


def test_a_sync_commit_flushes_the_log_and_a_plain_one_does_not(
    tmp_path: Path, disk: FlushRecordingVFS
) -> None:
    store = open_sqlite(str(tmp_path / "trioq.db"))
    try:
        disk.flushes.clear()
        store.commit([row("plain")], [], sync=False)
        assert disk.wal_flushes() == 0  # survives a crash of the process, not power loss
        store.commit([row("durable")], [], sync=True)
        assert disk.wal_flushes() == 1
        store.commit([row("plain-again")], [], sync=False)
        assert disk.wal_flushes() == 1  # back to the fast mode after the durable commit
    finally:
        store.close()


async def test_a_durable_push_is_flushed_before_its_reply(
    tmp_path: Path, disk: FlushRecordingVFS
) -> None:
    store = open_sqlite(str(tmp_path / "trioq.db"))
    try:
        async with trio.open_nursery() as nursery:
            app = App(Config(port=0, http_port=0), store=store, clock=Clock(EPOCH_MS))
            await nursery.start(app.run)
            client = await memory_connector(app, nursery)()
            disk.flushes.clear()
            await push(client)
            assert disk.wal_flushes() == 0
            await push(client, durable=True)
            assert disk.wal_flushes() == 1  # already on stable storage when the reply came
            app.shutdown()
    finally:
        store.close()
