"""Large commands worked through in slices (broker/engine/components/bulk.py): other connections are
served between the slices, the command stays all or nothing for its client, even across a
stop or a failed commit, and its reply follows the commit of its last slice."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.engine.components.bulk import BULK, BULK_AT, BULK_PART
from broker.engine.components.bulk_jobs import AckBulk, FlowBulk, PushBulk
from broker.engine.core import Engine
from broker.engine.runtime.actor import Batch, Disconnect, EngineActor
from broker.engine.state.engine_state import EngineState
from protocol import decode_command
from store import MemoryStore, Store, StoreError, open_sqlite
from tests.support.app import EPOCH_MS
from tests.support.stores import StoreFactory

BIG = 2_500  # items of a large batch (more than SLICED_ITEMS: sliced)
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def command(**fields: Any) -> Any:
    """A command decoded from its frame, as a connection decodes it."""
    return decode_command(_encode(fields))


class Sink:
    """A session that notes each reply in `log` (with its own name) when it is sent, that is
    once its pass was committed; replies decoded from what would go on the wire."""

    def __init__(self, actor: EngineActor, name: str, log: list[tuple[str, Any]]) -> None:
        self.closed = False
        self.full = False  # its client reads every reply (see ReplySink.full)
        self.name = name
        self.log = log
        self.replies: list[dict[str, Any]] = []
        self.answered = trio.Event()  # set once a reply was sent
        self._staged: list[dict[str, Any]] = []
        self._outbox = actor.outbox

    def stage_reply(self, reply: dict[str, Any], req_id: Any) -> None:
        self._staged.append(_decode(_encode({**reply, "reqId": req_id})))
        self._outbox.add(self)

    def send_staged(self) -> None:
        for reply in self._staged:
            self.replies.append(reply)
            self.log.append((self.name, reply))
            self.answered.set()
        self._staged = []

    def take_staged(self) -> Callable[[], None]:
        staged, self._staged = self._staged, []

        def send() -> None:
            self._staged = staged
            self.send_staged()

        return send


class LoggedStore(MemoryStore):
    """A memory store that notes every commit in `log` (rows written, records written and
    deleted), and can be told to fail a commit holding a record of some kind."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.log = log
        self.fail_with: str | None = None  # a record kind: the commit writing one fails

    def commit(self, upserts: Any, deletes: Any, *, sync: bool, records: Any = (),
               record_deletes: Any = ()) -> None:  # fmt: skip
        if self.fail_with is not None and any(r.kind == self.fail_with for r in records):
            raise StoreError("disk full (a test's)")
        super().commit(upserts, deletes, sync=sync, records=records, record_deletes=record_deletes)
        self.log.append(("commit", (len(self.rows), {r.kind for r in records}, record_deletes)))


@asynccontextmanager
async def running(actor: EngineActor) -> AsyncIterator[list[int]]:
    """Run `actor` in the background; yields the list of commands each pass ran."""
    passes: list[int] = []
    actor.on_pass = passes.append
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        yield passes
        actor.inbox.close()


async def after_passes(passes: list[int], count: int) -> None:
    """Let the actor run `count` more passes."""
    target = len(passes) + count
    while len(passes) < target:
        await trio.lowlevel.checkpoint()


def big_pushb(queue: str = "q", count: int = BIG, **extra: Any) -> Any:
    jobs = [{"data": n, **extra} for n in range(count)]
    return command(cmd="PUSHB", queue=queue, jobs=jobs, reqId="big")


def counts_seen(log: list[tuple[str, Any]], name: str) -> list[int]:
    """The counts the replies sent to `name` gave, in order."""
    return [reply["count"] for who, reply in log if who == name and "count" in reply]


def order(log: list[tuple[str, Any]]) -> list[str]:
    """`session:reqId` of each reply sent, in order (commits left out)."""
    return [f"{who}:{reply.get('reqId')}" for who, reply in log if who != "commit"]


