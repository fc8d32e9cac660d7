"""Every user-visible error text of the engine, defined once (clients match on text)."""

from __future__ import annotations


class EngineError(Exception):
    """A command that is valid on the wire but not allowed in the current state."""


def not_processing(job_id: str) -> EngineError:
    """ACK/FAIL of a job that is not active."""
    return EngineError(f"Job not found or not in processing state: {job_id}")


def token_required(job_id: str) -> EngineError:
    """A leased job settled without its token."""
    return EngineError(f"Lock token required for job {job_id}")


def token_invalid(job_id: str) -> EngineError:
    """A token that is not the job's current lease."""
    return EngineError(f"Invalid or expired lock token for job {job_id}")


def dependency_missing(job_id: str) -> EngineError:
    """A dependsOn entry the broker does not know."""
    return EngineError(f"Dependency job not found: {job_id}")


def self_dependency(job_id: str) -> EngineError:
    """A job whose dependsOn names its own id (it could never run)."""
    return EngineError(f"Job cannot depend on itself: {job_id}")


def replace_blocked(job_id: str) -> EngineError:
    """dedup replace of a job that live jobs wait for (the reference's text)."""
    return EngineError(f"Cannot replace deduplicated job {job_id} because live jobs depend on it")


def id_still_named(job_id: str) -> EngineError:
    """A custom id reused while jobs waiting for dependencies still name its finished job."""
    return EngineError(f"Custom ID {job_id} still has unresolved dependency consumers")


JOB_NOT_FOUND = "Job not found"
NOT_AUTHENTICATED = "Not authenticated"
INVALID_TOKEN = "Invalid token"
