"""`Worker`: runs a handler on a queue's jobs, `concurrency` at a time.

One worker has a connection of its own. A fetcher long-polls PULLB for as many jobs as there
is room for, leased to this worker (`owner`, `lockTtl`); `concurrency` slot tasks run the
handler; a settler sends what the handlers decided: results batched into ACKB (one per batch
of finished jobs, as many as finished meanwhile), failures as FAIL, returned jobs as
MoveToWait. A renewer extends the leases of every job in hand.

Stopping (the `async with` block ends, `aclose()`, or a cancellation of the task running the
block, e.g. on SIGTERM): no new job is taken, the handlers running get `shutdown_grace`
seconds to finish, then are cancelled; every job not finished is given back to the queue
(MoveToWait, no attempt spent), every result is sent, and only then is the connection closed.
The worker's tasks are shielded from outside cancellation, so that this always runs.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
import traceback
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.abc
import msgspec

from . import _tracing
from ._connection import Call, Connection, Pool, ShieldedGroup, wait_call
from ._errors import ClientClosed, ServerError, TrioqError, Unrecoverable
from ._job import Job
from ._queue import checked_queue_name
from ._requester import Requester
from ._syncjob import SyncJob
from ._wire import (
    MAX_POLL_MS,
    MAX_PULL_BATCH,
    AckBatchReply,
    PulledJobs,
    command,
    decode_reply,
    decode_typed,
    encode,
)

if TYPE_CHECKING:
    from ._client import Client

DataT = TypeVar("DataT")
log = logging.getLogger("trioq.worker")

PULLB = command("PULLB")
ACK = command("ACK")
ACKB = command("ACKB")
FAIL = command("FAIL")
MOVE_TO_WAIT = command("MoveToWait")
EXTEND_LOCKS = command("ExtendLocks")
REGISTER_WORKER = command("RegisterWorker")
HEARTBEAT = command("Heartbeat")
UNREGISTER_WORKER = command("UnregisterWorker")
HEARTBEAT_EVERY_S = 10.0  # the broker calls a worker stale after 30 s without one

Handler = Callable[[Job[DataT]], Awaitable[Any]] | Callable[[SyncJob[DataT]], Any]
MAX_STACK_LINES = 50


class _Limiter:
    """At most `limit` job starts in any `period` seconds (a sliding window)."""

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("rate_limit must be (jobs >= 1, seconds > 0)")
        self.limit = limit
        self.period = period
        self.starts: deque[float] = deque()

    def available(self) -> int:
        """How many may start now."""
        now = anyio.current_time()
        while self.starts and self.starts[0] <= now - self.period:
            self.starts.popleft()
        return self.limit - len(self.starts)

    def wait_time(self) -> float:
        """Seconds until one more may start (0: now)."""
        if self.available() > 0:
            return 0.0
        return max(0.0, self.starts[0] + self.period - anyio.current_time())

    async def acquire(self) -> None:
        """Wait for room, then take it."""
        while self.available() <= 0:  # noqa: ASYNC110  (room comes with time, not an event)
            await anyio.sleep(self.wait_time())
        self.starts.append(anyio.current_time())


class Worker(Generic[DataT]):
    """Runs `handler(job)` on the jobs of `queue`, `concurrency` at once.

    `handler` is an async function, or a plain function (run in a thread, given a SyncJob
    whose `progress()`/`log()` block). Its return value is the job's result; an exception
    fails the attempt (the broker retries with backoff while attempts remain);
    `trioq.Unrecoverable` fails the job for good.

    `async with Worker(client, "emails", handler, concurrency=10):` runs it for the block;
    `await worker.run()` runs it until cancelled. Either way it stops gracefully.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        handler: Handler[DataT],
        *,
        concurrency: int = 1,
        data_type: Any = Any,
        prefetch: int | None = None,
        poll_timeout: float = 0.5,
        lock_ttl: float = 30.0,
        lock_renew_every: float | None = None,
        shutdown_grace: float = 10.0,
        rate_limit: tuple[int, float] | None = None,
        name: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= poll_timeout * 1000 <= MAX_POLL_MS:
            raise ValueError(f"poll_timeout must be 0..{MAX_POLL_MS // 1000} seconds")
        self.client = client
        self.queue = checked_queue_name(queue)
        self.handler = handler
        self.concurrency = concurrency
        self.data_type = data_type
        self.prefetch = concurrency if prefetch is None else prefetch
        self.poll_timeout = poll_timeout
        self.lock_ttl = lock_ttl
        self.lock_renew_every = lock_renew_every or lock_ttl / 3
        self.shutdown_grace = shutdown_grace
        self.limiter = None if rate_limit is None else _Limiter(*rate_limit)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.id = f"trioq-{uuid.uuid4()}"
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 (an async callable object)
        )
        self.processed = 0
        self.failed = 0
        self._ready: deque[Job[DataT]] = deque()
        self._running: dict[str, Job[DataT]] = {}
        self._slot_scopes: list[anyio.CancelScope] = []
        self._acks: list[tuple[Job[DataT], msgspec.Raw]] = []
        self._settles: list[Call] = []  # FAIL and MoveToWait calls
        self._wake_slots = anyio.Event()
        self._wake_fetcher = anyio.Event()
        self._wake_settler = anyio.Event()
        self._idle = anyio.Event()
        self._stopping = False
        self._settled = False
        self._scopes: list[anyio.CancelScope] = []
        self._stack: Any = None
        self._pool: Pool | None = None
        self._requester: Requester | None = None
        self._fetcher_done = anyio.Event()
        self._settler_done = anyio.Event()
        self.started = False

    def __repr__(self) -> str:
        return f"<trioq.Worker {self.queue} x{self.concurrency}>"

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Worker[DataT]:
        if self.started:
            raise RuntimeError("a Worker runs once")
        self.started = True
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        spawner = ShieldedGroup(group)
        try:
            self._pool = await self.client._start_pool(
                size=1,
                group=spawner,
                name=f"worker {self.queue}",
                on_ready=self._register,
            )
        except BaseException:
            group.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._requester = Requester(self._pool, self.client.timeout, self.client.deadlines)
        self._stack = stack
        spawner.start_soon(self._fetch_loop)
        spawner.start_soon(self._settle_loop)
        spawner.start_soon(self._renew_loop)
        spawner.start_soon(self._heartbeat_loop)
        for _ in range(self.concurrency):
            spawner.start_soon(self._slot)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def run(self) -> None:
        """Run until cancelled (then stop gracefully and re-raise the cancellation)."""
        async with self:
            await anyio.sleep_forever()

    async def aclose(self) -> None:
        """Stop: take no more jobs, let running handlers finish (within `shutdown_grace`),
        give back the rest, send every result, close the connection."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        with anyio.CancelScope(shield=True):
            self._stopping = True
            self._wake_slots.set()
            self._wake_fetcher.set()
            with anyio.move_on_after(self.shutdown_grace):
                while self._running:
                    self._idle = anyio.Event()
                    await self._idle.wait()
            for scope in self._slot_scopes:
                scope.cancel()
            with anyio.move_on_after(self.poll_timeout + self.client.timeout):
                await self._fetcher_done.wait()
            self._return(list(self._ready))
            self._ready.clear()
            while self._running:  # cancelled handlers give their jobs back
                self._idle = anyio.Event()
                await self._idle.wait()
            self._settled = True
            self._wake_settler.set()
            with anyio.move_on_after(self.client.timeout):
                await self._settler_done.wait()
            for scope in self._scopes:
                scope.cancel()
            assert self._pool is not None
            with contextlib.suppress(TrioqError, OSError):  # leaving the list is a courtesy
                unregister = Call({"cmd": UNREGISTER_WORKER, "workerId": self.id})
                await wait_call(self._pool, unregister, min(1.0, self.client.timeout))
            self._pool.close()
        await stack.aclose()  # the worker's tasks end by themselves now

    # -- taking jobs -----------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        try:
            capacity = self.concurrency + self.prefetch
            threshold = max(1, capacity // 4)
            while not self._stopping:
                room = capacity - len(self._ready) - len(self._running)
                if (self._ready and room < threshold) or room <= 0:
                    self._wake_fetcher = anyio.Event()
                    await self._wake_fetcher.wait()
                    continue
                if self.limiter is not None:
                    room = min(room, self.limiter.available())
                    if room <= 0:
                        await anyio.sleep(self.limiter.wait_time())
                        continue
                jobs = await self._pull(min(room, MAX_PULL_BATCH))
                if self._stopping:
                    self._return(jobs)
                    break
                if jobs:
                    self._ready.extend(jobs)
                    self._wake_slots.set()
        finally:
            self._fetcher_done.set()

    async def _pull(self, count: int) -> list[Job[DataT]]:
        assert self._requester is not None
        message = {
            "cmd": PULLB,
            "queue": self.queue,
            "count": count,
            "timeout": int(self.poll_timeout * 1000),
            "owner": self.id,
            "lockTtl": int(self.lock_ttl * 1000),
        }
        try:
            payload = await self._requester.raw(
                message,
                timeout=self.poll_timeout + self._requester.timeout,
                on_orphan=self._return_orphans,
            )
            reply = decode_typed(payload, PulledJobs, PULLB)
        except Exception as exc:  # a failed pull must not end the worker: log, wait, retry
            if isinstance(exc, ClientClosed) or self._stopping:
                return []
            log.warning("worker %s: pull failed: %s", self.queue, exc)
            await anyio.sleep(min(1.0, self.poll_timeout or 0.1))
            return []
        return self._jobs_of(reply)

    def _jobs_of(self, reply: PulledJobs) -> list[Job[DataT]]:
        tokens = reply.tokens or [None] * len(reply.jobs)
        assert self._requester is not None
        return [
            Job.from_wire(self._requester, wire, self.data_type, token)
            for wire, token in zip(reply.jobs, tokens, strict=False)
        ]

    def _return_orphans(self, payload: bytes) -> None:
        """A pull's answer came after nobody wanted it: give its jobs back."""
        with contextlib.suppress(ServerError):
            self._return(self._jobs_of(decode_typed(payload, PulledJobs, PULLB)))

    # -- running jobs ----------------------------------------------------------------------

    async def _slot(self) -> None:
        # One cancel scope per slot, not per job (a scope costs more than a trivial job):
        # cancelling it at a stop cancels the handler running in this slot, if any.
        scope = anyio.CancelScope()
        self._slot_scopes.append(scope)
        with scope:
            while True:
                while not self._ready:
                    if self._stopping:
                        return
                    if self._wake_slots.is_set():
                        self._wake_slots = anyio.Event()
                    await self._wake_slots.wait()
                if self._stopping:
                    return
                job = self._ready.popleft()
                if self.limiter is not None:
                    try:
                        await self.limiter.acquire()
                    except BaseException:
                        self._return([job])
                        raise
                await self._process(job)

    async def _process(self, job: Job[DataT]) -> None:
        self._running[job.id] = job
        try:
            if _tracing.recording():
                with _tracing.job_span(job.queue, job.id, job.name, job.attempts, job.tags) as span:
                    await self._run(job, span)
            else:
                await self._run(job, None)
        finally:
            del self._running[job.id]
            self._wake_fetcher.set()
            if not self._running:
                self._idle.set()

    async def _run(self, job: Job[DataT], span: Any) -> None:
        try:
            result = await self._call_handler(job)
        except Exception as exc:
            _tracing.record_failure(span, exc)
            self._fail(job, exc)
        except BaseException:  # cancelled: the worker stops and gives the job back
            self._return([job])
            raise
        else:
            self._ack(job, result)

    async def _call_handler(self, job: Job[DataT]) -> Any:
        handler: Any = self.handler
        if self.is_async:
            return await handler(job)
        return await anyio.to_thread.run_sync(handler, SyncJob(job), abandon_on_cancel=True)

    # -- settling --------------------------------------------------------------------------

    def _ack(self, job: Job[DataT], result: Any) -> None:
        try:
            raw = msgspec.Raw(encode(result))
        except (TypeError, ValueError, OverflowError) as exc:
            self._fail(job, TypeError(f"the handler's result cannot be encoded: {exc}"))
            return
        self.processed += 1
        self._acks.append((job, raw))
        self._wake_settler.set()

    def _fail(self, job: Job[DataT], error: BaseException) -> None:
        self.failed += 1
        message: dict[str, Any] = {
            "cmd": FAIL,
            "id": job.id,
            "error": str(error) or error.__class__.__name__,
            "stack": traceback.format_exception(error)[-MAX_STACK_LINES:],
        }
        if isinstance(error, Unrecoverable):
            message["unrecoverable"] = True
        if job.token:
            message["token"] = job.token
        self._settles.append(Call(message, idempotent=True))
        self._wake_settler.set()

    def _return(self, jobs: list[Job[DataT]]) -> None:
        """Give jobs back to the queue, as they were (no attempt spent)."""
        for job in jobs:
            message: dict[str, Any] = {"cmd": MOVE_TO_WAIT, "id": job.id}
            if job.token:
                message["token"] = job.token
            self._settles.append(Call(message, idempotent=True))
        if jobs:
            self._wake_settler.set()

    async def _settle_loop(self) -> None:
        try:
            while True:
                if not self._acks and not self._settles:
                    if self._settled:
                        return
                    self._wake_settler = anyio.Event()
                    await self._wake_settler.wait()
                    continue
                acks, self._acks = self._acks, []
                settles, self._settles = self._settles, []
                try:
                    await self._settle(acks, settles)
                except Exception:  # never lose the settler: the leases expire and retry
                    log.exception("worker %s: sending results failed", self.queue)
        finally:
            self._settler_done.set()

    async def _settle(
        self, acks: list[tuple[Job[DataT], msgspec.Raw]], settles: list[Call]
    ) -> None:
        """Send one ACKB for `acks` and the other calls, all at once; wait for the answers."""
        assert self._pool is not None
        ack_call = None
        if acks:
            ack_call = Call(_ackb(acks), idempotent=True)
            ack_call.event = anyio.Event()
            self._pool.submit(ack_call)
        for call in settles:
            call.event = anyio.Event()
            self._pool.submit(call)
        timeout = self.client.timeout
        for call in settles:
            await self._answer(call, timeout)
        if ack_call is not None:
            try:
                payload = await self._answer(ack_call, timeout)
                if payload is not None:
                    decode_typed(payload, AckBatchReply, ACKB)
            except ServerError as exc:
                # One job of the batch is not ours any more (its lease ran out, a stop
                # beat it): ACKB is all or nothing, so acknowledge them one by one.
                log.info("worker %s: ACKB refused (%s); acknowledging one by one", self.queue, exc)
                await self._ack_one_by_one(acks)

    async def _answer(self, call: Call, timeout: float) -> bytes | None:
        """Wait for a settle call's answer; errors other than ServerError are logged (the
        broker gives the job to a worker again when its lease runs out)."""
        assert call.event is not None
        with anyio.move_on_after(timeout):
            await call.event.wait()
        if not call.done:
            call.abandoned = True
            log.error("worker %s: no answer to %s in %ss", self.queue, call.message["cmd"], timeout)
            return None
        if call.error is not None:
            log.error("worker %s: %s failed: %s", self.queue, call.message["cmd"], call.error)
            return None
        assert call.payload is not None
        if call.message["cmd"] != ACKB:
            try:
                decode_reply(call.payload, call.message["cmd"])
            except ServerError as exc:
                log.warning("worker %s: %s %s: %s", self.queue, call.message["cmd"],
                            call.message.get("id"), exc)  # fmt: skip
                return None
        return call.payload

    async def _ack_one_by_one(self, acks: list[tuple[Job[DataT], msgspec.Raw]]) -> None:
        calls = []
        assert self._pool is not None
        for job, raw in acks:
            message: dict[str, Any] = {"cmd": ACK, "id": job.id, "result": raw}
            if job.token:
                message["token"] = job.token
            call = Call(message, idempotent=True)
            call.event = anyio.Event()
            self._pool.submit(call)
            calls.append(call)
        for call in calls:
            await self._answer(call, self.client.timeout)

    # -- leases ----------------------------------------------------------------------------

    # -- presence --------------------------------------------------------------------------

    def _register(self, connection: Connection) -> None:
        """Announce the worker on each (new) connection: the broker lists it (the dashboard's
        workers) until the connection closes."""
        connection.submit(Call({
            "cmd": REGISTER_WORKER, "name": self.name, "workerId": self.id,
            "queues": [self.queue], "concurrency": self.concurrency,
            "hostname": socket.gethostname(), "pid": os.getpid(),
        }))  # fmt: skip

    async def _heartbeat_loop(self) -> None:
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        with scope:
            while True:
                await anyio.sleep(HEARTBEAT_EVERY_S)
                assert self._pool is not None
                message = {"cmd": HEARTBEAT, "id": self.id, "activeJobs": len(self._running),
                           "processed": self.processed, "failed": self.failed}  # fmt: skip
                self._pool.submit(Call(message))  # its answer is not needed

    async def _renew_loop(self) -> None:
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        with scope:
            while True:
                await anyio.sleep(self.lock_renew_every)
                jobs = [job for job in (*self._running.values(), *self._ready) if job.token]
                if not jobs:
                    continue
                assert self._pool is not None
                message = {
                    "cmd": EXTEND_LOCKS,
                    "ids": [job.id for job in jobs],
                    "tokens": [job.token for job in jobs],
                    "durations": [int(self.lock_ttl * 1000)] * len(jobs),
                }
                try:
                    await wait_call(self._pool, Call(message, idempotent=True), self.client.timeout)
                except (TrioqError, OSError) as exc:
                    log.warning("worker %s: lease renewal failed: %s", self.queue, exc)


def _ackb(acks: list[tuple[Job[Any], msgspec.Raw]]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "cmd": ACKB,
        "ids": [job.id for job, _ in acks],
        "results": [raw for _, raw in acks],
    }
    tokens = [job.token or "" for job, _ in acks]
    if any(tokens):
        message["tokens"] = tokens
    return message
