"""Commands of the rest of a job's life: logs, leases, transitions, progress, waiting.

Validation follows the seed: numeric strings count, durations must be finite, `keepLogs`
fractions keep their whole part, an invalid entry of ExtendLocks fails the whole command
with its index.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from .commands import Command, optional_finite
from .errors import CommandError
from .fields import ABSENT, Checked, FromRaw
from .jobspec import NO_DATA, job_data
from .values import (
    MAX_LOG_LINE_BYTES,
    MAX_MESSAGE_LENGTH,
    at_least,
    duration,
    finite,
    lease_token,
    number,
    queue_name,
    required_str,
    short_str,
    utf8_size,
)

LOG_LEVELS = ("info", "warn", "error")
DEFAULT_WAIT_MS = 30_000


class JobCommand(Command):
    """A command about one job, named by `id`, with an optional lease `token`."""

    id: Checked[str] = ABSENT
    token: Checked[str | None] = None

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        self.token = lease_token(self.token, "token")


class AddLog(JobCommand, tag="AddLog"):
    """Append a log line to a job (at most MAX_LOG_LINE_BYTES bytes of UTF-8: a longer one
    is refused, not cut, so the client knows its line was not kept as sent)."""

    message: Checked[str] = ABSENT
    level: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.message, str):
            raise CommandError("message must be a string")
        # Each character is at least one byte: a huge message is refused without encoding it.
        if len(self.message) > MAX_LOG_LINE_BYTES or utf8_size(self.message) > MAX_LOG_LINE_BYTES:
            raise CommandError(f"message too long (max {MAX_LOG_LINE_BYTES} bytes of UTF-8)")
        level = "info" if self.level is None else self.level
        if level not in LOG_LEVELS:
            raise CommandError("level must be one of info, warn, error")
        self.level = level


def log_index(value: Any, field: str) -> int | None:
    """Read an optional inclusive log index (negative counts from the end)."""
    return None if value is None else math.trunc(finite(value, field))


class GetLogs(JobCommand, tag="GetLogs"):
    """Read a job's log lines, optionally from `start` to `end` (inclusive)."""

    start: Checked[int | None] = None
    end: Checked[int | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.start = log_index(self.start, "start")
        self.end = log_index(self.end, "end")


class ClearLogs(JobCommand, tag="ClearLogs"):
    """Clear a job's log, keeping the newest `keepLogs` lines."""

    keepLogs: Checked[float] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.keepLogs is None:
            self.keepLogs = 0
            return
        try:
            keep = number(self.keepLogs, "keepLogs")
        except CommandError:
            raise CommandError("keepLogs must be a number") from None
        if keep != keep:  # NaN
            raise CommandError("keepLogs must be a number")
        self.keepLogs = 0 if keep <= 0 else (keep if math.isinf(keep) else math.floor(keep))


def lease_duration(value: Any) -> float | int | None:
    """Read a lease duration: omitted keeps the current TTL; otherwise any finite number."""
    return None if value is None else finite(value, "duration")


class ExtendLock(JobCommand, tag="ExtendLock"):
    """Renew a job's lease for `duration` ms from now (≤ 0 ends it now)."""

    duration: Checked[float | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.duration = lease_duration(self.duration)


class ExtendLocks(Command, tag="ExtendLocks"):
    """ExtendLock for many jobs (positional arrays); one bad duration fails all of them."""

    ids: Checked[list[str]] = ABSENT
    tokens: Checked[list[str | None]] = ABSENT
    durations: Checked[list[float | None]] = ABSENT

    def __post_init__(self) -> None:
        if not isinstance(self.ids, list) or not all(isinstance(i, str) for i in self.ids):
            raise CommandError("ids must be an array of strings")
        count = len(self.ids)
        tokens = [None] * count if self.tokens is None else self.tokens
        durations = [None] * count if self.durations is None else self.durations
        if not isinstance(tokens, list) or len(tokens) != count:
            raise CommandError("tokens must be an array as long as ids")
        if not isinstance(durations, list) or len(durations) != count:
            raise CommandError("durations must be an array as long as ids")
        checked = []
        for index, value in enumerate(durations):
            try:
                checked.append(lease_duration(value))
            except CommandError as exc:
                raise CommandError(f"durations[{index}]: {exc}") from None
        self.tokens = [lease_token(token, "tokens[]") for token in tokens]
        self.durations = checked


class ChangeDelay(JobCommand, tag="ChangeDelay"):
    """Run a queued (or active) job `delay` ms from now; negative means ready at once."""

    delay: Checked[float] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.delay is None:
            raise CommandError("delay is required")
        self.delay = duration(self.delay, "delay")


class MoveToDelayed(ChangeDelay, tag="MoveToDelayed"):
    """Put an active job back, to run `delay` ms from now."""


class MoveToWait(JobCommand, tag="MoveToWait"):
    """Move a job to waiting, whatever state it is in (active, delayed, failed)."""


class Promote(JobCommand, tag="Promote"):
    """Make a delayed job ready now."""


class Cancel(JobCommand, tag="Cancel"):
    """Remove a job that has not started."""


class Discard(JobCommand, tag="Discard"):
    """Fail a queued or active job at once, without retries."""


class GetProgress(JobCommand, tag="GetProgress"):
    """Read an active job's progress."""


class PromoteJobs(Command, tag="PromoteJobs"):
    """Make the delayed jobs of a queue ready now (all, or the first `count`)."""

    queue: Checked[str] = ABSENT
    count: Checked[int | None] = None

    def __post_init__(self) -> None:
        self.queue = queue_name(self.queue)
        if self.count is not None:
            self.count = math.floor(at_least(finite(self.count, "count"), 0, "count"))


class ChangePriority(JobCommand, tag="ChangePriority"):
    """Change a queued job's priority (validated like PUSH's `priority`)."""

    priority: Checked[float] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.priority is None:
            raise CommandError("priority is required")
        self.priority = finite(self.priority, "priority")


class Update(JobCommand, tag="Update"):
    """Replace a job's data."""

    data: FromRaw[bytes] = NO_DATA

    def __post_init__(self) -> None:
        super().__post_init__()
        self.data = job_data(self.data)


class Progress(JobCommand, tag="Progress"):
    """Report an active job's progress (0..100, clamped) with an optional message."""

    progress: Checked[float] = ABSENT
    message: Checked[str | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.progress is None:
            raise CommandError("progress is required")
        self.progress = min(max(finite(self.progress, "progress"), 0), 100)
        self.message = short_str(self.message, "message", MAX_MESSAGE_LENGTH)


class WaitJob(JobCommand, tag="WaitJob"):
    """Wait (at most `timeout` ms, default 30 s) for a job to complete."""

    timeout: Checked[float] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        wait = optional_finite(self.timeout, "timeout")
        self.timeout = DEFAULT_WAIT_MS if wait is None else at_least(wait, 0, "timeout")


class SetWebhookEnabled(Command, tag="SetWebhookEnabled"):
    """Turn a webhook on or off without deleting it."""

    id: Checked[str] = ABSENT
    enabled: Checked[bool] = ABSENT

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        if not isinstance(self.enabled, bool):
            raise CommandError("enabled must be a boolean")


class CompactMemory(Command, tag="CompactMemory"):
    """Release what the engine can: stale heap and timer entries, empty queues."""


LIFECYCLE_COMMANDS: tuple[type[msgspec.Struct], ...] = (
    AddLog,
    GetLogs,
    ClearLogs,
    ExtendLock,
    ExtendLocks,
    ChangeDelay,
    MoveToDelayed,
    MoveToWait,
    Promote,
    PromoteJobs,
    ChangePriority,
    Update,
    Progress,
    GetProgress,
    Cancel,
    Discard,
    WaitJob,
    SetWebhookEnabled,
    CompactMemory,
)
