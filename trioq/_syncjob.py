"""`SyncJob`: a Job's calls without `await`, for synchronous code (a sync handler's thread,
or the `trioq.sync` facade), each run on the event loop that owns the connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio.from_thread

from ._job import Job

DataT = TypeVar("DataT")
T = TypeVar("T")

Runner = Callable[..., Any]
"""Runs `fn(*args)` (an async function) on the loop and returns its result."""


def thread_runner(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """The runner of a thread started by the event loop (`anyio.to_thread`)."""

    async def call() -> T:
        return await fn(*args)

    return anyio.from_thread.run(call)


class SyncJob(Generic[DataT]):
    """A job, with blocking versions of Job's methods (same names, no `await`)."""

    def __init__(self, job: Job[DataT], runner: Runner = thread_runner) -> None:
        self.job = job
        self._run = runner

    def __repr__(self) -> str:
        return repr(self.job)

    def __getattr__(self, name: str) -> Any:
        # Plain attributes (id, name, state, attempts, ...) read through to the Job.
        return getattr(self.job, name)

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id

    @property
    def data(self) -> DataT:
        """The job's payload."""
        return self.job.data

    def wait(self, timeout: float | None = None, *, result_type: Any = Any) -> Any:
        """Block until the job finished; its result (raises JobFailed, Timeout)."""

        async def wait() -> Any:
            return await self.job.wait(timeout, result_type=result_type)

        return self._run(wait)

    def progress(self, value: float, message: str | None = None) -> None:
        """Report progress (0..100)."""
        self._run(self.job.progress, value, message)

    def log(self, message: str, level: str = "info") -> None:
        """Add a log line."""
        self._run(self.job.log, message, level)

    def extend_lock(self, duration: float) -> None:
        """Extend the lease by `duration` seconds."""
        self._run(self.job.extend_lock, duration)

    def refresh(self) -> SyncJob[DataT] | None:
        """The job as the broker holds it now (None if it is gone)."""
        latest = self._run(self.job.refresh)
        return None if latest is None else self

    def get_state(self) -> str:
        """The job's state now."""
        return self._run(self.job.get_state)  # type: ignore[no-any-return]

    def logs(self) -> list[dict[str, Any]]:
        """The job's log lines."""
        return self._run(self.job.logs)  # type: ignore[no-any-return]

    def children_values(self) -> dict[str, Any]:
        """A flow parent's children's results."""
        return self._run(self.job.children_values)  # type: ignore[no-any-return]

    def remove(self) -> None:
        """Remove a job that has not started."""
        self._run(self.job.remove)

    def retry(self) -> None:
        """Run a failed job again."""
        self._run(self.job.retry)

    def promote(self) -> None:
        """Run a delayed job now."""
        self._run(self.job.promote)
