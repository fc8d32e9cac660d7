"""The exceptions the client raises."""

from __future__ import annotations

from typing import Any


class TrioqError(Exception):
    """Base of every error this package raises."""


class ServerError(TrioqError):
    """The broker answered `ok: false`; the message is its `error` text, unchanged."""

    def __init__(self, message: str, command: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.command = command


class ConnectError(TrioqError, ConnectionError):
    """No connection to the broker could be made (refused, unreachable, bad token)."""


class AuthError(ConnectError):
    """The broker refused the token (`Invalid token`) or wants one (`Not authenticated`)."""


class ConnectionLost(TrioqError, ConnectionError):
    """The connection broke after the request was sent: the broker may or may not have acted
    on it. Requests that had not been sent yet are retried on a new connection instead."""


class Timeout(TrioqError, TimeoutError):
    """A call did not get its answer within its timeout. The connection stays usable: a late
    answer is read and dropped."""


class ClientClosed(TrioqError):
    """The client (or worker) was closed; no more calls can be made on it."""


class JobFailed(TrioqError):
    """`job.wait()` on a job that failed for good (or was removed before finishing)."""

    def __init__(self, job_id: str, state: str, reason: str | None) -> None:
        text = f"job {job_id} {state}" + (f": {reason}" if reason else "")
        super().__init__(text)
        self.job_id = job_id
        self.state = state
        self.reason = reason


class Unrecoverable(Exception):
    """Raise it from a handler to fail the job for good: no retries, straight to the DLQ."""

    def __init__(self, message: str = "", *args: Any) -> None:
        super().__init__(message, *args)
