"""WalFlusher: flushes an SQLite write-ahead log to disk from a thread of its own.

A checkpoint (copying the log into the database file) first flushes the log, then the database
file. That first flush is most of its cost: measured, 85-105 ms of a 115-160 ms checkpoint of a
~40 MiB log, all of it on the event loop. The log's pages are already in the kernel, though,
so any thread may ask the kernel to write them out beforehand; the checkpoint's own flush then
finds them clean (11 ms checkpoints in the same measurement). The flusher only ever flushes:
it writes nothing, so it cannot weaken what a commit promises.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class WalFlusher:
    """Flushes the file at `path` (a write-ahead log) when asked, in a daemon thread.

    `request(frames)` asks for a flush of the log as it is now, `frames` long; `flushed` is the
    length the last finished flush covered (0 until one finished). The thread starts at the
    first request, so a store that never writes much never starts one.
    """

    def __init__(self, path: str, sync: Callable[[int], None] = os.fdatasync) -> None:
        self.path = path
        self.flushed = 0
        self._sync = sync
        # Each restart of the log starts a new generation: a flush that began before it was
        # of the old log and must not count for the new one.
        self._generation = 0
        self._wanted: tuple[int, int] | None = None  # (generation, frames) to flush
        self._stopping = False
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def request(self, frames: int) -> None:
        """Flush the log (now `frames` long) soon; returns at once."""
        with self._wake:
            self._wanted = (self._generation, frames)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wal-flush", daemon=True)
                self._thread.start()
            self._wake.notify()

    def restarted(self) -> None:
        """The log was checkpointed and starts over: what was flushed of it no longer counts."""
        with self._wake:
            self._generation += 1
            self._wanted = None
            self.flushed = 0

    def close(self) -> None:
        """Stop the thread (after the flush under way, if any)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        descriptor: int | None = None
        try:
            while True:
                with self._wake:
                    while self._wanted is None and not self._stopping:
                        self._wake.wait()
                    if self._stopping or self._wanted is None:
                        return
                    (generation, frames), self._wanted = self._wanted, None
                descriptor, done = self._flush(descriptor)
                with self._wake:
                    if done and generation == self._generation and frames > self.flushed:
                        self.flushed = frames
        finally:
            if descriptor is not None:
                os.close(descriptor)

    def _flush(self, descriptor: int | None) -> tuple[int | None, bool]:
        """One flush: the descriptor to keep, and whether it flushed. A failure is logged and
        left to the checkpoint, whose own flush reports it to the writer."""
        try:
            if descriptor is None:
                descriptor = os.open(self.path, os.O_RDONLY)
            self._sync(descriptor)
        except OSError as exc:
            log.debug("flushing %s ahead of a checkpoint failed: %s", self.path, exc)
            return descriptor, False
        return descriptor, True
