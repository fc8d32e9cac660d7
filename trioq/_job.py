"""`Job`: one job as the client knows it, with the calls that act on it."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, overload

import msgspec

from ._errors import JobFailed, ServerError, Timeout
from ._requester import Requester
from ._wire import JobReply, WireJob, command, decode_typed, decode_value

DataT = TypeVar("DataT")
ResultT = TypeVar("ResultT")

_UNSET: Any = object()
WAIT_SLICE_MS = 30_000  # one WaitJob asks the broker to wait at most this long
WAIT_JOB = command("WaitJob")
GET_JOB = command("GetJob")
GET_STATE = command("GetState")
GET_RESULT = command("GetResult")
PROGRESS = command("Progress")
ADD_LOG = command("AddLog")
GET_LOGS = command("GetLogs")
CANCEL = command("Cancel")
PROMOTE = command("Promote")
CHANGE_DELAY = command("ChangeDelay")
CHANGE_PRIORITY = command("ChangePriority")
UPDATE = command("Update")
DISCARD = command("Discard")
RETRY_DLQ = command("RetryDlq")
MOVE_TO_WAIT = command("MoveToWait")
MOVE_TO_DELAYED = command("MoveToDelayed")
EXTEND_LOCK = command("ExtendLock")
GET_CHILDREN_VALUES = command("GetChildrenValues")


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000.0


class Job(Generic[DataT]):
    """A job: its id, name, queue and data, and what the broker last said about it.

    A job returned by `add()` knows only what was sent (`state` is None); one read from the
    broker (`client.get_job`, `job.refresh()`, a worker's job) carries its state, attempts,
    times and result. Times are Unix epoch seconds (floats), as `time.time()`.
    """

    # What the broker last said, as class-level defaults: a job made by `add()` sets only
    # its own few attributes (an add is on the hot path).
    state: str | None = None
    attempts: int = 0
    max_attempts: int | None = None
    priority: float = 0
    percent: float = 0
    """Progress, 0..100 (`progress()` reports it)."""
    progress_message: str | None = None
    created_at: float | None = None
    started_at: float | None = None
    completed_at: float | None = None
    failed_reason: str | None = None
    stacktrace: list[str] | None = None
    tags: Sequence[str] = ()
    parent_id: str | None = None
    children_ids: Sequence[str] = ()
    depends_on: Sequence[str] = ()
    group_id: str | None = None
    custom_id: str | None = None
    token: str | None = None
    """The lease token, on a job a worker holds."""
    _raw_data: bytes | msgspec.Raw | None = None
    _raw_result: bytes | msgspec.Raw | None = None
    _result: Any = _UNSET

    def __init__(
        self,
        requester: Requester,
        id: str,
        queue: str,
        name: str,
        data: Any = _UNSET,
        *,
        data_type: Any = Any,
    ) -> None:
        self._requester = requester
        self.id = id
        self.queue = queue
        self.name = name
        self._data = data
        self._type = data_type

    @classmethod
    def from_wire(
        cls, requester: Requester, wire: WireJob, data_type: Any = Any, token: str | None = None
    ) -> Job[Any]:
        """A Job from the broker's job map (its data decoded when first read)."""
        job: Job[Any] = cls(requester, wire.id, wire.queue or "", wire.name or "default")
        job._type = data_type
        job._raw_data = wire.data
        job._raw_result = wire.returnvalue
        job.token = token or None
        job.state = wire.state
        job.attempts = int(wire.attempts or 0)
        job.max_attempts = None if wire.maxAttempts is None else int(wire.maxAttempts)
        job.priority = wire.priority or 0
        job.percent = wire.progress or 0
        job.progress_message = wire.progressMessage
        job.created_at = _seconds(wire.createdAt)
        job.started_at = _seconds(wire.startedAt)
        job.completed_at = _seconds(wire.completedAt)
        job.failed_reason = wire.failedReason
        job.stacktrace = wire.stacktrace
        job.tags = list(wire.tags or ())
        job.parent_id = wire.parentId
        job.children_ids = list(wire.childrenIds or ())
        job.depends_on = list(wire.dependsOn or ())
        job.group_id = wire.groupId
        job.custom_id = wire.customId
        return job

    def __repr__(self) -> str:
        state = f" state={self.state}" if self.state else ""
        return f"<Job {self.id} {self.queue}/{self.name}{state}>"

    @property
    def data(self) -> DataT:
        """The payload (decoded as the queue's or worker's data type, when one was given)."""
        if self._data is _UNSET:
            self._data = decode_value(self._raw_data, self._type) if self._raw_data else None
        return self._data  # type: ignore[no-any-return]

    @property
    def result(self) -> Any:
        """The result the job completed with, as last read from the broker (None if none)."""
        if self._result is _UNSET:
            self._result = decode_value(self._raw_result) if self._raw_result else None
        return self._result

    # -- waiting and reading ---------------------------------------------------------------

    @overload
    async def wait(self, timeout: float | None = None) -> Any: ...
    @overload
    async def wait(
        self, timeout: float | None = None, *, result_type: type[ResultT]
    ) -> ResultT: ...
    async def wait(self, timeout: float | None = None, *, result_type: Any = Any) -> Any:
        """Wait for the job to finish and return its result (decoded as `result_type`).

        Raises JobFailed if it failed for good or was removed, trioq.Timeout after `timeout`
        seconds (None: wait for ever).
        """
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            slice_ms = max(0, min(WAIT_SLICE_MS, left_ms))
            reply = await self._requester.ask(
                WAIT_JOB,
                {"id": self.id, "timeout": int(slice_ms)},
                timeout=slice_ms / 1000 + self._requester.timeout,
                idempotent=True,
            )
            if reply.get("completed"):
                result = reply.get("result")
                self.state = "completed"
                return result if result_type is Any else msgspec.convert(result, result_type)
            state = reply.get("state")
            if state in ("failed", "unknown"):
                reason = None
                if state == "failed":
                    latest = await self.refresh()
                    reason = latest.failed_reason if latest is not None else None
                self.state = state
                raise JobFailed(self.id, state, reason)
            if time.monotonic() >= deadline:
                raise Timeout(f"job {self.id} did not finish within {timeout}s")

    async def refresh(self) -> Job[DataT] | None:
        """The job as the broker holds it now (None if it is gone); this object is updated
        too."""
        latest = await get_job(self._requester, self.id, self._type)
        if latest is None:
            return None
        for name, value in vars(latest).items():
            if name not in ("_requester", "token"):
                setattr(self, name, value)
        return self

    async def get_state(self) -> str:
        """The job's state now: waiting, prioritized, delayed, active, completed, failed,
        waiting-children, or unknown."""
        reply = await self._requester.ask(GET_STATE, {"id": self.id}, idempotent=True)
        self.state = str(reply.get("state"))
        return self.state

    async def get_result(self) -> Any:
        """The stored result of a completed job (None when none is held)."""
        reply = await self._requester.ask(GET_RESULT, {"id": self.id}, idempotent=True)
        return reply.get("result")

    async def logs(self, start: int | None = None, end: int | None = None) -> list[dict[str, Any]]:
        """The job's log lines `{timestamp, level, message}`, oldest first."""
        fields: dict[str, Any] = {"id": self.id}
        if start is not None:
            fields["start"] = start
        if end is not None:
            fields["end"] = end
        reply = await self._requester.ask(GET_LOGS, fields, idempotent=True)
        return list((reply.get("data") or {}).get("logs") or [])

    async def children_values(self) -> dict[str, Any]:
        """A flow parent's completed children's results, keyed `<queue>:<childId>`."""
        reply = await self._requester.ask(GET_CHILDREN_VALUES, {"id": self.id}, idempotent=True)
        data = reply.get("data")
        values = data.get("values") if isinstance(data, dict) else reply.get("values")
        return dict(values or {})

    # -- inside a handler ------------------------------------------------------------------

    async def progress(self, value: float, message: str | None = None) -> None:
        """Report progress (0..100) of an active job; it also counts as a heartbeat."""
        fields: dict[str, Any] = {"id": self.id, "progress": value}
        if message is not None:
            fields["message"] = message
        await self._requester.ask(PROGRESS, fields)
        self.percent = max(0.0, min(100.0, float(value)))
        self.progress_message = message

    async def log(self, message: str, level: str = "info") -> None:
        """Add a line to the job's log (`info`, `warn` or `error`)."""
        await self._requester.ask(ADD_LOG, {"id": self.id, "message": message, "level": level})

    async def extend_lock(self, duration: float) -> None:
        """Extend this worker's lease on the job by `duration` seconds from now."""
        fields: dict[str, Any] = {"id": self.id, "duration": int(duration * 1000)}
        if self.token:
            fields["token"] = self.token
        await self._requester.ask(EXTEND_LOCK, fields)

    async def move_to_delayed(self, delay_ms: float) -> None:
        """Put an active job back, to run again after `delay_ms` (the handler's return value
        is then ignored: the job is no longer this worker's)."""
        await self._requester.ask(MOVE_TO_DELAYED, {"id": self.id, "delay": delay_ms})

    # -- managing --------------------------------------------------------------------------

    async def remove(self) -> None:
        """Remove a job that has not started (waiting, prioritized or delayed)."""
        await self._requester.ask(CANCEL, {"id": self.id})

    async def retry(self) -> None:
        """Run a failed job again (from the dead-letter queue), with a fresh attempt budget."""
        await self._requester.ask(RETRY_DLQ, {"queue": self.queue, "jobId": self.id})

    async def promote(self) -> None:
        """Run a delayed job now."""
        await self._requester.ask(PROMOTE, {"id": self.id})

    async def change_delay(self, delay_ms: float) -> None:
        """Run the job `delay_ms` from now instead."""
        await self._requester.ask(CHANGE_DELAY, {"id": self.id, "delay": delay_ms})

    async def change_priority(self, priority: float, *, lifo: bool = False) -> None:
        """Change a waiting job's priority."""
        fields: dict[str, Any] = {"id": self.id, "priority": priority}
        if lifo:
            fields["lifo"] = True
        await self._requester.ask(CHANGE_PRIORITY, fields)

    async def update_data(self, data: DataT) -> None:
        """Replace the job's payload."""
        await self._requester.ask(UPDATE, {"id": self.id, "data": data})
        self._data = data

    async def discard(self) -> None:
        """Fail the job for good now (it goes to the dead-letter queue)."""
        await self._requester.ask(DISCARD, {"id": self.id})


def is_missing(error: ServerError) -> bool:
    """Whether a ServerError says the job is not (or no longer) there."""
    return "not found" in error.message.lower()


async def get_job(requester: Requester, job_id: str, data_type: Any = Any) -> Job[Any] | None:
    """The job with this id, or None when the broker does not know it."""
    payload = await requester.raw({"cmd": GET_JOB, "id": job_id}, idempotent=True)
    try:
        reply = decode_typed(payload, JobReply, GET_JOB)
    except ServerError as exc:
        if is_missing(exc):
            return None
        raise
    if reply.job is None:
        return None
    return Job.from_wire(requester, reply.job, data_type)
