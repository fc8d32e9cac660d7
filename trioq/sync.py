"""The same client without `await`, for synchronous programs.

    with trioq.sync.connect("tcp://127.0.0.1:6789") as client:
        job = client.queue("emails").add("welcome", {})
        print(job.wait(timeout=10))

An event loop (asyncio by default, `backend="trio"` for Trio) runs in a background thread for
the client's lifetime; every call runs there and blocks the calling thread until it is done.
Calls from several threads at once are fine (and concurrent adds are batched, as in async).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._syncjob import SyncJob

if TYPE_CHECKING:
    from ._client import Client as AsyncClient
    from ._events import Event
    from ._options import JobOptions
    from ._queue import Queue as AsyncQueue
    from ._worker import Handler

DataT = TypeVar("DataT")
T = TypeVar("T")

__all__ = ["Client", "Queue", "SyncJob", "Worker", "connect"]


class Client:
    """A blocking client: `with trioq.sync.connect(url) as client:`."""

    def __init__(self, url: str, token: str | None = None, *, backend: str = "asyncio",
                 **options: Any) -> None:  # fmt: skip
        from ._client import Client as AsyncClient

        self._async = AsyncClient(url, token=token, **options)
        self._backend = backend
        self._stack = contextlib.ExitStack()
        self._portal: BlockingPortal | None = None

    def __enter__(self) -> Client:
        try:
            self._portal = self._stack.enter_context(start_blocking_portal(self._backend))
            self._stack.enter_context(self._portal.wrap_async_context_manager(self._async))
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the background event loop."""
        self._stack.close()

    @property
    def portal(self) -> BlockingPortal:
        """The portal into the background event loop."""
        if self._portal is None:
            raise RuntimeError("use `with trioq.sync.connect(...) as client:`")
        return self._portal

    @property
    def aclient(self) -> AsyncClient:
        """The async client underneath."""
        return self._async

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run an async function on the client's event loop and return its result."""
        return self.portal.call(fn, *args)

    def queue(self, name: str, data_type: Any = Any) -> Queue[Any]:
        """The queue `name` (see `trioq.Client.queue`)."""
        return Queue(self, self._async.queue(name, data_type))

    def get_job(self, job_id: str, data_type: Any = Any) -> SyncJob[Any] | None:
        """The job with this id (None when the broker does not know it)."""
        job = self.run(self._async.get_job, job_id, data_type)
        return None if job is None else SyncJob(job, self.run)

    def command(self, name: str, **fields: Any) -> dict[str, Any]:
        """Send any bunqueue command by name; the reply as a dict."""

        async def send() -> dict[str, Any]:
            return await self._async.command(name, **fields)

        return self.run(send)  # type: ignore[no-any-return]

    def ping(self) -> float:
        """Round trip to the broker, in seconds."""
        return self.run(self._async.ping)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """Broker-wide counts."""
        return self.run(self._async.stats)  # type: ignore[no-any-return]

    def add_flow(self, flow: Any) -> Any:
        """Add a flow (see trioq.FlowProducer.add); returns its FlowNode tree."""
        from ._flow import FlowProducer

        return self.run(FlowProducer(self._async).add, flow)

    @contextlib.contextmanager
    def events(self, queue: str) -> Iterator[Iterator[Event]]:
        """`with client.events("emails") as events: for event in events: ...`."""
        stream = self._async.events(queue)
        self.run(stream.start)
        try:
            yield _blocking_iter(self, stream)
        finally:
            self.run(stream.aclose)


def _blocking_iter(client: Client, stream: Any) -> Iterator[Event]:
    while True:
        try:
            yield client.run(stream.__anext__)
        except StopAsyncIteration:
            return


class Queue(Generic[DataT]):
    """A blocking Queue: the methods of `trioq.Queue`, without `await`."""

    def __init__(self, client: Client, queue: AsyncQueue[DataT]) -> None:
        self._client = client
        self.aqueue = queue
        self.name = queue.name

    def __repr__(self) -> str:
        return f"<trioq.sync.Queue {self.name}>"

    def add(self, name: str, data: DataT, **options: Unpack[JobOptions]) -> SyncJob[DataT]:
        """Add one job; returns it."""

        async def add() -> Any:
            return await self.aqueue.add(name, data, **options)

        return SyncJob(self._client.run(add), self._client.run)

    def add_bulk(self, jobs: Iterable[Any]) -> list[SyncJob[DataT]]:
        """Add many jobs at once (see trioq.Queue.add_bulk)."""
        added = self._client.run(self.aqueue.add_bulk, list(jobs))
        return [SyncJob(job, self._client.run) for job in added]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Every other Queue method (counts, pause, dlq, upsert_cron...) as a blocking call.
        method = getattr(self.aqueue, name)
        if not callable(method):
            return method  # type: ignore[no-any-return]

        def blocking(*args: Any, **kwargs: Any) -> Any:
            async def call() -> Any:
                result = await method(*args, **kwargs)
                if isinstance(result, list) and result and hasattr(result[0], "token"):
                    return [SyncJob(job, self._client.run) for job in result]
                if hasattr(result, "token") and hasattr(result, "queue"):
                    return SyncJob(result, self._client.run)
                return result

            return self._client.run(call)

        return blocking


class Worker:
    """A Worker run from synchronous code: `with trioq.sync.Worker(client, q, handler):`
    runs it for the block; `worker.run()` blocks until KeyboardInterrupt (then stops
    gracefully). Plain handlers run in threads and get a SyncJob."""

    def __init__(self, client: Client, queue: str, handler: Handler[Any], **options: Any) -> None:
        from ._worker import Worker as AsyncWorker

        self._client = client
        self.aworker = AsyncWorker(client.aclient, queue, handler, **options)
        self._cm: Any = None

    def __enter__(self) -> Worker:
        self._cm = self._client.portal.wrap_async_context_manager(self.aworker)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)

    def run(self) -> None:
        """Run until KeyboardInterrupt (Ctrl-C), then stop gracefully."""
        import threading

        with self, contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


def connect(url: str = "tcp://127.0.0.1:6789", token: str | None = None, *,
            backend: str = "asyncio", **options: Any) -> Client:  # fmt: skip
    """A blocking client for the broker at `url`: `with trioq.sync.connect(url) as client:`.
    Options as `trioq.connect` (pool_size, timeout, ...)."""
    return Client(url, token, backend=backend, **options)