async def watch_counts(actor: EngineActor, watcher: Sink, until: Sink, queue: str = "q") -> None:
    """`watcher` asks Count after every pass until `until` got one more reply."""
    before = len(until.replies)
    while len(until.replies) == before:
        await actor.submit(Batch(watcher, [command(cmd="Count", queue=queue, reqId="count")]))
        await trio.lowlevel.checkpoint()
    await trio.testing.wait_all_tasks_blocked()


# -- other connections between the slices ------------------------------------------------------


async def test_a_large_pushb_lets_other_connections_count_its_jobs_arriving_slice_by_slice() -> (
    None
):
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    pusher, watcher = Sink(actor, "pusher", log), Sink(actor, "watcher", log)
    big = big_pushb()
    assert big.large  # its items left for the engine
    async with running(actor) as passes:
        await actor.submit(Batch(pusher, [big]))
        await watch_counts(actor, watcher, until=pusher)
    [reply] = pusher.replies
    assert reply["ok"] is True and len(reply["ids"]) == BIG == len(set(reply["ids"]))
    seen = counts_seen(log, "watcher")
    # Answered while the batch was checked (nothing yet), then as its slices were applied.
    assert seen[0] == 0 and any(0 < count < BIG for count in seen), seen
    assert len(passes) > BIG // PushBulk.APPLY_SLICE


async def test_the_pushing_connections_later_commands_wait_for_its_large_batch() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    pusher, other = Sink(actor, "pusher", log), Sink(actor, "other", log)
    count = command(cmd="Count", queue="q", reqId="after")
    async with running(actor) as passes:
        await actor.submit(Batch(pusher, [big_pushb(), count]))
        await after_passes(passes, 2)
        await actor.submit(Batch(pusher, [command(cmd="Count", queue="q", reqId="later")]))
        await actor.submit(Disconnect(pusher))  # type: ignore[arg-type]
        await actor.submit(Batch(other, [command(cmd="Count", queue="q", reqId="other")]))
        await trio.testing.wait_all_tasks_blocked()
    # Its own: in order, after the batch's reply, seeing every job; another's: meanwhile.
    assert order(log) == ["other:other", "pusher:big", "pusher:after", "pusher:later"]
    assert [reply.get("count") for reply in pusher.replies[1:]] == [BIG, BIG]


async def test_another_connections_batch_of_several_commands_runs_whole_between_slices() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    pusher, other = Sink(actor, "pusher", log), Sink(actor, "other", log)
    counts = [command(cmd="Count", queue="q", reqId=name) for name in ("first", "second")]
    async with running(actor) as passes:
        await actor.submit(Batch(pusher, [big_pushb()]))
        await after_passes(passes, 1)  # the large command is in progress
        await actor.submit(Batch(other, counts))
        await trio.testing.wait_all_tasks_blocked()
    # Only the large command's own connection waits for its reply.
    assert order(log) == ["other:first", "other:second", "pusher:big"]


async def test_a_large_ackb_completes_its_jobs_slice_by_slice_while_others_are_served() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    worker, watcher = Sink(actor, "worker", log), Sink(actor, "watcher", log)
    ids, tokens = await push_and_lease(actor, worker, BIG)
    ack = command(cmd="ACKB", ids=ids, tokens=tokens, reqId="ack")
    assert ack.large
    async with running(actor):
        await actor.submit(Batch(worker, [ack]))
        while worker.replies[-1].get("reqId") != "ack":
            counts = command(cmd="GetJobCounts", queue="q", reqId="counts")
            await actor.submit(Batch(watcher, [counts]))
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
    assert worker.replies[-1] == {"ok": True, "reqId": "ack"}
    completed = [reply["counts"]["completed"] for who, reply in log if who == "watcher"]
    assert completed[0] == 0 and any(0 < done < BIG for done in completed), completed
    assert actor.engine.state.queues["q"].counts["completed"] == BIG


