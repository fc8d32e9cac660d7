"""`Requester`: calls on a pool of connections, each with a timeout, replies decoded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._connection import Call, Deadlines, Pool, wait_call
from ._wire import decode_reply

_DEFAULT: Any = object()


class Requester:
    """What a Job, Queue or Worker calls the broker through: one pool and a default timeout
    (seconds) applied to every call."""

    def __init__(self, pool: Pool, timeout: float, deadlines: Deadlines | None = None) -> None:
        self.pool = pool
        self.timeout = timeout
        self.deadlines = deadlines

    async def raw(
        self,
        message: dict[str, Any],
        *,
        idempotent: bool = False,
        timeout: float | None = _DEFAULT,
        on_orphan: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """Send one command (a dict with `cmd`) and return its reply's bytes."""
        call = Call(message, idempotent=idempotent, on_orphan=on_orphan)
        limit = self.timeout if timeout is _DEFAULT else timeout
        return await wait_call(self.pool, call, limit, self.deadlines)

    async def ask(
        self,
        name: str,
        fields: dict[str, Any],
        *,
        idempotent: bool = False,
        timeout: float | None = _DEFAULT,
    ) -> dict[str, Any]:
        """Send command `name` with `fields`; returns the reply as a dict, raises
        ServerError when the broker says `ok: false`."""
        fields["cmd"] = name
        payload = await self.raw(fields, idempotent=idempotent, timeout=timeout)
        return decode_reply(payload, name)
