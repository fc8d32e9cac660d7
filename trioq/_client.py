"""`connect()` and `Client`: the entry point, owning the connections and their tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar, overload
from urllib.parse import urlsplit

import anyio
import anyio.abc

from ._connection import Connection, Deadlines, Pool, Spawner
from ._errors import ClientClosed
from ._events import EventStream
from ._job import Job, get_job
from ._queue import Queue
from ._requester import Requester
from ._wire import command

DataT = TypeVar("DataT")
DEFAULT_PORT = 6789
PING = command("Ping")
STATS = command("Stats")
LIST_QUEUES = command("ListQueues")
LIST_WORKERS = command("ListWorkers")
CRON_LIST = command("CronList")


def parse_url(url: str) -> tuple[str, int]:
    """`tcp://host:port` (or `host:port`, or `host`) as (host, port)."""
    if "://" not in url:
        url = "tcp://" + url
    parts = urlsplit(url)
    if parts.scheme != "tcp":
        raise ValueError(f"unsupported scheme {parts.scheme!r} (use tcp://host:port)")
    if not parts.hostname:
        raise ValueError(f"no host in {url!r}")
    return parts.hostname, parts.port or DEFAULT_PORT


class Client:
    """A connection pool to one broker; use it as `async with trioq.connect(url) as client:`.

    Every call has a timeout (`timeout`, seconds). Connections are pipelined (many calls in
    flight, matched by reqId), authenticated with `token`, and reopened with exponential
    backoff when they break. The block's end closes everything the client opened (its
    queues' pending adds fail with ClientClosed; workers must be stopped first).
    """

    def __init__(
        self,
        url: str = "tcp://127.0.0.1:6789",
        *,
        token: str | None = None,
        pool_size: int = 2,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        backoff: tuple[float, float] = (0.05, 5.0),
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.url = url
        self.host, self.port = parse_url(url)
        self.token = token
        self.pool_size = pool_size
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self._stack: contextlib.AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._pools: list[Pool] = []
        self._pool: Pool | None = None
        self._requester: Requester | None = None
        self._queues: dict[tuple[str, Any], Queue[Any]] = {}
        self.deadlines = Deadlines()
        self.closed = False

    def __repr__(self) -> str:
        return f"<trioq.Client {self.url}>"

    async def __aenter__(self) -> Client:
        if self._stack is not None:
            raise RuntimeError("a Client is entered once")
        stack = contextlib.AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._group.start_soon(self.deadlines.run)
        try:
            self._pool = await self._start_pool(size=self.pool_size, name="client")
        except BaseException:
            self._group.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._requester = Requester(self._pool, self.timeout, self.deadlines)
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection this client opened and end their tasks."""
        if self.closed:
            return
        self.closed = True
        for pool in self._pools:
            pool.close()
        if self._group is not None:
            self._group.cancel_scope.cancel()
        if self._stack is not None:
            await self._stack.aclose()

    async def _start_pool(
        self,
        *,
        size: int,
        name: str,
        group: Spawner | None = None,
        on_ready: Callable[[Connection], None] | None = None,
        on_event: Callable[[bytes], None] | None = None,
    ) -> Pool:
        """A new pool to this client's broker, its tasks in `group` (the client's by default),
        once its first connection is open."""
        if self.closed or self._group is None:
            raise ClientClosed("the client is not open (use `async with trioq.connect(...)`)")
        pool = Pool(
            self.host,
            self.port,
            token=self.token,
            size=size,
            connect_timeout=self.connect_timeout,
            backoff=self.backoff,
            on_ready=on_ready,
            on_event=on_event,
            name=name,
        )
        await pool.start(self._group if group is None else group)
        self._pools.append(pool)
        return pool

    @property
    def requester(self) -> Requester:
        """The calls of this client (for Queue, Job and FlowProducer)."""
        if self._requester is None or self.closed:
            raise ClientClosed("the client is not open (use `async with trioq.connect(...)`)")
        return self._requester

    @overload
    def queue(self, name: str) -> Queue[Any]: ...
    @overload
    def queue(self, name: str, data_type: type[DataT]) -> Queue[DataT]: ...
    def queue(self, name: str, data_type: Any = Any) -> Queue[Any]:
        """The queue `name`; with `data_type` (a msgspec Struct...) its jobs' data is decoded
        as that type. Queues of one name share their add batching."""
        key = (name, data_type)
        found = self._queues.get(key)
        if found is None:
            found = self._queues[key] = Queue(self.requester, name, data_type)
        return found

    @overload
    async def get_job(self, job_id: str) -> Job[Any] | None: ...
    @overload
    async def get_job(self, job_id: str, data_type: type[DataT]) -> Job[DataT] | None: ...
    async def get_job(self, job_id: str, data_type: Any = Any) -> Job[Any] | None:
        """The job with this id as the broker holds it now (None if it does not know it)."""
        return await get_job(self.requester, job_id, data_type)

    def events(self, queue: str) -> EventStream:
        """The queue's job events, as an async iterator (`async for event in ...`)."""
        return EventStream(self, queue)

    async def command(self, name: str, **fields: Any) -> dict[str, Any]:
        """Send any bunqueue command by name (`await client.command("Stats")`); returns the
        reply as a dict, raises ServerError when it says `ok: false`."""
        return await self.requester.ask(name, fields)

    async def ping(self) -> float:
        """Round trip to the broker, in seconds."""
        start = anyio.current_time()
        await self.requester.ask(PING, {}, idempotent=True)
        return anyio.current_time() - start

    async def stats(self) -> dict[str, Any]:
        """Broker-wide counts."""
        return dict((await self.requester.ask(STATS, {}, idempotent=True)).get("stats") or {})

    async def list_queues(self) -> list[str]:
        """The names of the queues the broker knows."""
        queues = (await self.requester.ask(LIST_QUEUES, {}, idempotent=True)).get("queues") or []
        return [q if isinstance(q, str) else str(q.get("name")) for q in queues]

    async def list_workers(self) -> list[dict[str, Any]]:
        """Registered workers (of every client)."""
        data = (await self.requester.ask(LIST_WORKERS, {}, idempotent=True)).get("data") or {}
        return list(data.get("workers") or [])

    async def list_crons(self) -> list[dict[str, Any]]:
        """Every cron of every queue."""
        return list((await self.requester.ask(CRON_LIST, {}, idempotent=True)).get("crons") or [])


def connect(
    url: str = "tcp://127.0.0.1:6789",
    token: str | None = None,
    *,
    pool_size: int = 2,
    timeout: float = 30.0,
    connect_timeout: float = 10.0,
    backoff: tuple[float, float] = (0.05, 5.0),
) -> Client:
    """A client for the broker at `url`; open it with `async with` (the first connection is
    made on entry: a broker that cannot be reached raises trioq.ConnectError there)."""
    return Client(
        url,
        token=token,
        pool_size=pool_size,
        timeout=timeout,
        connect_timeout=connect_timeout,
        backoff=backoff,
    )