async def push_and_lease(actor: EngineActor, sink: Sink, count: int) -> tuple[list[str], list]:
    """Push `count` jobs and lease them all (PULLB 1000 at a time); their ids and tokens."""
    ids: list[str] = []
    tokens: list[str] = []
    async with running(actor):
        for start in range(0, count, 1000):
            jobs = [{"data": n} for n in range(start, min(start + 1000, count))]
            await actor.submit(Batch(sink, [command(cmd="PUSHB", queue="q", jobs=jobs)]))
        await trio.testing.wait_all_tasks_blocked()
        while len(ids) < count:
            pull = command(cmd="PULLB", queue="q", count=1000, owner="w", lockTtl=60_000)
            await actor.submit(Batch(sink, [pull]))
            await trio.testing.wait_all_tasks_blocked()
            ids += [job["id"] for job in sink.replies[-1]["jobs"]]
            tokens += sink.replies[-1]["tokens"]
    actor.inbox, actor._receive = trio.open_memory_channel[Any](256)  # a fresh inbox
    return ids, tokens


async def test_an_ackb_reports_a_job_whose_lease_ran_out_before_its_slice_as_ignored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    worker = Sink(actor, "worker", log)
    ids, tokens = await push_and_lease(actor, worker, BIG)
    ack = command(cmd="ACKB", ids=ids, tokens=tokens, reqId="ack")
    async with running(actor):
        await actor.submit(Batch(worker, [ack]))
        while not actor.engine.bulks.running[0].applying:  # checked: past the commit point
            await trio.lowlevel.checkpoint()
        job = actor.engine.state.jobs[ids[-1]]
        actor.engine.state.renew_lease(job, actor.clock.now_ms(), 0)  # its lease ends now
        await trio.testing.wait_all_tasks_blocked()
    reply = worker.replies[-1]
    assert reply["data"] == {"ignoredIds": [ids[-1]], "ignoredIndices": [BIG - 1]}
    assert actor.engine.state.jobs[ids[-1]].state == "waiting"  # requeued, not completed


async def test_a_large_drain_leaves_a_job_a_worker_started_meanwhile() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    admin, worker = Sink(actor, "admin", log), Sink(actor, "worker", log)
    async with running(actor) as passes:
        await actor.submit(Batch(admin, [big_pushb()]))
        await trio.testing.wait_all_tasks_blocked()
        await actor.submit(Batch(admin, [command(cmd="Drain", queue="q", reqId="drain")]))
        await after_passes(passes, 3)  # the jobs are chosen, not yet removed
        await actor.submit(Batch(worker, [command(cmd="PULL", queue="q", reqId="pull")]))
        await trio.testing.wait_all_tasks_blocked()
    pulled = worker.replies[0]["job"]["id"]
    assert order(log)[-2:] == ["worker:pull", "admin:drain"]
    assert admin.replies[-1]["count"] == BIG - 1
    assert list(actor.engine.state.jobs) == [pulled]


@pytest.mark.parametrize(
    ("message", "left", "reply"),
    [
        ({"cmd": "Clean", "queue": "q", "grace": 0, "limit": 2 * BIG}, 0, {"count": BIG}),
        ({"cmd": "Clean", "queue": "q", "grace": 0, "limit": BIG - 2}, 2, {"count": BIG - 2}),
        ({"cmd": "Obliterate", "queue": "q"}, 0, {}),
    ],
)
async def test_a_large_clean_or_obliterate_removes_in_slices_while_others_are_served(
    message: dict[str, Any], left: int, reply: dict[str, Any]
) -> None:
    log: list[tuple[str, Any]] = []
    store = LoggedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    admin, watcher = Sink(actor, "admin", log), Sink(actor, "watcher", log)
    async with running(actor):
        await actor.submit(Batch(admin, [big_pushb()]))
        await trio.testing.wait_all_tasks_blocked()
        ids = admin.replies[0]["ids"]
        await actor.submit(Batch(admin, [command(**message, reqId="admin")]))
        while admin.replies[-1].get("reqId") != "admin":
            await actor.submit(Batch(watcher, [command(cmd="Count", queue="q", reqId="c")]))
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
    seen = counts_seen(log, "watcher")
    assert any(left < count < BIG for count in seen), seen
    answer = admin.replies[-1]
    assert {key: answer[key] for key in reply} == reply
    if "ids" in answer:  # Clean names what it removed, the oldest first
        assert answer["ids"] == ids[: len(answer["ids"])]
    assert len(store.rows) == left == len(actor.engine.state.jobs)
    obliterated = message["cmd"] == "Obliterate"
    assert ("q" in actor.engine.state.queues) is not obliterated  # and its settings with it


