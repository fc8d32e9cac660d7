"""The broker's configuration: every default in one place."""

from __future__ import annotations

import attrs


@attrs.frozen
class Config:
    """What `trioq serve` runs with."""

    host: str = "127.0.0.1"
    port: int = 6789
    http_port: int = 6790
    memory: bool = True
    auth_tokens: frozenset[str] = frozenset()
    keep_completed: int = 10_000
    keep_failed: int = 10_000
    shutdown_grace_s: float = 5.0
