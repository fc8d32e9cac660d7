"""Jobs as data: the keys of a job the reference returns, and stored job records."""

from __future__ import annotations

from broker.engine.state.model import Job
from broker.engine.state.records import job_to_row
from store import JobRow
from tests.support.app import EPOCH_MS

REFERENCE_JOB_KEYS = [
    "id", "queue", "name", "data", "createdAt", "runAt", "startedAt", "completedAt", "attempts",
    "backoff", "backoffConfig", "dependsOn", "childrenIds", "childrenCompleted", "tags", "progress",
    "progressMessage", "stacktrace", "repeat", "durable", "lastHeartbeat", "stallCount", "priority",
    "lifo", "maxAttempts", "removeOnComplete", "removeOnFail", "ttl", "timeout", "uniqueKey",
    "customId", "parentId", "groupId", "stallTimeout", "stackTraceLimit", "keepLogs", "sizeLimit",
    "failParentOnFailure", "removeDependencyOnFailure", "continueParentOnFailure",
    "ignoreDependencyOnFailure", "deduplicationTtl", "deduplicationExtend", "deduplicationReplace",
    "debounceId", "debounceTtl", "timeline",
]  # fmt: skip


def stored_job(job_id: str, queue: str = "q") -> JobRow:
    """The stored row of a plain waiting job."""
    job = Job(id=job_id, queue=queue, name="j", data=b"\x80", created_at=EPOCH_MS, run_at=EPOCH_MS)
    job.state = "waiting"
    return job_to_row(job)