async def test_a_large_retry_dlq_and_purge_dlq_work_in_slices() -> None:
    log: list[tuple[str, Any]] = []
    engine = Engine(EngineState(keep_failed=10 * BIG))
    actor = EngineActor(engine, Clock(EPOCH_MS), LoggedStore(log))
    worker, watcher = Sink(actor, "worker", log), Sink(actor, "watcher", log)
    ids, tokens = await push_and_lease(actor, worker, BIG)
    fails = [command(cmd="FAIL", id=i, token=t, unrecoverable=True)
             for i, t in zip(ids, tokens, strict=True)]  # fmt: skip
    async with running(actor):
        await actor.submit(Batch(worker, fails))
        await trio.testing.wait_all_tasks_blocked()
        assert actor.engine.state.queues["q"].counts["failed"] == BIG
        await actor.submit(Batch(worker, [command(cmd="RetryDlq", queue="q", reqId="retry")]))
        while worker.replies[-1].get("reqId") != "retry":
            await actor.submit(Batch(watcher, [command(cmd="Count", queue="q", reqId="c")]))
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
    assert worker.replies[-1] == {"ok": True, "count": BIG, "reqId": "retry"}
    assert any(0 < count < BIG for count in counts_seen(log, "watcher"))


async def test_a_large_pushf_adds_each_job_before_those_it_waits_for() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    pusher, watcher = Sink(actor, "pusher", log), Sink(actor, "watcher", log)
    chain = [flow_node(n, BIG) for n in range(BIG)]  # n0 waits for n1, ... (n0 the root)
    flow = command(cmd="PUSHF", jobs=chain, reqId="flow")
    assert flow.large
    async with running(actor):
        await actor.submit(Batch(pusher, [flow]))
        await watch_counts(actor, watcher, until=pusher, queue="f")
    [reply] = pusher.replies
    jobs = reply["data"]["jobs"]
    assert [job["id"] for job in jobs] == [f"n{n}" for n in range(BIG)]  # input order
    assert {job["state"] for job in jobs[:-1]} == {"waiting-children"}
    assert jobs[-1]["state"] == "waiting"  # the leaf: ready
    counts = actor.engine.state.queues["f"].counts
    assert (counts["waiting-children"], counts["waiting"]) == (BIG - 1, 1)
    # While the leaf (added last) did not exist, the jobs added waited for it: none was ready.
    assert all(count == 0 for count in counts_seen(log, "watcher")[:-1])


def flow_node(n: int, total: int, **options: Any) -> dict[str, Any]:
    """Job `n` of a chain of `total` in queue `f`: it waits for job n+1, its child."""
    fields: dict[str, Any] = {"data": n, **options}
    if n + 1 < total:
        fields |= {"dependsOn": [f"n{n + 1}"], "childrenIds": [f"n{n + 1}"]}
    if n:
        fields["parentId"] = f"n{n - 1}"
    return {"id": f"n{n}", "queue": "f", "input": fields}


async def test_a_large_pushf_child_failing_at_once_fails_the_parent_added_before_it() -> None:
    log: list[tuple[str, Any]] = []
    actor = EngineActor(Engine(), Clock(EPOCH_MS), LoggedStore(log))
    pusher = Sink(actor, "pusher", log)
    # Leaf first, as flow producers often list them: the leaf expires as it is added (its ttl
    # is past), and its failure must reach its parent, which therefore must be there first.
    chain = [flow_node(n, BIG) for n in range(BIG)]
    leaf = {"ttl": 1, "timestamp": EPOCH_MS - 10, "failParentOnFailure": True}
    chain[-1]["input"] |= leaf
    chain.reverse()
    async with running(actor):
        await actor.submit(Batch(pusher, [command(cmd="PUSHF", jobs=chain, reqId="flow")]))
        await trio.testing.wait_all_tasks_blocked()
    assert pusher.replies[0]["ok"] is True
    jobs = actor.engine.state.jobs
    assert (jobs[f"n{BIG - 1}"].state, jobs[f"n{BIG - 2}"].state) == ("failed", "failed")
    assert actor.engine.state.queues["f"].counts["waiting-children"] == BIG - 2


