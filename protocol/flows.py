"""Flow commands: PUSHF (a whole graph at once) and the legacy parent/child commands."""

from __future__ import annotations

from typing import Any

import msgspec

from .commands import Command, PushItem, decode_items
from .errors import CommandError
from .values import queue_name, required_str

MAX_FLOW_JOBS = 10_000
MAX_FLOW_BYTES = 64 * 1024 * 1024
POLICIES = (
    "failParentOnFailure",
    "removeDependencyOnFailure",
    "ignoreDependencyOnFailure",
    "continueParentOnFailure",
)


class FlowNode(msgspec.Struct):
    """One job of a PUSHF graph as it arrives: its final id, its queue, its options raw."""

    id: Any = None
    queue: Any = None
    input: msgspec.Raw = msgspec.Raw()


class FlowJob(msgspec.Struct):
    """One validated job of a PUSHF graph."""

    id: str
    queue: str
    input: PushItem


def check_node(index: int, node: FlowNode) -> FlowJob:
    """Validate one node: id, queue, and its options exactly like a PUSHB item."""
    prefix = f"jobs[{index}]"
    if not isinstance(node.id, str) or not node.id:
        raise CommandError(f"{prefix}.id must be a non-empty string")
    if ":" in node.id:
        raise CommandError(f"{prefix}.id must not contain ':'")
    try:
        queue = queue_name(node.queue)
    except CommandError as exc:
        raise CommandError(f"{prefix}: {exc}") from None
    if not node.input:
        raise CommandError(f"{prefix}.input is required")
    [item] = decode_items([node.input], first_index=index)
    chosen = [name for name in POLICIES if getattr(item, name)]
    if len(chosen) > 1:
        raise CommandError(f"{prefix}: conflicting failure policies: {', '.join(chosen)}")
    return FlowJob(node.id, queue, item)


class PushFlow(Command, tag="PUSHF"):
    """Commit a fully resolved flow graph atomically (the graph rules live in the engine)."""

    jobs: list[FlowNode] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, list) or not self.jobs:
            raise CommandError("jobs must be a non-empty array")
        if len(self.jobs) > MAX_FLOW_JOBS:
            raise CommandError(f"a flow holds at most {MAX_FLOW_JOBS} jobs")
        checked = [check_node(index, node) for index, node in enumerate(self.jobs)]
        if sum(len(job.input.data) for job in checked) > MAX_FLOW_BYTES:
            raise CommandError("flow data too large (max 64MB in all)")
        self.jobs = checked  # type: ignore[assignment]


class UpdateParent(Command, tag="UpdateParent"):
    """Legacy flows: attach an already pushed child to its parent."""

    childId: Any = None
    parentId: Any = None

    def __post_init__(self) -> None:
        self.childId = required_str(self.childId, "childId")
        self.parentId = required_str(self.parentId, "parentId")


class ParentQuery(Command):
    """A query about a parent job's children."""

    id: Any = None

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")


class GetChildrenValues(ParentQuery, tag="GetChildrenValues"):
    """The results of a parent's completed children, keyed `<queue>:<childId>`."""


class GetFailedChildrenValues(ParentQuery, tag="GetFailedChildrenValues"):
    """The errors of children that failed under continueParentOnFailure."""


class GetIgnoredChildrenFailures(ParentQuery, tag="GetIgnoredChildrenFailures"):
    """The errors of children that failed under ignoreDependencyOnFailure."""


FLOW_COMMANDS: tuple[type[msgspec.Struct], ...] = (
    PushFlow,
    UpdateParent,
    GetChildrenValues,
    GetFailedChildrenValues,
    GetIgnoredChildrenFailures,
)
