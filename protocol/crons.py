"""Cron commands: named schedules that push a job each time they fire."""

from __future__ import annotations

from typing import Any

import msgspec

from .commands import Command, optional_finite
from .errors import CommandError
from .jobspec import job_data
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

    name: Any = None
    queue: Any = None
    data: msgspec.Raw = msgspec.Raw()
    schedule: Any = None
    repeatEvery: Any = None
    priority: Any = None
    maxLimit: Any = None
    timezone: Any = None
    uniqueKey: Any = None
    preventOverlap: Any = None
    skipMissedOnRestart: Any = None
    immediately: Any = None

    def __post_init__(self) -> None:
        self.name = required_str(self.name, "name")
        self.queue = queue_name(self.queue)
        self.data = job_data(self.data, NULL_DATA)  # type: ignore[assignment]  # plain bytes
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


class CronName(Command):
    """A cron command naming one cron."""

    name: Any = None

    def __post_init__(self) -> None:
        self.name = required_str(self.name, "name")


class CronGet(CronName, tag="CronGet"):
    """Read one cron."""


class CronDelete(CronName, tag="CronDelete"):
    """Delete one cron (jobs it already pushed stay)."""


class CronList(Command, tag="CronList"):
    """List every cron."""


CRON_COMMANDS: tuple[type[msgspec.Struct], ...] = (CronUpsert, CronGet, CronDelete, CronList)