# -- all or nothing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "PUSHB", "queue": "q", "jobs": [{"data": n} for n in range(BIG)] + [{}]},
         f"jobs[{BIG}]: data is required"),
        ({"cmd": "PUSHB", "queue": "q",
          "jobs": [{"data": n, "dependsOn": ["gone"] if n == BIG - 1 else None}
                   for n in range(BIG)]},
         f"jobs[{BIG - 1}]: Dependency job not found: gone"),
        ({"cmd": "PUSHB", "queue": "q",
          "jobs": [{"data": n, "customId": f"c{n}", "dependsOn": [f"c{n ^ 1}"] if n > 9 else None}
                   for n in range(BIG)]},
         "jobs[10]: Dependency cycle: c10 -> c11 -> c10"),
        ({"cmd": "PUSHB", "queue": "q",
          "jobs": [{"data": n, "groupId": "g", "groupMaxSize": BIG - 1} for n in range(BIG)]},
         f"jobs[{BIG - 1}]: Group g is full (groupMaxSize {BIG - 1})"),
        ({"cmd": "PUSHF", "jobs": [flow_node(n, BIG) for n in range(BIG)]
          + [{"id": "n0", "queue": "f", "input": {"data": 1}}]},
         "duplicate flow job id: n0"),
        ({"cmd": "PUSHF", "jobs": [{"id": f"m{n}", "queue": "f",
                                    "input": {"data": n, "dependsOn": [f"m{(n + 1) % BIG}"]}}
                                   for n in range(BIG)]},
         "flow graph has a cycle through m0"),
    ],
)  # fmt: skip
async def test_a_large_batch_refused_by_a_check_leaves_nothing_behind(
    message: dict[str, Any], error: str
) -> None:
    log: list[tuple[str, Any]] = []
    store = LoggedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    pusher, watcher = Sink(actor, "pusher", log), Sink(actor, "watcher", log)
    big = command(**message, reqId="big")
    assert big.large
    async with running(actor):
        await actor.submit(Batch(pusher, [big]))
        await watch_counts(actor, watcher, until=pusher)
    assert pusher.replies == [{"ok": False, "error": error, "reqId": "big"}]
    assert order(log)[0] == "watcher:count"  # the checks themselves ran in slices
    assert set(counts_seen(log, "watcher")) == {0}
    assert actor.engine.state.jobs == {} and store.rows == {}
    assert store.records == {}  # the parts the checks stored are gone with them
    assert any(BULK_PART in kinds for who, (_, kinds, _) in log if who == "commit")


async def test_a_large_ackb_with_one_wrong_token_completes_nothing() -> None:
    log: list[tuple[str, Any]] = []
    store = LoggedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    worker = Sink(actor, "worker", log)
    ids, tokens = await push_and_lease(actor, worker, BIG)
    tokens[-1] = tokens[0]
    watcher = Sink(actor, "watcher", log)
    async with running(actor):
        ack = command(cmd="ACKB", ids=ids, tokens=tokens, reqId="ack")
        await actor.submit(Batch(worker, [ack]))
        await watch_counts(actor, watcher, until=worker)
    assert worker.replies[-1]["error"] == f"Invalid or expired lock token for job {ids[-1]}"
    sent = order(log)
    assert sent.index("watcher:count") < sent.index("worker:ack")  # checked in slices
    assert actor.engine.state.queues["q"].counts["active"] == BIG
    assert store.records == {}


