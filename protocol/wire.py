"""The job object as replies carry it: the reference server's keys, in its order.

A Struct, not a dict: msgspec builds it from positional values and encodes it with its keys
already encoded, which measured 1.7 us a job against 4.2 us for the 47-key dict (a PULLB of
100 jobs pays this per job). Being positional, `WireJob(...)` takes every value in the order
of the fields below; tests/engine/test_wire.py checks the mapping from the job model.
"""

from __future__ import annotations

from typing import Any

import msgspec


class WireJob(msgspec.Struct):
    """A job in a PULL/PULLB reply and everywhere else a job is shown."""

    id: str
    queue: str
    name: str
    data: msgspec.Raw
    createdAt: float
    runAt: float
    startedAt: float | None
    completedAt: float | None
    attempts: int
    backoff: float
    backoffConfig: Any
    dependsOn: list[str]
    childrenIds: list[str]
    childrenCompleted: int
    tags: list[str]
    progress: float
    progressMessage: str | None
    stacktrace: list[str] | None
    repeat: Any
    durable: bool
    lastHeartbeat: float
    stallCount: int
    priority: float
    lifo: bool
    maxAttempts: int
    removeOnComplete: bool
    removeOnFail: bool
    ttl: float | None
    timeout: float | None
    uniqueKey: str | None
    customId: str | None
    parentId: str | None
    groupId: str | None
    groupMaxSize: int | None
    stallTimeout: float | None
    stackTraceLimit: float
    keepLogs: float | None
    sizeLimit: float | None
    failParentOnFailure: bool
    removeDependencyOnFailure: bool
    continueParentOnFailure: bool
    ignoreDependencyOnFailure: bool
    deduplicationTtl: float | None
    deduplicationExtend: bool
    deduplicationReplace: bool
    debounceId: str | None
    debounceTtl: float | None
    timeline: list[Any]


class WireJobWithState(WireJob):
    """A job as GetJob and the listings show it: with its state, result and failure."""

    state: str
    returnvalue: msgspec.Raw | None
    failedReason: str | None
