"""The broker's configuration: every default in one place."""

from __future__ import annotations

import os

import attrs

DB_FILE = "trioq.db"


@attrs.frozen
class Config:
    """What `trioq serve` runs with."""

    host: str = "127.0.0.1"
    port: int = 6789
    http_port: int = 6790
    memory: bool = False
    data_dir: str = "data"
    auth_tokens: frozenset[str] = frozenset()
    keep_completed: int = 10_000
    keep_failed: int = 10_000
    keep_completed_s: float = 7 * 86_400
    keep_failed_s: float = 7 * 86_400
    shutdown_grace_s: float = 5.0
    allow_private_webhooks: bool = False
    webhook_retry_s: float = 1.0

    @property
    def db_path(self) -> str:
        """The SQLite file inside the data directory."""
        return os.path.join(self.data_dir, DB_FILE)
