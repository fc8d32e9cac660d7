"""Flows: PUSHF graphs committed at once, and the legacy parent/child commands.

PUSHF graph rules, all checked before anything changes: ids are unique and new; every
`dependsOn` names a job of the graph or one the broker knows, never the job itself; a child's
`parentId` names a job of the graph whose `childrenIds` lists the child and whose `dependsOn`
includes it, and every listed child points back; the `dependsOn` graph has no cycle; each
group's `groupMaxSize` holds for the whole graph. Then every job is added in the same pass, so
one transaction stores them all before any of them can be pulled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from protocol import flows as cmd

from .errors import EngineError, self_dependency
from .model import COMPLETED, FAILED, Job, job_from_push
from .sink import ReplySink
from .state import EngineState

Reply = dict[str, Any]


class FlowHandlers:
    """PUSHF, UpdateParent and the children queries (mixed into Engine)."""

    state: EngineState

    def _check_group_room(self, queue: str, items: list[Any], batch: bool = False) -> None:
        raise NotImplementedError  # provided by Engine

    def flow_handlers(self) -> dict[type, Any]:
        """Command type -> handler, for the engine's dispatch table."""
        return {
            cmd.PushFlow: self.push_flow,
            cmd.UpdateParent: self.update_parent,
            cmd.GetChildrenValues: self.get_children_values,
            cmd.GetFailedChildrenValues: self.get_failed_children_values,
            cmd.GetIgnoredChildrenFailures: self.get_ignored_children_failures,
        }

    def push_flow(self, session: ReplySink, command: cmd.PushFlow, now: float) -> Reply:
        """PUSHF: the whole graph or nothing; one snapshot per input job, in input order."""
        nodes: list[cmd.FlowJob] = command.jobs  # type: ignore[assignment]
        self._check_graph(nodes)
        by_queue: dict[str, list[Any]] = {}
        for node in nodes:
            by_queue.setdefault(node.queue, []).append(node.input)
        for queue, items in by_queue.items():
            self._check_group_room(queue, items, batch=True)
        jobs = [job_from_push(node.input, node.queue, node.id, None, now) for node in nodes]
        for job in jobs:
            self.state.add(job, now)
        return {"ok": True, "data": {"jobs": [job.to_wire_with_state() for job in jobs]}}

    def _check_graph(self, nodes: list[cmd.FlowJob]) -> dict[str, cmd.FlowJob]:
        graph: dict[str, cmd.FlowJob] = {}
        for node in nodes:
            if node.id in graph:
                raise EngineError(f"duplicate flow job id: {node.id}")
            if node.id in self.state.jobs:
                raise EngineError(f"flow job id already exists: {node.id}")
            graph[node.id] = node
        for node in nodes:
            self._check_edges(node, graph)
        cycle = find_cycle({job_id: node.input.dependsOn or () for job_id, node in graph.items()})
        if cycle is not None:
            raise EngineError(f"flow graph has a cycle through {cycle[-1]}")
        return graph

    def _check_edges(self, node: cmd.FlowJob, graph: dict[str, cmd.FlowJob]) -> None:
        fields = node.input
        for dep in fields.dependsOn or ():
            if dep == node.id:
                raise EngineError(f"flow job cannot depend on itself: {node.id}")
            known = dep in self.state.jobs or dep in self.state.done_ids
            if dep not in graph and not known:
                raise EngineError(f"flow dependency not found: {dep}")
        parent_id = fields.parentId
        if parent_id is not None:
            parent = graph.get(parent_id)
            if parent is None:
                raise EngineError(f"flow parent not found: {parent_id}")
            if node.id not in (parent.input.childrenIds or ()):
                raise EngineError(f"flow parent {parent_id} does not own child {node.id}")
            if node.id not in (parent.input.dependsOn or ()):
                raise EngineError(f"flow child is missing from dependencies: {node.id}")
        for child_id in fields.childrenIds or ():
            child = graph.get(child_id)
            if child is None:
                raise EngineError(f"flow child not found: {child_id}")
            if child.input.parentId != node.id:
                raise EngineError(f"flow child {child_id} does not point back to parent {node.id}")

    def update_parent(self, session: ReplySink, command: cmd.UpdateParent, now: float) -> Reply:
        """UpdateParent: older clients attach a child pushed with a placeholder parent."""
        child = self.state.jobs.get(command.childId)
        parent = self.state.jobs.get(command.parentId)
        if child is None or parent is None:
            raise EngineError("Failed to update parent")
        if child is parent:  # it would wait for itself (MoveToWaitingChildren)
            raise self_dependency(child.id)
        child.parent_id = parent.id
        if child.id not in parent.children_ids:
            parent.children_ids = [*parent.children_ids, child.id]
        self.state.touch(child)
        self.state.touch(parent)
        if child.state == FAILED:  # it failed before it knew its parent
            self.state.child_failed(child, child.failed_reason or "", now)
        return {"ok": True}

    def _children(self, parent_id: str) -> list[Job]:
        parent = self.state.jobs.get(parent_id)
        if parent is None:
            return []
        jobs = self.state.jobs
        return [jobs[i] for i in parent.children_ids if i in jobs]

    def get_children_values(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetChildrenValues: completed children's results, keyed `<queue>:<childId>`."""
        values = {
            f"{child.queue}:{child.id}": None if child.result is None else msgspec.Raw(child.result)
            for child in self._children(command.id)
            if child.state == COMPLETED
        }
        return {"ok": True, "data": {"values": values}}

    def get_failed_children_values(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetFailedChildrenValues: errors of children under continueParentOnFailure."""
        parent = self.state.jobs.get(command.id)
        return {"ok": True, "values": (parent.child_failures if parent else None) or {}}

    def get_ignored_children_failures(self, session: ReplySink, command: Any, now: float) -> Reply:
        """GetIgnoredChildrenFailures: errors of children under ignoreDependencyOnFailure."""
        parent = self.state.jobs.get(command.id)
        return {"ok": True, "values": (parent.ignored_failures if parent else None) or {}}


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
