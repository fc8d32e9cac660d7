"""Large PUSHB, ACKB and PUSHF, worked through in slices (the rules: bulk.py).

Each checks with the rules and error texts of the one-pass command (jobs.py, flows.py,
protocol/commands.py), only in slices, and applies in slices. Slice sizes are set for about
5 ms of work on the 2-core machine of the measurements, SQLite commit included: a fresh
client's connect + Ping takes four or five turns of Trio's scheduler (accept, the read hub,
the connection's task), and the actor runs one pass in each of them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from functools import partial
from typing import Any, Protocol

import msgspec

from broker.engine import errors
from broker.engine.components.bulk import Bulk, Reply, encoded, raw_array, raw_values
from broker.engine.errors import EngineError
from broker.engine.rules.admission import check_group_room, check_id_reuse, check_repeat, find_cycle
from broker.engine.rules.leases import active_job, is_late
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.model import ACTIVE, Job, job_from_push
from protocol import CommandError
from protocol.bulk import NIL, given
from protocol.commands import PushItem, decode_items, raw_or_none
from protocol.flows import MAX_FLOW_BYTES, FlowJob, FlowNode, check_node, read_nodes
from protocol.values import lease_token


class PushChecks(Protocol):
    """What a PushBulk uses of JobCommands (jobs.py), which starts it."""

    state: EngineState

    def check_dependencies(self, depends_on: Iterable[str], batch_ids: Container[str]) -> None:
        """Every dependency is held, completed, or a customId of the batch."""

    def check_held_replace(self, queue: str, key: str, named: Callable[[str], bool]) -> None:
        """A dedup replace of the job holding `key` drops no job others wait for (the
        batch's items up to the replacing one among them: `named(id)`)."""

    def add_batch(self, queue: str, items: list[PushItem], now: float) -> list[str]:
        """Add checked items in order; the id each stands for."""


class FlowChecks(Protocol):
    """What a FlowBulk uses of Flows (flows.py), which starts it."""

    def check_edges(self, node: FlowJob, graph: dict[str, FlowJob]) -> None:
        """A node's dependencies exist and its parent and children point at each other."""


_encode = msgspec.msgpack.Encoder().encode
_split = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
_read_ids = msgspec.msgpack.Decoder(list[str]).decode
_read_any = msgspec.msgpack.Decoder().decode
_read_str = msgspec.msgpack.Decoder(str).decode
_read_ack_part = msgspec.msgpack.Decoder(tuple[list[str], list[msgspec.Raw], list[Any]]).decode
_read_flow = msgspec.msgpack.Decoder(list[FlowNode]).decode


class GroupRoom:
    """groupMaxSize of a batch read in slices (admission.check_group_room's rule): per group,
    the items that could first overflow it, whatever the group holds when the checks end."""

    def __init__(self) -> None:
        self.adding: dict[str, int] = {}
        # group -> [(slack, index, cap)]: the items whose slack (cap - items of the group
        # ahead - 1) is below every earlier one's; an item fails once the group holds more
        # jobs than its slack, so the first failing item is among these.
        self.tightest: dict[str, list[tuple[int, int, int]]] = {}

    def note(self, index: int, group: str, cap: Any) -> None:
        """Item `index` adds a job to `group` (of at most `cap` not started, if a cap)."""
        ahead = self.adding.get(group, 0)
        self.adding[group] = ahead + 1
        if cap is None:
            return
        slack = cap - ahead - 1
        tightest = self.tightest.setdefault(group, [])
        if not tightest or slack < tightest[-1][0]:
            tightest.append((slack, index, cap))

    def check(self, state: EngineState, queue: str) -> None:
        """Refuse the batch if some item would overflow its group as things are now."""
        held = state.queues.get(queue)
        for group, tightest in self.tightest.items():
            pending = held.group_pending.get(group, 0) if held is not None else 0
            for slack, index, cap in tightest:
                if pending > slack:
                    raise EngineError(f"jobs[{index}]: Group {group} is full (groupMaxSize {cap})")


class PushBulk(Bulk):
    """A PUSHB of more than SLICED_ITEMS jobs. Checks: the item array is split (one pass),
    the items decoded and checked on their own, then against each other and the state
    (dependencies, dedup replace), then cycles and group room. Applies: `add_batch` on each
    slice of items, in order; the reply's ids are encoded slice by slice."""

    kind = "pushb"
    CHECK_SLICE = 1_000  # ~3 us an item: decoded, with its checks
    APPLY_SLICE = 500  # ~5 us an item (built, indexed, its row encoded), ~6 us to store it

    def __init__(
        self, jobs: PushChecks, session: ReplySink | None, req_id: object, queue: str,
        array: msgspec.Raw,
    ) -> None:  # fmt: skip
        super().__init__(session, req_id)
        self.jobs = jobs
        self.queue = queue
        self.array = array  # the items, raw (what the record stores)
        self.raw: list[msgspec.Raw] | None = None  # the same, split
        self.items: list[Any] = []  # decoded (each let go of once applied)
        self.keyed: list[int] = []  # items with checks against the others or the state
        self.cross = 0  # how many of those are checked
        self.batch_ids: dict[str, int] = {}  # customId -> its first item
        self.first_keys: dict[str, tuple[int, str | None]] = {}  # uniqueKey -> first item
        self.waiting_on: dict[str, list[str]] = {}  # id -> customIds of items depending on it
        self.first_naming: dict[str, int] = {}  # id -> the first item naming it in dependsOn
        self.edges: dict[str, Any] = {}  # customId -> its dependsOn (the cycle check)
        self.groups = GroupRoom()
        self.chunks: list[bytes] = []  # the reply's ids, slice by slice

    @classmethod
    def resumed(cls, jobs: PushChecks, body: bytes, parts: list[bytes], at: int) -> PushBulk:
        """The bulk of a stored record (its items in its parts), applied up to `at`."""
        bulk = cls(jobs, None, None, _read_str(body), NIL)
        bulk.raw = [item for part in parts for item in _split(part)]
        bulk.position = at
        return bulk

    def body(self) -> bytes:
        """The queue (the items are in the parts the checks kept)."""
        return _encode(self.queue)

    def check(self, state: EngineState, now: float) -> bool:
        """One slice of checks (see the class docstring)."""
        if self.raw is None:
            self.raw = _split(self.array)  # one C call: ~15 ms for 200,000 items
            return False
        if len(self.items) < len(self.raw):
            self._check_items(now)
            return False
        if self.cross < len(self.keyed):
            self._check_across()
            return False
        cycle = find_cycle(self.edges)
        if cycle is not None:
            index = self.batch_ids[cycle[0]]
            raise EngineError(f"jobs[{index}]: Dependency cycle: {' -> '.join(cycle)}")
        self.groups.check(state, self.queue)
        # Within --max-queues (checked at the commit point).
        state.queues.admit((self.queue,), state.now)
        return True

    def _check_items(self, now: float) -> None:
        """Decode the next slice of items and check what each can be checked for alone."""
        assert self.raw is not None
        start = len(self.items)
        raw = self.raw[start : start + self.CHECK_SLICE]
        items = decode_items(raw, start)
        self.items += items
        self.keep(raw_values(raw))  # what a restart needs of this slice
        jobs = self.jobs.state.jobs
        for index, item in enumerate(items, start):
            if not item.optionsGiven and item.customId is None:
                continue  # a plain job: nothing to check
            custom_id = item.customId
            depends_on = item.dependsOn or ()
            try:
                if custom_id is not None:
                    if custom_id in depends_on:
                        raise errors.self_dependency(custom_id)
                    check_id_reuse(self.jobs.state, custom_id)
                    self.batch_ids.setdefault(custom_id, index)
                    if depends_on:
                        self.edges[custom_id] = depends_on
                check_repeat(item.repeat, now)
            except EngineError as exc:
                raise EngineError(f"jobs[{index}]: {exc}") from None
            for dep in depends_on:
                self.waiting_on.setdefault(dep, []).append(custom_id or "?")
                self.first_naming.setdefault(dep, index)
            key = item.uniqueKey
            replace = key is not None and item.dedup["replace"]
            if depends_on or replace:
                self.keyed.append(index)
            if key is not None:
                self.first_keys.setdefault(key, (index, custom_id))
            group = item.groupId
            if group is not None and not (custom_id is not None and custom_id in jobs):
                self.groups.note(index, group, item.groupMaxSize)

    def _check_across(self) -> None:
        """Check the next slice of items against the whole batch and the state: their
        dependencies exist, and a dedup replace drops no job that others wait for."""
        keyed = self.keyed[self.cross : self.cross + self.CHECK_SLICE]
        self.cross += len(keyed)
        for index in keyed:
            item = self.items[index]
            try:
                self.jobs.check_dependencies(item.dependsOn or (), self.batch_ids)
                key = item.uniqueKey
                if key is None or not item.dedup["replace"]:
                    continue
                first, custom_id = self.first_keys[key]
                if first >= index:  # no earlier item has the key: it replaces a held job
                    self.jobs.check_held_replace(self.queue, key, partial(self._named, index))
                elif custom_id is not None and self.waiting_on.get(custom_id):
                    raise errors.replace_blocked(custom_id)
            except EngineError as exc:
                raise EngineError(f"jobs[{index}]: {exc}") from None

    def _named(self, upto: int, job_id: str) -> bool:
        """Whether an item at most `upto` names `job_id` in its dependsOn."""
        return self.first_naming.get(job_id, upto + 1) <= upto

    def apply(self, state: EngineState, now: float) -> bool:
        """Add the next slice of items."""
        assert self.raw is not None
        start = self.position
        end = min(start + self.APPLY_SLICE, len(self.raw))
        if self.items:
            items = self.items[start:end]
            self.items[start:end] = [None] * (end - start)  # let go of them
        else:  # resumed: checked before the restart
            items = decode_items(self.raw[start:end], start)
        self.chunks.append(encoded(self.jobs.add_batch(self.queue, items, now)))
        self.position = end
        return end == len(self.raw)

    def answer(self) -> Reply:
        """`{ok, ids}`, as a one-pass PUSHB answers."""
        return {"ok": True, "ids": raw_array(self.chunks)}


class AckBulk(Bulk):
    """An ACKB of more than SLICED_ITEMS ids. Checks: the ids, results and tokens are read (a
    pass each), then each position as ACKB checks it (its result and token, then its job:
    active and its token right, or a late settle, ignored). Applies: each slice's jobs that
    are still the activation it checked complete (`complete_many`); the others are ignored and
    reported, as a late settle is. A resumed one completes the jobs still active under the
    token given (or without a lease when none was)."""

    kind = "ackb"
    CHECK_SLICE = 1_000  # ~2 us a position (a leased job's checks)
    APPLY_SLICE = 250  # ~20 us a leased job (its own `complete`), ~5 us a plain one

    def __init__(
        self, session: ReplySink | None, req_id: object, ids: msgspec.Raw,
        results: msgspec.Raw, tokens: msgspec.Raw,
    ) -> None:  # fmt: skip
        super().__init__(session, req_id)
        self.raw = (ids, results, tokens)
        self.ids: list[str] | None = None
        self.results: list[msgspec.Raw] | None = None
        self.tokens: list[Any] | None = None
        self.read = 0  # how many of the three lists are read
        self.values: list[bytes | None] = []  # each position's result, checked
        self.settling: list[Job | None] = []  # each position's job (None: ignored)
        self.activations: list[Any] = []  # and which activation of it was checked
        self.seen: set[str] = set()
        self.ignored: list[int] = []

    @classmethod
    def resumed(cls, body: bytes, parts: list[bytes], at: int) -> AckBulk:
        """The bulk of a stored record (its positions in its parts), applied up to `at`."""
        bulk = cls(None, None, NIL, NIL, NIL)
        bulk.ids, bulk.results, bulk.tokens = [], [], []
        for part in parts:
            ids, results, tokens = _read_ack_part(part)
            bulk.ids += ids
            bulk.results += results
            bulk.tokens += tokens
        bulk.read = 3
        bulk.position = at
        return bulk

    def body(self) -> bytes:
        """Nothing (the positions are in the parts the checks kept)."""
        return _encode(None)

    def _read_next(self) -> None:
        """Read one of the three lists (each a pass of its own)."""
        ids_raw, results_raw, tokens_raw = self.raw
        step = self.read
        self.read += 1
        if step == 0:
            try:
                self.ids = _read_ids(ids_raw)
            except msgspec.ValidationError:
                raise CommandError("ids must be an array of strings") from None
        elif step == 1 and given(results_raw):
            try:
                self.results = _split(results_raw)
            except msgspec.ValidationError:
                raise CommandError("results must be an array") from None
            if len(self.results) != len(self.ids or ()):
                raise CommandError("ACKB results length must match ids length")
        elif step == 2 and given(tokens_raw):
            tokens = _read_any(tokens_raw)
            if not isinstance(tokens, list) or len(tokens) != len(self.ids or ()):
                raise CommandError("ACKB tokens length must match ids length")
            self.tokens = tokens

    def _position(self, index: int) -> tuple[Any, str | None]:
        """Position `index`'s result and token, read as ACKB reads them."""
        result = raw_or_none(self.results[index], "results[]") if self.results else None
        token = lease_token(self.tokens[index], "tokens[]") if self.tokens else None
        return result, token

    def check(self, state: EngineState, now: float) -> bool:
        """One slice of checks (see the class docstring)."""
        if self.read < 3:
            self._read_next()
            return False
        ids = self.ids
        assert ids is not None
        start = len(self.settling)
        end = min(start + self.CHECK_SLICE, len(ids))
        jobs = state.jobs
        for index in range(start, end):
            job_id = ids[index]
            result, token = self._position(index)
            self.values.append(result)
            job: Job | None = jobs.get(job_id)
            if (
                job is None
                or job.state != ACTIVE
                or token is not None
                or job.lock_token is not None
            ):
                job = None if is_late(state, job_id, token) else active_job(state, job_id, token)
            if job_id in self.seen:  # a repeated id: its first position settles the job
                job = None
            self.seen.add(job_id)
            self.settling.append(job)
            self.activations.append(None if job is None else (job.started_at, job.lock_token))
        results = self.results[start:end] if self.results else [NIL] * (end - start)
        tokens = self.tokens[start:end] if self.tokens else [None] * (end - start)
        self.keep(_encode((ids[start:end], results, tokens)))
        return end == len(ids)

    def apply(self, state: EngineState, now: float) -> bool:
        """Complete the next slice's jobs that are still the activation checked."""
        assert self.ids is not None
        start = self.position
        end = min(start + self.APPLY_SLICE, len(self.ids))
        completing: list[Job] = []
        results: list[Any] = []
        jobs = state.jobs
        for index in range(start, end):
            job: Job | None
            if self.settling:
                job = self.settling[index]
                self.settling[index] = None
                result = self.values[index]
                current = (
                    job is not None
                    and jobs.get(job.id) is job
                    and job.state == ACTIVE
                    and (job.started_at, job.lock_token) == self.activations[index]
                )
            else:  # resumed: checked before the restart, so only the job's state counts
                result, token = self._position(index)
                job = jobs.get(self.ids[index])
                current = job is not None and job.state == ACTIVE and token == job.lock_token
            if current and job is not None:
                completing.append(job)
                results.append(result)
            else:
                self.ignored.append(index)
        state.complete_many(completing, results, now)
        self.position = end
        return end == len(self.ids)

    def answer(self) -> Reply:
        """`{ok}`, with the ignored ids and their positions when there are any."""
        if not self.ignored:
            return {"ok": True}
        assert self.ids is not None
        ids = self.ids
        ignored = self.ignored
        return {
            "ok": True,
            "data": {"ignoredIds": [ids[index] for index in ignored], "ignoredIndices": ignored},
        }


class FlowBulk(Bulk):
    """A PUSHF of more than SLICED_ITEMS jobs. Checks: the jobs are read and checked on their
    own (ids new and unique), then their edges, then cycles and group room. Applies: adds the
    jobs in slices, each job before the jobs it depends on (a parent before its children), so
    a child that runs and fails at once finds the parent its failure policy acts on."""

    kind = "pushf"
    CHECK_SLICE = 500  # ~5 us a job: its options decoded and checked
    APPLY_SLICE = 250  # ~12 us a job: built, added, its snapshot and row encoded

    def __init__(
        self, flows: FlowChecks, session: ReplySink | None, req_id: object, array: msgspec.Raw
    ) -> None:
        super().__init__(session, req_id)
        self.flows = flows
        self.array = array  # the jobs, raw (what the record stores)
        self.nodes: list[FlowNode] | None = None  # the same, read
        self.graph: dict[str, FlowJob] = {}  # in input order
        self.checked: list[FlowJob] = []
        self.data_bytes = 0
        self.edges_checked = 0
        self.order: list[int] | None = None  # the input positions, in the order they are added
        self.snapshots: list[bytes] = []  # each job as added, by input position

    @classmethod
    def resumed(cls, flows: FlowChecks, body: bytes, parts: list[bytes], at: int) -> FlowBulk:
        """The bulk of a stored record (its jobs in its parts), applied up to `at`."""
        bulk = cls(flows, None, None, NIL)
        bulk.nodes = [node for part in parts for node in _read_flow(part)]
        bulk.snapshots = [b""] * len(bulk.nodes)
        bulk.position = at
        return bulk

    def body(self) -> bytes:
        """Nothing (the jobs are in the parts the checks kept)."""
        return _encode(None)

    def _read_nodes(self) -> None:
        """Read the job array (one pass: ~3 ms for 10,000 jobs), with PUSHF's error texts."""
        self.nodes = read_nodes(self.array)
        self.snapshots = [b""] * len(self.nodes)

    def _read_slice(self) -> None:
        """Read and check the next slice of jobs on their own."""
        assert self.nodes is not None
        start = len(self.checked)
        nodes = self.nodes[start : start + self.CHECK_SLICE]
        for index, node in enumerate(nodes, start):
            job = check_node(index, node)
            self.data_bytes += len(job.input.data)
            if self.data_bytes > MAX_FLOW_BYTES:
                raise CommandError("flow data too large (max 64MB in all)")
            self.checked.append(job)
        if not self.applying:
            self.keep(_encode(nodes))

    def check(self, state: EngineState, now: float) -> bool:
        """One slice of checks (see the class docstring)."""
        if self.nodes is None:
            self._read_nodes()
            return False
        if len(self.checked) < len(self.nodes):
            self._read_slice()
            if len(self.checked) == len(self.nodes):
                self._check_ids(state)
            return False
        if self.edges_checked < len(self.checked):
            start = self.edges_checked
            self.edges_checked = min(start + self.CHECK_SLICE, len(self.checked))
            for job in self.checked[start : self.edges_checked]:
                self.flows.check_edges(job, self.graph)
            return False
        edges = {job_id: job.input.dependsOn or () for job_id, job in self.graph.items()}
        cycle = find_cycle(edges)
        if cycle is not None:
            raise EngineError(f"flow graph has a cycle through {cycle[-1]}")
        by_queue: dict[str, list[Any]] = {}
        for job in self.checked:
            by_queue.setdefault(job.queue, []).append(job.input)
        for queue, items in by_queue.items():
            check_group_room(state, queue, items, batch=True)
        state.queues.admit(by_queue, state.now)  # within --max-queues (checked at the commit point)
        self.order = dependents_first(self.checked)
        return True

    def _check_ids(self, state: EngineState) -> None:
        """Ids are unique in the flow and new to the broker (as Flows checks them)."""
        graph = self.graph
        for job in self.checked:
            if job.id in graph:
                raise EngineError(f"duplicate flow job id: {job.id}")
            if job.id in state.jobs:
                raise EngineError(f"flow job id already exists: {job.id}")
            check_id_reuse(state, job.id)
            graph[job.id] = job

    def apply(self, state: EngineState, now: float) -> bool:
        """Add the next slice of jobs."""
        assert self.nodes is not None
        if self.order is None:  # resumed: check the stored jobs' fields again (they pass)
            self._read_slice()
            if len(self.checked) == len(self.nodes):
                self.order = dependents_first(self.checked)
            return False
        start = self.position
        end = min(start + self.APPLY_SLICE, len(self.order))
        for index in self.order[start:end]:
            node = self.checked[index]
            job = job_from_push(node.input, node.queue, node.id, None, now)
            state.add(job, now)
            self.snapshots[index] = _encode(job.to_wire_with_state())
        self.position = end
        return end == len(self.order)

    def answer(self) -> Reply:
        """`{ok, data: {jobs}}`: each job as it was added, in input order (as PUSHF)."""
        return {"ok": True, "data": {"jobs": raw_values(self.snapshots)}}


def dependents_first(jobs: list[FlowJob]) -> list[int]:
    """The positions of `jobs` ordered so that each comes before every job of the list it
    depends on (an iterative depth-first walk: dependencies first, reversed)."""
    position = {job.id: index for index, job in enumerate(jobs)}
    order: list[int] = []
    seen = [False] * len(jobs)
    for root in range(len(jobs)):
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(jobs[root].input.dependsOn or ()))]
        while stack:
            index, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                order.append(index)
                continue
            found = position.get(dep)
            if found is not None and not seen[found]:
                seen[found] = True
                stack.append((found, iter(jobs[found].input.dependsOn or ())))
    order.reverse()
    return order
