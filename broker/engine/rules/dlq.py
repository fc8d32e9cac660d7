"""Dead-letter rules: each queue's DlqConfig applied to its failed jobs (functions over
the part of EngineState they need, `DeadLetterState`).

A job that failed for good is in its queue's dead-letter queue (DLQ). SetDlqConfig gives a
queue, on top of the broker-wide `--keep-failed` caps (the stricter cap wins):

* `maxEntries` and `maxAge`: the queue keeps at most that many failed jobs, none older than
  that (ms since it failed; `null` for no age cap); the oldest go first, as with retention;
* `autoRetry`, `autoRetryInterval`, `maxAutoRetries`: a failed job goes back to waiting by itself,
  with a fresh attempt budget, `autoRetryInterval` ms after it failed; after its next failure
  twice that, then four times, and so on, `maxAutoRetries` times over the job's life.

A new setting applies at once to the jobs already in the DLQ. Timers carry the job's finish
number, so a job that was retried meanwhile (by hand or by an auto retry) ignores them. A job
past its ttl is not auto retried: it would only expire again.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from broker.engine.state.model import FAILED, Job
from broker.engine.state.queues import Queues, QueueState
from broker.engine.state.retention import Forgetting, Retention, expire_retained, retain

DLQ_RETRY = "dlq-retry"
"""The timer kind of a failed job's automatic retry."""
AUTO_RETRY_DEFAULTS = {"autoRetry": False, "autoRetryInterval": 3_600_000, "maxAutoRetries": 3}
CAP_KEYS = ("maxEntries", "maxAge")
RETRY_KEYS = tuple(AUTO_RETRY_DEFAULTS)
MAX_DOUBLINGS = 64  # 2**64 intervals is forever; more would overflow a float


def auto_retry_due(config: dict[str, Any], job: Job) -> float | None:
    """When a failed job's next auto retry is due under `config`; None if it has none left."""
    settings = {**AUTO_RETRY_DEFAULTS, **config}
    if not settings["autoRetry"] or job.dlq_retries >= settings["maxAutoRetries"]:
        return None
    doublings = min(job.dlq_retries, MAX_DOUBLINGS)
    return (job.completed_at or 0) + settings["autoRetryInterval"] * 2**doublings


class DeadLetterState(Forgetting, Protocol):
    """What the dead-letter rules touch of EngineState."""

    failed: Retention
    queues: Queues

    def revive(self, job: Job, now: float) -> bool:
        """A finished job back to waiting with a fresh budget."""
        ...


def dlq_config(state: DeadLetterState, queue: QueueState) -> dict[str, Any]:
    """The queue's DLQ settings: its own, else the defaults, with the broker-wide caps
    standing in for caps the queue did not set."""
    config = {**AUTO_RETRY_DEFAULTS, **queue.dlq_config}
    config.setdefault("maxAge", state.failed.max_age_ms)
    config.setdefault("maxEntries", state.failed.limit)
    return config


def enter_dead_letters(state: DeadLetterState, queue: QueueState, job: Job, now: float) -> None:
    """A job of `queue` has just failed for good (after `mark_finished`): apply the queue's
    caps and arm its auto retry."""
    if queue.dead_letters is not None:
        retain(state, queue.dead_letters, job, now)
    _arm_auto_retry(state, queue, job)


def _arm_auto_retry(state: DeadLetterState, queue: QueueState, job: Job) -> None:
    due = auto_retry_due(queue.dlq_config, job)
    if due is not None:
        state.wheel.schedule(due, DLQ_RETRY, job, job.retained_seq)


def auto_retry(state: DeadLetterState, job: Job, finish: int, now: float) -> None:
    """A DLQ_RETRY timer fired: retry the job if it still sits in the DLQ from the same
    failure and its retry is due under the queue's current settings."""
    if job.state != FAILED or job.retained_seq != finish:
        return
    due = auto_retry_due(state.queues.make(job.queue).dlq_config, job)
    if due is None or due > now:  # switched off, or moved later by a new setting
        return
    if job.ttl and now >= job.created_at + job.ttl:
        return  # past its ttl it would only expire again at once: it stays in the DLQ
    job.dlq_retries += 1  # counted first: the revived job may fail again in this call
    state.revive(job, now)


def apply_dlq_config(
    state: DeadLetterState, queue: QueueState, now: float, *, retries: bool = True
) -> None:
    """After SetDlqConfig or a restart: the queue's caps apply to the jobs already in its
    DLQ, and (with `retries`, when the auto-retry settings changed) so do its auto retries.
    """
    config = queue.dlq_config
    failed = [job for job in _current_failed(state) if job.queue == queue.name]
    if any(key in config for key in CAP_KEYS):
        expire_retained(state, _rebuild_caps(queue, failed, config), now)
    if not retries:
        return
    for job in failed:
        if job.state == FAILED:  # not dropped by the caps just now
            _arm_auto_retry(state, queue, job)


def _current_failed(state: DeadLetterState) -> list[Job]:
    """Every job in a DLQ, oldest failure first (the broker-wide retention holds them all)."""
    retention = state.failed
    return [entry[2] for entry in retention.entries if retention.current(entry)]


def _rebuild_caps(queue: QueueState, failed: list[Job], config: dict[str, Any]) -> Retention:
    """Set the queue's caps from `config`, its entries from its failed jobs; returns them. The
    Retention object is kept, so its pending age timers act on the new caps."""
    max_age = config.get("maxAge")
    limit = config.get("maxEntries", math.inf)
    caps = queue.dead_letters
    if caps is None:
        caps = queue.dead_letters = Retention(FAILED, limit, math.inf)
    caps.limit = limit
    caps.max_age_ms = math.inf if max_age is None else max_age
    caps.entries.clear()
    for job in failed:
        caps.add(job, job.completed_at or 0)
    caps.count = queue.counts[FAILED]
    return caps
