"""Cron commands: named schedules that push a job each time they fire."""

from __future__ import annotations

from typing import Any

import msgspec

from .commands import Command, optional_finite
from .errors import CommandError
from .jobspec import JS_UNDEFINED, check_payload
from .values import (
    MAX_DATA_BYTES,
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
        raw = bytes(self.data)
        if not raw or raw == JS_UNDEFINED:
            raw = NULL_DATA
        if len(raw) > MAX_DATA_BYTES:
            raise CommandError("Job data too large (max 10MB)")
        check_payload(raw, "data")
        self.data = raw  # type: ignore[assignment]  # normalised: plain bytes
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
