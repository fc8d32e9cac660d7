"""`FlowProducer`: a parent job and its children (a tree, any depth) added atomically (PUSHF).

A parent runs after all its children completed and reads their results with
`job.children_values()`. The whole tree is committed in one command, before any of it can run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import msgspec

from ._job import Job
from ._options import JobOptions, wire_options
from ._queue import checked_queue_name
from ._wire import FlowReply, command, decode_typed, encode

if TYPE_CHECKING:
    from ._client import Client

PUSHF = command("PUSHF")


class FlowSpec(TypedDict):
    """One node of a flow: `{"name", "queue", "data", "opts"?, "children"?}`."""

    name: str
    queue: str
    data: Any
    opts: NotRequired[JobOptions]
    children: NotRequired[list[FlowSpec]]


@dataclass
class FlowNode:
    """A job of an added flow and the nodes of its children."""

    job: Job[Any]
    children: list[FlowNode] = field(default_factory=list)


class FlowProducer:
    """Adds flows through a client: `await trioq.FlowProducer(client).add(spec)`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def add(self, flow: FlowSpec) -> FlowNode:
        """Add the tree `flow` in one atomic command; returns it with the jobs' ids."""
        nodes: list[dict[str, Any]] = []
        root = self._plan(flow, None, nodes)
        requester = self._client.requester
        payload = await requester.raw({"cmd": PUSHF, "jobs": nodes})
        decode_typed(payload, FlowReply, PUSHF)
        return root

    def _plan(self, spec: FlowSpec, parent_id: str | None, nodes: list[dict[str, Any]]) -> FlowNode:
        """Give every node an id (children before the parent that waits for them)."""
        job_id = str(uuid.uuid4())
        queue = checked_queue_name(spec["queue"])
        children = [self._plan(child, job_id, nodes) for child in spec.get("children", [])]
        child_ids = [child.job.id for child in children]
        item: dict[str, Any] = {"name": spec["name"], "data": msgspec.Raw(encode(spec["data"]))}
        wire_options(spec.get("opts", {}), item)
        item.pop("customId", None)  # the flow gives every job its id
        if parent_id is not None:
            item["parentId"] = parent_id
        if child_ids:
            item["dependsOn"] = child_ids
            item["childrenIds"] = child_ids
        nodes.append({"id": job_id, "queue": queue, "input": item})
        job: Job[Any] = Job(self._client.requester, job_id, queue, spec["name"], spec["data"])
        job.parent_id = parent_id
        job.children_ids = child_ids
        return FlowNode(job, children)
