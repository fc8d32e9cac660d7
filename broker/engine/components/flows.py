"""Flows: PUSHF graphs committed at once, and the legacy parent/child commands.

PUSHF graph rules, all checked before anything changes: ids are unique and new; every
`dependsOn` names a job of the graph or one the broker knows, never the job itself; a child's
`parentId` names a job of the graph whose `childrenIds` lists the child and whose `dependsOn`
includes it, and every listed child points back; the `dependsOn` graph has no cycle; each
group's `groupMaxSize` holds for the whole graph. Then every job is added in the same pass, so
one transaction stores them all before any of them can be pulled.

A component that owns nothing: the jobs and their edges are EngineState's. It also answers
the legacy flow edits (MoveToWaitingChildren, RemoveChildDependency, RemoveUnprocessedChildren).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec

from broker.engine.components.bulk import BulkRunner
from broker.engine.components.bulk_jobs import FlowBulk
from broker.engine.errors import EngineError, self_dependency
from broker.engine.routing import Routes
from broker.engine.rules.admission import check_group_room, check_id_reuse, find_cycle
from broker.engine.rules.leases import active_job
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import NOT_STARTED, EngineState
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    FAILED,
    QUEUED_STATES,
    WAITING_CHILDREN,
    Job,
    job_from_push,
)
from protocol import flows as cmd
from protocol import groups as groups_cmd

Reply = dict[str, Any]


class Flows:
    """PUSHF, UpdateParent, the children queries and the legacy flow edits."""

    def __init__(self, state: EngineState, bulks: BulkRunner) -> None:
        self.state = state
        self.bulks = bulks  # a large PUSHF goes there (bulk_jobs.py)
        bulks.resume[FlowBulk.kind] = partial(FlowBulk.resumed, self)

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.PushFlow, self.push_flow)
        routes.add(cmd.UpdateParent, self.update_parent)
        routes.add(cmd.GetChildrenValues, self.get_children_values)
        routes.add(cmd.GetFailedChildrenValues, self.get_failed_children_values)
        routes.add(cmd.GetIgnoredChildrenFailures, self.get_ignored_children_failures)
        routes.add(groups_cmd.MoveToWaitingChildren, self.move_to_waiting_children)
        routes.add(groups_cmd.RemoveChildDependency, self.remove_child_dependency)
        routes.add(groups_cmd.RemoveUnprocessedChildren, self.remove_unprocessed_children)
        return routes

    def push_flow(self, session: ReplySink, command: cmd.PushFlow, now: float) -> Reply | None:
        """PUSHF: the whole graph or nothing; one snapshot per input job, in input order. A
        large one is checked and added in slices, answered once all are (bulk_jobs.py)."""
        if command.large:
            self.bulks.start(FlowBulk(self, session, command.reqId, command.raw_jobs))
            return None
        nodes = command.jobs
        self._check_graph(nodes)
        by_queue: dict[str, list[Any]] = {}
        for node in nodes:
            by_queue.setdefault(node.queue, []).append(node.input)
        for queue, items in by_queue.items():
            check_group_room(self.state, queue, items, batch=True)
        self.state.queues.admit(by_queue, self.state.now)
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
            check_id_reuse(self.state, node.id)
            graph[node.id] = node
        for node in nodes:
            self.check_edges(node, graph)
        cycle = find_cycle({job_id: node.input.dependsOn or () for job_id, node in graph.items()})
        if cycle is not None:
            raise EngineError(f"flow graph has a cycle through {cycle[-1]}")
        return graph

    def check_edges(self, node: cmd.FlowJob, graph: dict[str, cmd.FlowJob]) -> None:
        """The node's dependencies exist (in the graph or the broker) and its parent and
        children point at each other."""
        fields = node.input
        for dep in fields.dependsOn or ():
            if dep == node.id:
                raise EngineError(f"flow job cannot depend on itself: {node.id}")
            known = dep in self.state.jobs or dep in self.state.deps.done_ids
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
        if child is None:
            raise EngineError(f"Child job not found: {command.childId}")
        if parent is None:
            raise EngineError(f"Parent job not found: {command.parentId}")
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

    def get_children_values(
        self, session: ReplySink, command: cmd.GetChildrenValues, now: float
    ) -> Reply:
        """GetChildrenValues: completed children's results, keyed `<queue>:<childId>`."""
        values = {
            f"{child.queue}:{child.id}": None if child.result is None else msgspec.Raw(child.result)
            for child in self._children(command.id)
            if child.state == COMPLETED
        }
        return {"ok": True, "data": {"values": values}}

    def get_failed_children_values(
        self, session: ReplySink, command: cmd.GetFailedChildrenValues, now: float
    ) -> Reply:
        """GetFailedChildrenValues: errors of children under continueParentOnFailure."""
        parent = self.state.jobs.get(command.id)
        return {"ok": True, "values": (parent.child_failures if parent else None) or {}}

    def get_ignored_children_failures(
        self, session: ReplySink, command: cmd.GetIgnoredChildrenFailures, now: float
    ) -> Reply:
        """GetIgnoredChildrenFailures: errors of children under ignoreDependencyOnFailure."""
        parent = self.state.jobs.get(command.id)
        return {"ok": True, "values": (parent.ignored_failures if parent else None) or {}}

    # -- legacy flow edits ---------------------------------------------------------------------

    def move_to_waiting_children(
        self, session: ReplySink, command: groups_cmd.MoveToWaitingChildren, now: float
    ) -> Reply:
        """MoveToWaitingChildren: an active job (token if leased) waits for its unfinished
        dependencies and children (those attached while it ran, by UpdateParent); with none
        left it stays active and the answer is `moved: false` (BullMQ's rule)."""
        job = self.state.jobs.get(command.id)
        if job is None or job.state != ACTIVE:
            raise EngineError("Job is not active")
        active_job(self.state, command.id, command.token)
        pending = [
            dep
            for dep in dict.fromkeys([*job.depends_on, *job.children_ids])
            if dep != job.id and not self.state.completed_once(dep)
        ]
        if not pending:
            return {"ok": True, "data": {"moved": False}}
        job.depends_on = list(dict.fromkeys([*job.depends_on, *pending]))
        self.state.wait_for_children(job, now)
        return {"ok": True, "data": {"moved": True}}

    def remove_child_dependency(
        self, session: ReplySink, command: groups_cmd.RemoveChildDependency, now: float
    ) -> Reply:
        """RemoveChildDependency: detach a not-yet-finished child from its waiting parent;
        the parent runs once nothing else is pending. `removed: false` when there was no
        such edge to drop."""
        child = self.state.jobs.get(command.id)
        if child is None:
            raise EngineError(f"Job not found: {command.id}")
        if child.parent_id is None:
            raise EngineError(f"Job {command.id} has no parent")
        parent = self.state.jobs.get(child.parent_id)
        removable = (
            parent is not None
            and parent.state == WAITING_CHILDREN
            and child.id in parent.depends_on
            and child.state in (*QUEUED_STATES, WAITING_CHILDREN, ACTIVE)
        )
        if parent is None or not removable:
            return {"ok": True, "removed": False}
        parent.children_ids = [i for i in parent.children_ids if i != child.id]
        child.parent_id = None
        self.state.touch(child)
        self.state.drop_dependency(parent, child.id, now)
        return {"ok": True, "removed": True}

    def remove_unprocessed_children(
        self, session: ReplySink, command: groups_cmd.RemoveUnprocessedChildren, now: float
    ) -> Reply:
        """RemoveUnprocessedChildren: the parent's children that have not started are removed
        (active and finished ones stay); the parent stops waiting for them."""
        parent = self.state.jobs.get(command.id)
        if parent is None:
            return {"ok": True}
        for child_id in list(parent.children_ids):
            child = self.state.jobs.get(child_id)
            if child is None or child.state not in NOT_STARTED:
                continue
            self.state.remove(child)
            if parent.state == WAITING_CHILDREN and child_id in parent.depends_on:
                self.state.drop_dependency(parent, child_id, now)
        return {"ok": True}
