"""`Queue`: adding jobs (concurrent adds batched into PUSHB), reading and managing a queue."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar, Unpack

import anyio
import anyio.lowlevel
import msgspec

from protocol.errors import CommandError
from protocol.values import queue_name

from . import _tracing
from ._connection import Call
from ._errors import ServerError
from ._job import Job, get_job
from ._options import JobOptions, wire_options
from ._requester import Requester
from ._wire import IdsReply, JobsReply, command, decode_typed, encode

DataT = TypeVar("DataT")

PUSHB = command("PUSHB")
GET_JOB_COUNTS = command("GetJobCounts")
COUNT = command("Count")
GET_JOBS = command("GetJobs")
GET_COUNTS_PER_PRIORITY = command("GetCountsPerPriority")
PAUSE = command("Pause")
RESUME = command("Resume")
IS_PAUSED = command("IsPaused")
DRAIN = command("Drain")
CLEAN = command("Clean")
OBLITERATE = command("Obliterate")
PROMOTE_JOBS = command("PromoteJobs")
RETRY_COMPLETED = command("RetryCompleted")
DLQ = command("Dlq")
RETRY_DLQ = command("RetryDlq")
PURGE_DLQ = command("PurgeDlq")
GET_DLQ_CONFIG = command("GetDlqConfig")
SET_DLQ_CONFIG = command("SetDlqConfig")
GET_STALL_CONFIG = command("GetStallConfig")
SET_STALL_CONFIG = command("SetStallConfig")
RATE_LIMIT = command("RateLimit")
RATE_LIMIT_CLEAR = command("RateLimitClear")
SET_CONCURRENCY = command("SetConcurrency")
CLEAR_CONCURRENCY = command("ClearConcurrency")
CRON = command("Cron")
CRON_GET = command("CronGet")
CRON_DELETE = command("CronDelete")
CRON_LIST = command("CronList")
GET_JOB_BY_CUSTOM_ID = command("GetJobByCustomId")

MAX_BATCH = 1000  # jobs per PUSHB
MAX_BATCHES_IN_FLIGHT = 2  # per queue: more adds wait and go out together
_ITEM_ERROR = re.compile(r"jobs\[(\d+)\]: (.*)", re.DOTALL)


class _Batch:
    """Adds that go out in one PUSHB; each add waits on the batch's event for its id."""

    __slots__ = ("event", "items", "results", "sent")

    def __init__(self) -> None:
        self.items: list[dict[str, Any] | None] = []
        self.results: list[str | BaseException | None] = []
        self.event = anyio.Event()
        self.sent = False


class AddBatcher:
    """Batches one queue's concurrent `add()`s into PUSHB commands, as the TypeScript SDK's
    AddBatcher does: with fewer than MAX_BATCHES_IN_FLIGHT PUSHBs unanswered an add goes out
    at once (no added latency for sequential adds); otherwise it waits for an answer and goes
    out with every add that arrived meanwhile. An item the broker refuses (`jobs[i]: ...`) fails
    only its own add; the rest are sent again."""

    def __init__(self, requester: Requester, queue: str) -> None:
        self._requester = requester
        self._queue = queue
        self._filling: _Batch | None = None
        self._in_flight = 0
        self._leader = False  # an add is about to flush the batch being filled

    async def add(self, item: dict[str, Any]) -> str:
        """Add one job (a PUSHB item); returns its id."""
        batch = self._filling
        if batch is None:
            batch = self._filling = _Batch()
        index = len(batch.items)
        batch.items.append(item)
        batch.results.append(None)
        if index + 1 >= MAX_BATCH:
            self._flush()
        elif self._in_flight < MAX_BATCHES_IN_FLIGHT and not self._leader:
            # Let every add that can run now join the batch (one yield), then send it: a
            # burst of concurrent adds goes out as one PUSHB, a lone add at once.
            self._leader = True
            try:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._leader = False
            if self._in_flight < MAX_BATCHES_IN_FLIGHT:
                self._flush()
        try:
            await batch.event.wait()  # the batch's PUSHB is timed by the client's deadlines
        except BaseException:
            if not batch.sent:  # never sent: the job is not added
                batch.items[index] = None
            raise
        result = batch.results[index]
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        return result

    def _flush(self) -> None:
        batch, self._filling = self._filling, None
        if batch is None:
            return
        batch.sent = True
        indexes = [i for i, item in enumerate(batch.items) if item is not None]
        if not indexes:
            batch.event.set()
            return
        self._send(batch, indexes)

    def _send(self, batch: _Batch, indexes: list[int]) -> None:
        items = [batch.items[i] for i in indexes]
        self._in_flight += 1
        call = Call(
            {"cmd": PUSHB, "queue": self._queue, "jobs": items},
            callback=lambda call: self._answered(call, batch, indexes),
        )
        self._requester.pool.submit(call)
        if self._requester.deadlines is not None:
            self._requester.deadlines.watch(call, self._requester.timeout)

    def _answered(self, call: Call, batch: _Batch, indexes: list[int]) -> None:
        self._in_flight -= 1
        retry: list[int] | None = None
        if call.error is not None:
            for i in indexes:
                batch.results[i] = call.error
        else:
            assert call.payload is not None
            try:
                reply = decode_typed(call.payload, IdsReply, PUSHB)
                for i, job_id in zip(indexes, reply.ids, strict=True):
                    batch.results[i] = job_id
            except ServerError as exc:
                retry = self._refuse_item(exc, batch, indexes)
            except ValueError as exc:  # a reply of the wrong length
                for i in indexes:
                    batch.results[i] = ServerError(f"bad PUSHB reply: {exc}", PUSHB)
        if retry:
            self._send(batch, retry)
        else:
            batch.event.set()
        if self._filling is not None and self._in_flight < MAX_BATCHES_IN_FLIGHT:
            self._flush()

    @staticmethod
    def _refuse_item(exc: ServerError, batch: _Batch, indexes: list[int]) -> list[int] | None:
        """Fail the item the error names; returns the others, to send again (None when the
        error names no item: then every add of the batch fails with it)."""
        match = _ITEM_ERROR.fullmatch(exc.message)
        position = int(match[1]) if match else -1
        if not 0 <= position < len(indexes):
            for i in indexes:
                batch.results[i] = exc
            return None
        batch.results[indexes[position]] = ServerError(match[2] if match else exc.message, PUSHB)
        return indexes[:position] + indexes[position + 1 :] or None


