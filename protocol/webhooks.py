"""Webhook commands: register, remove, list (SetWebhookEnabled lives in lifecycle.py)."""

from __future__ import annotations

import msgspec

from .commands import Command
from .errors import CommandError
from .fields import ABSENT, Checked
from .values import optional_str, queue_name, required_str

MAX_URL = 2048


class AddWebhook(Command, tag="AddWebhook"):
    """POST job events to `url` (events like `job.completed`, or `*`), optionally signed."""

    url: Checked[str] = ABSENT
    events: Checked[list[str]] = ABSENT
    queue: Checked[str | None] = None
    secret: Checked[str | None] = None

    def __post_init__(self) -> None:
        if self.url is None or self.url == "":
            raise CommandError("Webhook URL is required")
        self.url = required_str(self.url, "url")
        if len(self.url) > MAX_URL:
            raise CommandError("Webhook URL too long (max 2048 characters)")
        events = self.events
        if (
            not isinstance(events, list)
            or not events
            or not all(isinstance(e, str) for e in events)
        ):
            raise CommandError("events must be a non-empty array of strings")
        self.queue = None if self.queue is None else queue_name(self.queue)
        self.secret = optional_str(self.secret, "secret")


class RemoveWebhook(Command, tag="RemoveWebhook"):
    """Delete a webhook."""

    webhookId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.webhookId = required_str(self.webhookId, "webhookId")


class ListWebhooks(Command, tag="ListWebhooks"):
    """Every webhook with its delivery counts."""


WEBHOOK_COMMANDS: tuple[type[msgspec.Struct], ...] = (AddWebhook, RemoveWebhook, ListWebhooks)
