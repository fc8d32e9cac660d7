"""trioq: an async client and worker for bunqueue brokers (trioq, bunqueue), on anyio, so the
same code runs under asyncio and Trio.

    async with trioq.connect("tcp://127.0.0.1:6789") as client:
        job = await client.queue("emails").add("welcome", {"to": "ada@example.com"})
        async with trioq.Worker(client, "emails", handler, concurrency=10):
            print(await job.wait(timeout=10))

`trioq.sync` has the same without `await`. Reference: docs/client.md.
"""

from __future__ import annotations

from . import sync
from ._client import Client, connect
from ._errors import (
    AuthError,
    ClientClosed,
    ConnectError,
    ConnectionLost,
    JobFailed,
    ServerError,
    Timeout,
    TrioqError,
    Unrecoverable,
)
from ._events import Event, EventStream
from ._flow import FlowNode, FlowProducer, FlowSpec
from ._job import Job
from ._options import Backoff, Dedup, JobOptions, Repeat
from ._queue import Queue
from ._syncjob import SyncJob
from ._worker import Worker

__all__ = [
    "AuthError",
    "Backoff",
    "Client",
    "ClientClosed",
    "ConnectError",
    "ConnectionLost",
    "Dedup",
    "Event",
    "EventStream",
    "FlowNode",
    "FlowProducer",
    "FlowSpec",
    "Job",
    "JobFailed",
    "JobOptions",
    "Queue",
    "Repeat",
    "ServerError",
    "SyncJob",
    "Timeout",
    "TrioqError",
    "Unrecoverable",
    "Worker",
    "connect",
    "sync",
]