def job_item(name: str, data: Any, options: JobOptions | dict[str, Any]) -> dict[str, Any]:
    """One job as a PUSHB item: name, data (encoded now, so that a payload that cannot be
    encoded fails its own add, not its batch) and options."""
    item: dict[str, Any] = {"name": name, "data": msgspec.Raw(encode(data))}
    if options:
        wire_options(options, item)
    if _tracing.ENABLED:
        tags = _tracing.with_context(item.get("tags"))
        if tags is not None:
            item["tags"] = tags
    return item


def checked_queue_name(name: str) -> str:
    """The queue name, checked by the broker's own rule (a ValueError naming the problem)."""
    try:
        return queue_name(name)
    except CommandError as exc:
        raise ValueError(str(exc)) from None


class Queue(Generic[DataT]):
    """One queue: `add` jobs to it, read its jobs and counts, pause, clean, schedule crons.

    Get one from `client.queue(name)` (or `client.queue(name, MyStruct)` for typed data).
    """

    def __init__(self, requester: Requester, name: str, data_type: Any = Any) -> None:
        self.name = checked_queue_name(name)
        self.data_type = data_type
        self._requester = requester
        self._batcher = AddBatcher(requester, self.name)

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    # -- adding ----------------------------------------------------------------------------

    async def add(self, name: str, data: DataT, **options: Unpack[JobOptions]) -> Job[DataT]:
        """Add one job; returns it (its `id` is the broker's). Concurrent adds to a queue go
        out together in one PUSHB."""
        job_id = await self._batcher.add(job_item(name, data, options))
        return Job(self._requester, job_id, self.name, name, data, data_type=self.data_type)

    async def add_bulk(
        self,
        jobs: Iterable[tuple[str, DataT] | tuple[str, DataT, JobOptions]],
    ) -> list[Job[DataT]]:
        """Add many jobs at once, all or nothing (one PUSHB). Each is `(name, data)` or
        `(name, data, options)` with the options of `add` as a dict."""
        specs: list[tuple[str, DataT, Any]] = [
            (spec[0], spec[1], spec[2] if len(spec) > 2 else {}) for spec in jobs
        ]
        if not specs:
            return []
        items = [job_item(name, data, options) for name, data, options in specs]
        payload = await self._requester.raw({"cmd": PUSHB, "queue": self.name, "jobs": items})
        ids = decode_typed(payload, IdsReply, PUSHB).ids
        return [
            Job(self._requester, job_id, self.name, name, data, data_type=self.data_type)
            for job_id, (name, data, _) in zip(ids, specs, strict=True)
        ]

    # -- reading ---------------------------------------------------------------------------

    async def counts(self) -> dict[str, int]:
        """Jobs per state: waiting, prioritized, delayed, active, completed, failed,
        waiting-children, paused."""
        reply = await self._ask(GET_JOB_COUNTS, {}, idempotent=True)
        return {key: int(value) for key, value in (reply.get("counts") or {}).items()}

    async def count(self) -> int:
        """Jobs waiting to run (waiting, prioritized and delayed)."""
        return int((await self._ask(COUNT, {}, idempotent=True)).get("count") or 0)

    async def counts_per_priority(self) -> dict[str, int]:
        """Queued jobs per priority."""
        reply = await self._ask(GET_COUNTS_PER_PRIORITY, {}, idempotent=True)
        return dict(reply.get("counts") or {})

    async def get_job(self, job_id: str) -> Job[DataT] | None:
        """A job by id (None when the broker does not know it)."""
        return await get_job(self._requester, job_id, self.data_type)

    async def get_job_by_custom_id(self, custom_id: str) -> Job[DataT] | None:
        """A job by the `job_id` it was added with."""
        from ._wire import JobReply

        payload = await self._requester.raw(
            {"cmd": GET_JOB_BY_CUSTOM_ID, "customId": custom_id}, idempotent=True
        )
        try:
            reply = decode_typed(payload, JobReply, GET_JOB_BY_CUSTOM_ID)
        except ServerError as exc:
            if "not found" in exc.message.lower():
                return None
            raise
        return (
            None if reply.job is None else Job.from_wire(self._requester, reply.job, self.data_type)
        )

    async def get_jobs(
        self, states: str | Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[Job[DataT]]:
        """A page of jobs in the given states (all when None), oldest first (at most 1,000)."""
        fields: dict[str, Any] = {"queue": self.name, "limit": limit, "offset": offset}
        if states is not None:
            fields["state"] = [states] if isinstance(states, str) else list(states)
        return await self._jobs(GET_JOBS, fields)

    async def get_waiting(self, limit: int = 100) -> list[Job[DataT]]:
        """Waiting jobs, oldest first."""
        return await self.get_jobs("waiting", limit=limit)

    async def get_active(self, limit: int = 100) -> list[Job[DataT]]:
        """Active jobs."""
        return await self.get_jobs("active", limit=limit)

    async def get_delayed(self, limit: int = 100) -> list[Job[DataT]]:
        """Delayed jobs."""
        return await self.get_jobs("delayed", limit=limit)

    async def get_completed(self, limit: int = 100) -> list[Job[DataT]]:
        """Completed jobs (those the broker still holds)."""
        return await self.get_jobs("completed", limit=limit)

    async def get_failed(self, limit: int = 100) -> list[Job[DataT]]:
        """Failed jobs."""
        return await self.get_jobs("failed", limit=limit)

    async def is_paused(self) -> bool:
        """Whether the queue is paused."""
        return bool((await self._ask(IS_PAUSED, {}, idempotent=True)).get("paused"))

    # -- managing --------------------------------------------------------------------------

    async def pause(self) -> None:
        """Stop handing out jobs (workers' pulls get none) until `resume()`."""
        await self._ask(PAUSE, {})

    async def resume(self) -> None:
        """Hand out jobs again."""
        await self._ask(RESUME, {})

    async def drain(self) -> int:
        """Remove every job waiting to run (not active ones); returns how many."""
        return int((await self._ask(DRAIN, {})).get("count") or 0)

    async def clean(self, grace_ms: float = 0, state: str | None = None, limit: int = 1000) -> int:
        """Remove jobs older than `grace_ms` in `state` (queued jobs by default; `completed`,
        `failed`...), at most `limit`; returns how many."""
        fields: dict[str, Any] = {"grace": grace_ms, "limit": limit}
        if state is not None:
            fields["state"] = state
        return int((await self._ask(CLEAN, fields)).get("count") or 0)

    async def obliterate(self) -> None:
        """Remove the queue and everything in it, active and failed jobs included."""
        await self._ask(OBLITERATE, {})

    async def promote_jobs(self, count: int | None = None) -> int:
        """Run delayed jobs now (at most `count`); returns how many."""
        fields: dict[str, Any] = {} if count is None else {"count": count}
        return int((await self._ask(PROMOTE_JOBS, fields)).get("count") or 0)

    async def retry_completed(self, job_id: str | None = None) -> int:
        """Run one completed job (or all) again; returns how many."""
        fields: dict[str, Any] = {} if job_id is None else {"id": job_id}
        return int((await self._ask(RETRY_COMPLETED, fields)).get("count") or 0)

    async def set_rate_limit(self, per_second: int) -> None:
        """At most `per_second` jobs of this queue start per second, across all workers."""
        await self._ask(RATE_LIMIT, {"limit": per_second})

    async def clear_rate_limit(self) -> None:
        """Remove the rate limit."""
        await self._ask(RATE_LIMIT_CLEAR, {})

    async def set_concurrency(self, limit: int) -> None:
        """At most `limit` jobs of this queue active at once, across all workers."""
        await self._ask(SET_CONCURRENCY, {"limit": limit})

    async def clear_concurrency(self) -> None:
        """Remove the concurrency limit."""
        await self._ask(CLEAR_CONCURRENCY, {})

    async def stall_config(self) -> dict[str, Any]:
        """Stall detection settings: enabled, stallInterval, maxStalls, gracePeriod."""
        return dict((await self._ask(GET_STALL_CONFIG, {}, idempotent=True)).get("config") or {})

    async def set_stall_config(self, **config: Any) -> None:
        """Change stall detection settings (broker's names: `stallInterval=30000`...)."""
        await self._ask(SET_STALL_CONFIG, {"config": config})

    # -- dead letters ----------------------------------------------------------------------

    async def dlq(self, count: int = 100) -> list[Job[DataT]]:
        """Jobs that failed for good, oldest first."""
        return await self._jobs(DLQ, {"queue": self.name, "count": count})

    async def retry_dlq(self, job_id: str | None = None) -> int:
        """Run one failed job (or all) again, with a fresh attempt budget; returns how many."""
        fields: dict[str, Any] = {} if job_id is None else {"jobId": job_id}
        return int((await self._ask(RETRY_DLQ, fields)).get("count") or 0)

    async def purge_dlq(self) -> int:
        """Delete the failed jobs; returns how many."""
        return int((await self._ask(PURGE_DLQ, {})).get("count") or 0)

    async def dlq_config(self) -> dict[str, Any]:
        """Dead-letter settings: maxEntries, maxAge, autoRetry, autoRetryInterval..."""
        return dict((await self._ask(GET_DLQ_CONFIG, {}, idempotent=True)).get("config") or {})

    async def set_dlq_config(self, **config: Any) -> None:
        """Change dead-letter settings (broker's names: `autoRetry=True`...)."""
        await self._ask(SET_DLQ_CONFIG, {"config": config})

    # -- crons -----------------------------------------------------------------------------

    async def upsert_cron(
        self,
        name: str,
        data: Any = None,
        *,
        pattern: str | None = None,
        every_ms: float | None = None,
        timezone: str | None = None,
        priority: float | None = None,
        limit: int | None = None,
        prevent_overlap: bool | None = None,
        immediately: bool | None = None,
        skip_missed_on_restart: bool | None = None,
    ) -> dict[str, Any]:
        """Create or replace the cron `name`: it adds a job with `data` to this queue on a
        cron `pattern` (in `timezone`) or every `every_ms`. Returns the broker's view of it
        (`nextRun`...)."""
        fields: dict[str, Any] = {"name": name, "queue": self.name, "data": data}
        for key, value in (
            ("schedule", pattern), ("repeatEvery", every_ms), ("timezone", timezone),
            ("priority", priority), ("maxLimit", limit), ("preventOverlap", prevent_overlap),
            ("immediately", immediately), ("skipMissedOnRestart", skip_missed_on_restart),
        ):  # fmt: skip
            if value is not None:
                fields[key] = value
        return dict((await self._requester.ask(CRON, fields)).get("cron") or {})

    async def get_cron(self, name: str) -> dict[str, Any] | None:
        """One cron by name (None if there is none)."""
        try:
            reply = await self._requester.ask(CRON_GET, {"name": name}, idempotent=True)
        except ServerError as exc:
            if "not found" in exc.message.lower():
                return None
            raise
        return dict(reply.get("cron") or {})

    async def remove_cron(self, name: str) -> bool:
        """Delete a cron; False if there was none."""
        try:
            await self._requester.ask(CRON_DELETE, {"name": name})
        except ServerError as exc:
            if "not found" in exc.message.lower():
                return False
            raise
        return True

    async def crons(self) -> list[dict[str, Any]]:
        """This queue's crons."""
        reply = await self._requester.ask(CRON_LIST, {}, idempotent=True)
        return [dict(c) for c in reply.get("crons") or [] if c.get("queue") == self.name]

    # -- helpers ---------------------------------------------------------------------------

    async def _ask(
        self, name: str, fields: dict[str, Any], *, idempotent: bool = False
    ) -> dict[str, Any]:
        fields["queue"] = self.name
        return await self._requester.ask(name, fields, idempotent=idempotent)

    async def _jobs(self, name: str, fields: dict[str, Any]) -> list[Job[DataT]]:
        fields["cmd"] = name
        payload = await self._requester.raw(fields, idempotent=True)
        reply = decode_typed(payload, JobsReply, name)
        return [Job.from_wire(self._requester, wire, self.data_type) for wire in reply.jobs]
