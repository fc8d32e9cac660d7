"""Flow commands: PUSHF (a whole graph at once) and the legacy parent/child commands."""

from __future__ import annotations

import msgspec

from .bulk import SLICED_ITEMS, array_length, given
from .commands import Command, PushItem, decode_items
from .errors import CommandError, readable_validation_error
from .fields import ABSENT, Checked, checked_only
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

    id: object = None
    queue: object = None
    input: msgspec.Raw = msgspec.Raw()


_decode_nodes = msgspec.msgpack.Decoder(list[FlowNode]).decode


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
    """Commit a fully resolved flow graph atomically (the graph rules live in the engine).
    The job array is read raw (`raw_jobs`) and checked into `jobs`; more than SLICED_ITEMS
    jobs make it `large`: `jobs` is empty and `raw_jobs` kept, for the engine to read and
    check in slices (protocol/bulk.py)."""

    raw_jobs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="jobs")
    large: bool = False  # set here: what a client sends is overwritten
    jobs: Checked[list[FlowJob]] = checked_only("jobs")

    def __post_init__(self) -> None:
        count = array_length(self.raw_jobs)
        if count is None and given(self.raw_jobs):
            raise CommandError("jobs must be an array")
        if not count:
            raise CommandError("jobs must be a non-empty array")
        if count > MAX_FLOW_JOBS:
            raise CommandError(f"a flow holds at most {MAX_FLOW_JOBS} jobs")
        self.large = count > SLICED_ITEMS
        if self.large:
            self.jobs = []
            return
        checked = [check_node(index, node) for index, node in enumerate(read_nodes(self.raw_jobs))]
        if sum(len(job.input.data) for job in checked) > MAX_FLOW_BYTES:
            raise CommandError("flow data too large (max 64MB in all)")
        self.jobs = checked


def read_nodes(array: msgspec.Raw | bytes) -> list[FlowNode]:
    """A PUSHF's raw job array, read (not checked), with the whole decode's error texts."""
    try:
        return _decode_nodes(array)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("`$[", "`$.jobs[")
        raise CommandError(readable_validation_error(text)) from None


class UpdateParent(Command, tag="UpdateParent"):
    """Legacy flows: attach an already pushed child to its parent."""

    childId: Checked[str] = ABSENT
    parentId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.childId = required_str(self.childId, "childId")
        self.parentId = required_str(self.parentId, "parentId")


class ParentQuery(Command):
    """A query about a parent job's children."""

    id: Checked[str] = ABSENT

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
