"""Cron commands: named schedules that push a job each time they fire."""

from __future__ import annotations

import msgspec

from .commands import Command, optional_finite
from .errors import CommandError
from .fields import ABSENT, Checked, FromRaw
from .jobspec import BAD_JOB_NAME, MAX_JOB_NAME, hoist_name, job_payload
from .values import (
    duration,
    flag,
    integer,
    optional_str,
    queue_name,
    required_str,
)

NULL_DATA = b"\xc0"


class CronUpsert(Command, tag="Cron"):
    """Create or replace the cron `name`: a `schedule` (cron pattern) or `repeatEvery` ms."""

    name: Checked[str] = ABSENT
    queue: Checked[str] = ABSENT
    data: FromRaw[bytes] = msgspec.Raw()
    jobName: Checked[str | None] = None
    schedule: Checked[str | None] = None
    repeatEvery: Checked[float | None] = None
    priority: Checked[float] = ABSENT
    maxLimit: Checked[float | None] = None
    timezone: Checked[str | None] = None
    uniqueKey: Checked[str | None] = None
    preventOverlap: Checked[bool] = ABSENT
    skipMissedOnRestart: Checked[bool] = ABSENT
    immediately: Checked[bool] = ABSENT

    def __post_init__(self) -> None:
        self.name = required_str(self.name, "name")
        self.queue = queue_name(self.queue)
        self._job_name_and_data()
        self.schedule = optional_str(self.schedule, "schedule")
        if self.repeatEvery is not None:
            self.repeatEvery = duration(self.repeatEvery, "repeatEvery")
            if self.repeatEvery <= 0:
                raise CommandError("repeatEvery must be greater than 0")
        if self.schedule is None and self.repeatEvery is None:
            raise CommandError("Cron job must have either schedule or repeatEvery")
        self.priority = optional_finite(self.priority, "priority") or 0
        if self.maxLimit is not None:
            self.maxLimit = integer(self.maxLimit, "maxLimit")
        self.timezone = optional_str(self.timezone, "timezone")
        self.uniqueKey = optional_str(self.uniqueKey, "uniqueKey")
        self.preventOverlap = self.preventOverlap is None or flag(
            self.preventOverlap, "preventOverlap"
        )
        self.skipMissedOnRestart = self.skipMissedOnRestart is None or flag(
            self.skipMissedOnRestart, "skipMissedOnRestart"
        )
        self.immediately = flag(self.immediately, "immediately")

    def _job_name_and_data(self) -> None:
        """The name of the jobs the cron pushes: `jobName` (protocol v3 clients send it beside
        `data`), else an older client's `data.name` (moved out of the data, as PUSH does), else
        None (the cron's own name). The reference's rule and text for a bad one."""
        raw, payload = job_payload(self.data, NULL_DATA)
        name = self.jobName
        if name is None:
            name, raw = hoist_name(raw, payload)
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= MAX_JOB_NAME):
            raise CommandError(BAD_JOB_NAME)
        self.jobName = name
        self.data = raw


class CronName(Command):
    """A cron command naming one cron."""

    name: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.name = required_str(self.name, "name")


class CronGet(CronName, tag="CronGet"):
    """Read one cron."""


class CronDelete(CronName, tag="CronDelete"):
    """Delete one cron (jobs it already pushed stay)."""


class CronList(Command, tag="CronList"):
    """List every cron."""


CRON_COMMANDS: tuple[type[msgspec.Struct], ...] = (CronUpsert, CronGet, CronDelete, CronList)
