"""Admission checks shared by PUSH, PUSHB (jobs.py, bulk_jobs.py) and PUSHF (flows.py): group
room, dependency cycles, repeat schedules and the reuse of a finished job's custom id.
Functions; they only read EngineState.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker.engine.errors import EngineError, id_still_named
from broker.engine.rules.schedule import ScheduleError, check_pattern, first_occurrence, zone
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import WAITING_CHILDREN
from protocol.jobspec import JobFields


def check_group_room(
    state: EngineState, queue_name: str, items: Sequence[JobFields], batch: bool = False
) -> None:
    """groupMaxSize admission, all or nothing: no job may take its group's pending depth
    past its cap, counting the jobs of the same batch ahead of it."""
    queue = state.queues.get(queue_name)
    pending = queue.group_pending if queue is not None else {}
    adding: dict[str, int] = {}
    jobs = state.jobs
    for index, item in enumerate(items):
        group = item.groupId
        if group is None:  # most jobs: no group, nothing more to read
            continue
        custom_id = getattr(item, "customId", None) or getattr(item, "jobId", None)
        if custom_id is not None and custom_id in jobs:
            continue
        depth = pending.get(group, 0) + adding.get(group, 0) + 1
        cap = item.groupMaxSize
        if cap is not None and depth > cap:
            prefix = f"jobs[{index}]: " if batch else ""
            raise EngineError(f"{prefix}Group {group} has reached its maximum size of {cap}")
        adding[group] = adding.get(group, 0) + 1


def check_repeat(repeat: dict[str, Any] | None, now: float) -> None:
    """A repeat's pattern and zone must be usable, and it must have a future occurrence."""
    if repeat is None or (repeat.get("pattern") is None and repeat.get("every") is None):
        return
    try:
        zone(repeat.get("tz"))
    except ScheduleError as exc:
        raise EngineError(str(exc)) from None
    pattern = repeat.get("pattern")
    if pattern is not None:
        try:
            check_pattern(pattern, repeat.get("tz"))
        except ScheduleError:
            raise EngineError(f"Invalid repeat pattern: {pattern}") from None  # its words
    if first_occurrence(repeat, now) is None:
        raise EngineError("repeat has no future occurrence")


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A `dependsOn` cycle among `edges` (id -> the ids it waits for) as a path that starts
    and ends at the same id, or None (iterative DFS; ids outside `edges` end a path)."""
    done: set[str] = set()
    for root in edges:
        if root in done:
            continue
        path = [root]
        on_path: set[str] = {root}
        stack = [iter(edges[root])]
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                stack.pop()
                node_id = path.pop()
                on_path.discard(node_id)
                done.add(node_id)
            elif dep in on_path:
                return [*path[path.index(dep) :], dep]
            elif dep in edges and dep not in done:
                path.append(dep)
                on_path.add(dep)
                stack.append(iter(edges[dep]))
    return None


def check_id_reuse(state: EngineState, custom_id: str | None) -> None:
    """A custom id whose job completed and was forgotten (removeOnComplete, retention) may not
    name a new job while jobs still waiting for dependencies name it in `dependsOn`: one id
    would have two meanings for them (a restart, which knows only the new job, would have them
    wait for it). The reference refuses it alike."""
    if custom_id is None or custom_id not in state.deps.done_ids or custom_id in state.jobs:
        return
    jobs = state.jobs
    for waiting in state.deps.dependents.values():  # the jobs still waiting for something
        for job_id in waiting:
            job = jobs.get(job_id)
            if job is None or job.state != WAITING_CHILDREN:
                continue
            if custom_id in job.opts.depends_on:
                raise id_still_named(custom_id)
