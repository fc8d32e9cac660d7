"""Settling checks: which activation a job id and token name (ACK, FAIL, and every command
that acts on an active job). Functions over EngineState; they only read it.
"""

from __future__ import annotations

from broker.engine import errors
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import ACTIVE, Job


def active_job(state: EngineState, job_id: str, token: str | None) -> Job:
    """The active job `job_id`, if `token` may settle it; else the command's error."""
    job = state.jobs.get(job_id)
    if job is None or job.state != ACTIVE:
        raise errors.not_processing(job_id)
    if job.lock_token is not None and token is None:
        raise errors.token_required(job_id)
    if token is not None and token != job.lock_token:
        # A token, when given, must be the current lease's: a stale one (its lease expired
        # and the job was pulled again) must not settle someone else's delivery.
        raise errors.token_invalid(job_id)
    return job


def is_late(state: EngineState, job_id: str, token: str | None) -> bool:
    """Whether this settles an activation that its processing timeout already finalised."""
    job = state.jobs.get(job_id)
    if job is None or not job.late_open or job.state == ACTIVE:
        return False
    return token is None or token == job.late_token


def leased(state: EngineState, job_id: str, token: str | None) -> Job | None:
    """The active leased job `job_id` whose lease `token` names (any token when None)."""
    job = state.jobs.get(job_id)
    if job is None or job.state != ACTIVE or job.lock_token is None:
        return None
    if token is not None and token != job.lock_token:
        return None
    return job
