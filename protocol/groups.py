"""Per-group settings of a queue (the commands of BullMQ Pro's groups), and the remaining
introspection commands the official client can send: dedup keys, queue limits, DLQ stats,
and the legacy flow edits.

A group setting applies to every PULL of the queue, with or without the PULL's own `group`
options (a stored setting wins over the PULL's for the same key).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .commands import Command, QueueQuery
from .errors import CommandError
from .fields import ABSENT, Checked
from .values import MAX_SAFE_INTEGER, lease_token, required_str

MAX_GROUP_ID = 256


def group_id(value: Any) -> str:
    """A required group id: a non-empty string of at most 256 characters, without NUL."""
    if value is None:
        raise CommandError("groupId is required")
    if not isinstance(value, str):
        raise CommandError("groupId must be a string")
    if not value:
        raise CommandError("groupId must be a non-empty string")
    if len(value) > MAX_GROUP_ID:
        raise CommandError("groupId must be at most 256 characters")
    if "\0" in value:
        raise CommandError("groupId must not contain NUL characters")
    return value


def positive_safe_integer(value: Any, field: str) -> int:
    """A whole number from 1 to 2**53 - 1 (the reference's rule: no strings, no fractions)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    # The range check comes before int(): it refuses NaN and the infinities, which int() cannot
    # convert (an OverflowError would escape decode_command).
    if not ok or not 0 < value <= MAX_SAFE_INTEGER or value != int(value):
        raise CommandError(f"{field} must be a positive safe integer")
    return int(value)


class GroupQuery(QueueQuery):
    """A command that names one group of one queue."""

    groupId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.groupId = group_id(self.groupId)


class SetGroupConcurrency(GroupQuery, tag="SetGroupConcurrency"):
    """At most `concurrency` jobs of the group are active at once."""

    concurrency: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.concurrency = positive_safe_integer(self.concurrency, "concurrency")


class GetGroupConcurrency(GroupQuery, tag="GetGroupConcurrency"):
    """The group's concurrency setting (null: none)."""


class RemoveGroupConcurrency(GroupQuery, tag="RemoveGroupConcurrency"):
    """Drop the group's concurrency setting."""


class SetGroupRateLimit(GroupQuery, tag="SetGroupRateLimit"):
    """At most `max` jobs of the group start per `duration` ms."""

    max: Checked[int] = ABSENT
    duration: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.max = positive_safe_integer(self.max, "max")
        self.duration = positive_safe_integer(self.duration, "duration")


class GetGroupRateLimit(GroupQuery, tag="GetGroupRateLimit"):
    """The group's rate limit (null: none)."""


class RemoveGroupRateLimit(GroupQuery, tag="RemoveGroupRateLimit"):
    """Drop the group's rate limit."""


class GetGroupRateLimitTtl(GroupQuery, tag="GetGroupRateLimitTtl"):
    """How many ms until the group may start a job again (0: now)."""

    maxJobs: object = None


class RateLimitGroup(GroupQuery, tag="RateLimitGroup"):
    """Start none of the group's jobs for `duration` ms (a worker hit an outside limit)."""

    duration: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.duration = positive_safe_integer(self.duration, "duration")


class PauseGroup(GroupQuery, tag="PauseGroup"):
    """Start none of the group's jobs until ResumeGroup."""


class ResumeGroup(GroupQuery, tag="ResumeGroup"):
    """Start the group's jobs again."""


class IsGroupPaused(GroupQuery, tag="IsGroupPaused"):
    """Whether the group is paused."""


class GetGroupJobsCount(GroupQuery, tag="GetGroupJobsCount"):
    """How many of the group's jobs have not started yet."""


class GetGroupActiveCount(GroupQuery, tag="GetGroupActiveCount"):
    """How many of the group's jobs are active."""


class GetGroupsJobsCount(QueueQuery, tag="GetGroupsJobsCount"):
    """How many grouped jobs of the queue have not started yet."""


class GetQueueLimits(QueueQuery, tag="GetQueueLimits"):
    """The queue's rate limit and concurrency, and whether they hold starts back now."""

    maxJobs: object = None


class GetDlqStats(QueueQuery, tag="GetDlqStats"):
    """Counts of the queue's failed jobs: by reason, due for auto retry, oldest and newest."""


class RemoveDlqJob(QueueQuery, tag="RemoveDlqJob"):
    """Delete one failed job of the queue without retrying it."""

    jobId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.jobId = required_str(self.jobId, "jobId")


class DedupQuery(QueueQuery):
    """A command that names a queue's deduplication key (the job's `uniqueKey`)."""

    deduplicationId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.deduplicationId = required_str(self.deduplicationId, "deduplicationId")


class GetDeduplicationJobId(DedupQuery, tag="GetDeduplicationJobId"):
    """The id of the job holding the key (null: none)."""


class RemoveDeduplicationKey(DedupQuery, tag="RemoveDeduplicationKey"):
    """Release the key, whichever job holds it: the next push with it is a new job."""


class JobRef(Command):
    """A command that names one job by `id`."""

    id: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")


class RemoveJobDeduplicationKey(JobRef, tag="RemoveJobDeduplicationKey"):
    """Release the job's uniqueKey, if the job still holds it."""


class MoveToWaitingChildren(JobRef, tag="MoveToWaitingChildren"):
    """An active job waits for its unfinished dependencies (token if leased)."""

    token: Checked[str | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.token = lease_token(self.token, "token")


class RemoveChildDependency(JobRef, tag="RemoveChildDependency"):
    """Detach a child from its waiting parent; the parent runs if nothing else is pending."""


class RemoveUnprocessedChildren(JobRef, tag="RemoveUnprocessedChildren"):
    """Remove the parent's children that have not started (active and finished ones stay)."""


class DashboardOverview(Command, tag="DashboardOverview"):
    """Broker-wide counts, and every queue's counts, for a dashboard."""


class DashboardQueues(Command, tag="DashboardQueues"):
    """A page of queues with their counts."""

    limit: object = None
    offset: object = None


class DashboardQueue(QueueQuery, tag="DashboardQueue"):
    """One queue's counts and settings, for a dashboard."""

    includeJobs: object = None


GROUP_COMMANDS: tuple[type[msgspec.Struct], ...] = (
    SetGroupConcurrency, GetGroupConcurrency, RemoveGroupConcurrency, SetGroupRateLimit,
    GetGroupRateLimit, RemoveGroupRateLimit, GetGroupRateLimitTtl, RateLimitGroup, PauseGroup,
    ResumeGroup, IsGroupPaused, GetGroupJobsCount, GetGroupActiveCount, GetGroupsJobsCount,
    GetQueueLimits, GetDlqStats, RemoveDlqJob, GetDeduplicationJobId, RemoveDeduplicationKey,
    RemoveJobDeduplicationKey, MoveToWaitingChildren, RemoveChildDependency,
    RemoveUnprocessedChildren, DashboardOverview, DashboardQueues, DashboardQueue,
)  # fmt: skip
