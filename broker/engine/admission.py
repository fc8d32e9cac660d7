"""Admission checks shared by PUSH, PUSHB (jobs.py, bulk_jobs.py) and PUSHF (flows.py): group
room, dependency cycles, repeat schedules. Functions; they only read EngineState.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import EngineError
from .schedule import ScheduleError, check_pattern, first_occurrence, zone
from .state import EngineState


def check_group_room(
    state: EngineState, queue_name: str, items: list[Any], batch: bool = False
) -> None:
    """groupMaxSize admission, all or nothing: no job may take its group's pending depth
    past its cap, counting the jobs of the same batch ahead of it."""
    queue = state.queue(queue_name)
    adding: dict[str, int] = {}
    jobs = state.jobs
    for index, item in enumerate(items):
        group = item.groupId
        custom_id = getattr(item, "customId", None) or getattr(item, "jobId", None)
        if group is None or (custom_id is not None and custom_id in jobs):
            continue
        depth = queue.group_pending.get(group, 0) + adding.get(group, 0) + 1
        cap = item.groupMaxSize
        if cap is not None and depth > cap:
            prefix = f"jobs[{index}]: " if batch else ""
            raise EngineError(f"{prefix}Group {group} is full (groupMaxSize {cap})")
        adding[group] = adding.get(group, 0) + 1


def check_repeat(repeat: dict[str, Any] | None, now: float) -> None:
    """A repeat's pattern and zone must be usable, and it must have a future occurrence."""
    if repeat is None or (repeat.get("pattern") is None and repeat.get("every") is None):
        return
    try:
        if repeat.get("pattern") is not None:
            check_pattern(repeat["pattern"], repeat.get("tz"))
        elif repeat.get("tz") is not None:
            zone(repeat["tz"])
    except ScheduleError as exc:
        raise EngineError(str(exc)) from None
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