async def test_a_large_batch_whose_client_left_during_its_checks_is_dropped() -> None:
    log: list[tuple[str, Any]] = []
    store = LoggedStore(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    pusher = Sink(actor, "pusher", log)
    async with running(actor) as passes:
        await actor.submit(Batch(pusher, [big_pushb()]))
        await after_passes(passes, 1)
        pusher.closed = True
        await actor.submit(Disconnect(pusher))  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
    assert actor.engine.state.jobs == {} and store.records == {} and pusher.replies == []


class ThreadedStore(LoggedStore):
    """A LoggedStore committed on a worker thread, the next pass running meanwhile (as
    PostgreSQL with --pg-commit-thread)."""

    commit_in_thread = True


@pytest.mark.parametrize("store_kind", [LoggedStore, ThreadedStore])
async def test_the_reply_of_a_large_batch_follows_the_commit_of_its_last_slice(
    store_kind: type[LoggedStore],
) -> None:
    log: list[tuple[str, Any]] = []
    store = store_kind(log)
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    pusher = Sink(actor, "pusher", log)
    async with running(actor):
        await actor.submit(Batch(pusher, [big_pushb()]))
        await pusher.answered.wait()  # (a threaded commit runs beside the Trio tasks)
    replied = [who for who, _ in log].index("pusher")
    rows, _, deleted = log[replied - 1][1]
    assert rows == BIG and (BULK, pusher_key(deleted)) in deleted  # every row, and the end
    commits = [entry for who, entry in log[:replied] if who == "commit"]
    assert [kinds for _, kinds, _ in commits].count({BULK}) == 1  # the commit point, earlier
    assert store.records == {}


def pusher_key(deleted: list[tuple[str, str]]) -> str:
    """The key of the bulk whose records `deleted` drops."""
    return next(key for kind, key in deleted if kind == BULK)


# -- stopped midway ------------------------------------------------------------------------------


async def run_until(actor: EngineActor, batch: Batch, stop: Callable[[], bool]) -> None:
    """Run `actor` on `batch` and stop it dead (no further pass, no further commit) as soon
    as `stop()` holds after a pass, as a kill -9 would."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await trio.testing.wait_all_tasks_blocked()
        actor.on_pass = lambda _: stop() and nursery.cancel_scope.cancel()
        await actor.submit(batch)
        await trio.sleep_forever()


def current_bulk(actor: EngineActor) -> Any:
    return actor.engine.bulks.running[0] if actor.engine.bulks.running else None


async def restarted(store: Store, clock: Clock | None = None) -> EngineActor:
    """A new actor on `store` (its clock going on from `clock`'s), restored and run until
    idle: what it resumed is finished."""
    actor = EngineActor(Engine(), clock or Clock(EPOCH_MS), store)
    await actor.restore()
    async with running(actor):
        await trio.testing.wait_all_tasks_blocked()
    return actor


@pytest.mark.parametrize("when", ["checking", "applying"])
async def test_a_large_pushb_stopped_midway_is_all_or_nothing_after_a_restart(
    store_factory: StoreFactory, when: str
) -> None:
    store = store_factory()
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    sink = Sink(actor, "pusher", [])

    def stop() -> bool:
        bulk = current_bulk(actor)
        if when == "checking":
            return bulk is not None and bulk.parts >= 2
        return bulk is not None and bulk.position >= 2 * PushBulk.APPLY_SLICE

    await run_until(actor, Batch(sink, [big_pushb()]), stop)
    assert sink.replies == []  # stopped before its reply
    stored = len(store.load())
    assert stored == (0 if when == "checking" else 2 * PushBulk.APPLY_SLICE)
    store.close()
    store = store_factory()
    try:
        after = await restarted(store)
        jobs = after.engine.state.jobs
        assert len(jobs) == (0 if when == "checking" else BIG)
        assert len(store.load()) == len(jobs) and store.load_records() == []
        if jobs:
            assert sorted(job.data for job in jobs.values()) == sorted(
                _encode(n) for n in range(BIG)
            )
    finally:
        store.close()


@pytest.mark.parametrize(("kind", "count"), [("ackb", BIG), ("drain", 0), ("retry", BIG)])
async def test_other_large_commands_stopped_after_their_commit_point_finish_after_a_restart(
    tmp_path: Path, kind: str, count: int
) -> None:
    path = str(tmp_path / "trioq.db")
    store = open_sqlite(path)
    actor = EngineActor(Engine(EngineState(keep_failed=10 * BIG)), Clock(EPOCH_MS), store)
    sink = Sink(actor, "client", [])
    ids, tokens = await push_and_lease(actor, sink, BIG)
    if kind == "ackb":
        batch = Batch(sink, [command(cmd="ACKB", ids=ids, tokens=tokens)])
    elif kind == "drain":
        for job_id in ids:  # back to waiting
            actor.engine.state.requeue(actor.engine.state.jobs[job_id], EPOCH_MS)
        batch = Batch(sink, [command(cmd="Drain", queue="q")])
    else:
        fails = [command(cmd="FAIL", id=i, token=t, unrecoverable=True)
                 for i, t in zip(ids, tokens, strict=True)]  # fmt: skip
        async with running(actor):
            await actor.submit(Batch(sink, fails))
            await trio.testing.wait_all_tasks_blocked()
        actor.inbox, actor._receive = trio.open_memory_channel[Any](256)
        batch = Batch(sink, [command(cmd="RetryDlq", queue="q")])
    await run_until(actor, batch, lambda: getattr(current_bulk(actor), "position", 0) > 0)
    store.close()
    store = open_sqlite(path)
    try:
        after = await restarted(store, actor.clock)
        counts = after.engine.state.queues["q"].counts
        state = {"ackb": "completed", "drain": "waiting", "retry": "waiting"}[kind]
        assert counts[state] == count
        assert len(after.engine.state.jobs) == len(store.load()) == count
        assert [r for r in store.load_records() if r.kind.startswith(BULK)] == []
    finally:
        store.close()


@pytest.mark.parametrize("failing", [BULK, BULK_AT])
async def test_a_store_failure_during_a_large_pushb_stops_the_broker_all_or_nothing(
    failing: str,
) -> None:
    log: list[tuple[str, Any]] = []
    store = LoggedStore(log)
    store.fail_with = failing  # the commit point's commit, or the first slice's
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    pusher = Sink(actor, "pusher", log)
    actor.inbox.send_nowait(Batch(pusher, [big_pushb()]))
    with pytest.raises(StoreError):
        await actor.run()
    assert pusher.replies == []
    store.fail_with = None
    after = await restarted(store)
    assert len(after.engine.state.jobs) == (0 if failing == BULK else BIG)
    assert {r.kind for r in store.load_records()} == set()


async def test_an_unknown_or_incomplete_stored_bulk_is_dropped_at_restart() -> None:
    store = MemoryStore()
    actor = EngineActor(Engine(), Clock(EPOCH_MS), store)
    await run_until(actor, Batch(Sink(actor, "p", []), [big_pushb()]),
                    lambda: getattr(current_bulk(actor), "position", 0) > 0)  # fmt: skip
    key = next(key for kind, key in store.records if kind == BULK)
    store.records.pop(next(k for k in store.records if k[0] == BULK_PART))  # a part lost
    after = await restarted(store)
    assert len(after.engine.state.jobs) == PushBulk.APPLY_SLICE  # what was applied stays
    assert all(k != key and not k.startswith(key) for _, k in store.records)


def test_slices_are_small_enough_to_share_the_loop() -> None:
    # The sizes measured for about 5 ms of work a pass (bulk_jobs.py); a change is deliberate.
    assert (PushBulk.CHECK_SLICE, PushBulk.APPLY_SLICE) == (1_000, 500)
    assert (AckBulk.CHECK_SLICE, AckBulk.APPLY_SLICE) == (1_000, 250)
    assert (FlowBulk.CHECK_SLICE, FlowBulk.APPLY_SLICE) == (500, 250)
