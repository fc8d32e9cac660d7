"""Issue 29: walks over flow parents, children and dependents are loops, whatever the depth.

A chain of 2,000 jobs with failParentOnFailure used to recurse `fail -> child_failed -> fail`
past Python's limit (about 490 levels): the client heard "Internal server error" and the chain
was left half failed, half waiting for ever. Each test here walks a chain (or a tree) 100,000
jobs deep, far past any recursion limit, through the engine's own commands.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from broker.engine.core import Engine
from broker.engine.state.engine_state import EngineState
from broker.engine.state.records import job_from_row, job_to_row
from protocol import decode_command

DEPTH = 100_000
EPOCH_MS = 1_700_000_000_000.0


class Sink:
    """Keeps the replies, as a client would read them."""

    closed = False

    def __init__(self) -> None:
        self.replies: list[Any] = []

    def stage_reply(self, reply: Any, req_id: Any) -> None:
        self.replies.append(msgspec.msgpack.decode(msgspec.msgpack.encode(reply)))

    def send_staged(self) -> None:
        pass


def call(engine: Engine, now: float = EPOCH_MS, **command: Any) -> Any:
    """Run one command on `engine` at `now`; returns its reply."""
    sink = Sink()
    engine.execute(sink, decode_command(msgspec.msgpack.encode(command)), now)
    while not sink.replies:  # a large command: its slices, as the actor runs them (bulk.py)
        engine.bulks.advance(now)
    return sink.replies[-1]


def name(k: int) -> str:
    """The id of the job at depth `k` (0: the root). Deeper jobs sort first, so a restart
    meets the leaf before any of its parents."""
    return f"n{DEPTH - k:06d}"


def chain(depth: int = DEPTH, **options: Any) -> list[dict[str, Any]]:
    """PUSHB items of a chain: each job is the parent of the next and waits for it."""
    items = []
    for k in range(depth):
        item: dict[str, Any] = {"customId": name(k), "data": k, **options}
        if k:
            item["parentId"] = name(k - 1)
        if k < depth - 1:
            item["dependsOn"] = [name(k + 1)]
            item["childrenIds"] = [name(k + 1)]
        items.append(item)
    return items


def engine_with(items: list[dict[str, Any]], queue: str = "q") -> Engine:
    """An engine keeping every failed job, holding the pushed `items`."""
    engine = Engine(EngineState(keep_failed=2 * DEPTH))
    reply = call(engine, cmd="PUSHB", queue=queue, jobs=items)
    assert reply["ok"] is True, reply
    return engine


def fail_leaf(engine: Engine, depth: int = DEPTH, now: float = EPOCH_MS) -> Any:
    """Pull the chain's leaf (the only job ready) and fail it for good."""
    pulled = call(engine, cmd="PULL", queue="q")["job"]
    assert pulled["id"] == name(depth - 1)
    return call(engine, now, cmd="FAIL", id=pulled["id"], error="boom", unrecoverable=True)


def counts(engine: Engine, queue: str = "q") -> dict[str, int]:
    return {k: v for k, v in call(engine, cmd="GetJobCounts", queue=queue)["counts"].items() if v}


def test_failing_the_deepest_leaf_of_a_tree_100k_deep_fails_its_spine() -> None:
    # A chain with failParentOnFailure (the spine), each of whose jobs also has a second
    # child: a leaf without a failure policy, left waiting.
    items = chain(failParentOnFailure=True)
    for k, item in enumerate(items[:-1]):
        side = f"side{k:06d}"
        item["dependsOn"] = [*item["dependsOn"], side]
        item["childrenIds"] = [*item["childrenIds"], side]
        items.append({"customId": side, "data": k, "parentId": item["customId"]})
    engine = engine_with(items)
    leaf = name(DEPTH - 1)
    pulled = call(engine, cmd="PULLB", queue="q", count=1000)["jobs"]
    assert leaf in [job["id"] for job in pulled]
    for job in pulled:
        if job["id"] != leaf:
            call(engine, cmd="MoveToWait", id=job["id"])
    assert call(engine, cmd="FAIL", id=leaf, error="boom", unrecoverable=True) == {"ok": True}
    assert counts(engine) == {"failed": DEPTH, "waiting": DEPTH - 1}
    assert engine.state.observers.totals["failed"] == DEPTH
    root = call(engine, cmd="GetJob", id=name(0))["job"]
    # A parent's reason names its child and the chain's first cause (reasons quoting each
    # other all the way down would hold gigabytes).
    assert root["failedReason"] == f"Child job {name(1)} failed: boom"
    assert call(engine, cmd="GetChildrenValues", id=name(0))["data"]["values"] == {}
    assert call(engine, cmd="Obliterate", queue="q") == {"ok": True}
    assert counts(engine) == {} and not engine.state.jobs


def test_a_chain_removed_on_failure_is_removed_whole() -> None:
    engine = engine_with(chain(failParentOnFailure=True, removeOnFail=True))
    assert fail_leaf(engine) == {"ok": True}
    assert counts(engine) == {} and not engine.state.jobs
    assert call(engine, cmd="GetState", id=name(0))["state"] == "unknown"


def test_parents_released_past_their_ttl_fail_in_turn_down_a_deep_chain() -> None:
    # continueParentOnFailure releases the parent and ignoreDependencyOnFailure drops the
    # dependency (here on alternate levels); past its ttl the parent fails instead, and its
    # own policy acts on its parent, and so on: a loop through `_release`, no recursion.
    items = chain(ttl=1000)
    for k, item in enumerate(items):
        item["continueParentOnFailure" if k % 2 else "ignoreDependencyOnFailure"] = True
    engine = engine_with(items)
    later = EPOCH_MS + 5000  # every ttl has run out; no timer fired (no tick)
    assert fail_leaf(engine, now=later) == {"ok": True}
    assert counts(engine) == {"failed": DEPTH}
    for parent, key in (
        (name(0), "GetFailedChildrenValues"),
        (name(1), "GetIgnoredChildrenFailures"),
    ):
        child = name(1) if parent == name(0) else name(2)
        values = call(engine, cmd=key, id=parent)["values"]
        assert values == {f"q:{child}": "Job expired (ttl)"}, key


@pytest.mark.parametrize("depth", [3, DEPTH])
def test_a_chain_restored_with_its_leaf_past_its_ttl_fails_whole(depth: int) -> None:
    # The leaf's ttl ran out while the broker was down: the restart fails it, and the chain
    # above it with it. The leaf sorts first (restored before its parents are placed), and
    # the counts stay exact (they went negative when a policy failed a parent not yet placed).
    items = chain(depth, failParentOnFailure=True)
    items[-1]["ttl"] = 1000
    before = engine_with(items)
    rows = [job_to_row(job) for job in before.state.jobs.values()]
    after = Engine(EngineState(keep_failed=2 * DEPTH))
    stored = [job_from_row(row)[0] for row in rows]
    for _ in after.state.restore(stored, set(), EPOCH_MS + 5000):
        pass
    assert counts(after) == {"failed": depth}
    root = call(after, cmd="GetJob", id=name(0))["job"]
    assert root["failedReason"] == f"Child job {name(1)} failed: Job expired (ttl)"


def test_a_dependency_cycle_through_100k_jobs_is_refused_whole() -> None:
    items = chain()
    items[-1]["dependsOn"] = [name(0)]  # the leaf waits for the root: a ring
    engine = Engine()
    reply = call(engine, cmd="PUSHB", queue="q", jobs=items)
    assert reply["ok"] is False and reply["error"].startswith("jobs[0]: Dependency cycle: ")
    assert not engine.state.jobs
