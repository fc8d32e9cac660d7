"""The commit pipeline (broker/engine/runtime/commits.py): a pass's replies wait for its commit,
a pass the database could not take is retried until it is stored whole, and a pass that changed only
records (settings, crons, webhooks, a large command's parts) is stored too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from broker.clock import Clock
from broker.engine.core import Engine
from broker.engine.runtime import startup
from broker.engine.runtime.commits import CommitPipeline
from broker.engine.runtime.fanout import Fanout
from broker.events import EventBus
from protocol import decode_command
from protocol.bulk import SLICED_ITEMS
from store import StoreUnavailable
from store.memory import MemoryStore
from tests.support.app import EPOCH_MS


class Client:
    """A session that keeps its replies and notes in `log` when they are sent."""

    full = False  # never holds its commands back (ReplySink.full)
    closed = False

    def __init__(self, outbox: set[Any], log: list[str], name: str) -> None:
        self.outbox = outbox
        self.log = log
        self.name = name
        self.staged: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []

    def stage_reply(self, reply: dict[str, Any], req_id: object) -> None:
        """Keep the reply as it would go on the wire."""
        self.staged.append(msgspec.msgpack.decode(msgspec.msgpack.encode(reply)))
        self.outbox.add(self)

    def send_staged(self) -> None:
        """The pass is stored: the replies go."""
        self.take_staged()()

    def take_staged(self) -> Callable[[], None]:
        """Detach the staged replies; the result sends them."""
        staged, self.staged = self.staged, []

        def send() -> None:
            self.sent += staged
            self.log.append(f"reply {self.name}")

        return send

    def notify_room(self, callback: Callable[[Any], None]) -> None:
        """Never full: nothing to notify."""


class FlakyStore(MemoryStore):
    """A memory store whose database is unreachable for its first `failures` commits."""

    def __init__(self, log: list[str], failures: int, *, threaded: bool) -> None:
        super().__init__()
        self.log = log
        self.failures = failures
        self.commit_in_thread = threaded

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Fail while failures are left, else commit (and note it)."""
        if self.failures:
            self.failures -= 1
            self.log.append("unreachable")
            raise StoreUnavailable("connection refused")
        super().commit(*args, **kwargs)
        self.log.append("commit")


def command(**fields: Any) -> Any:
    """A command decoded from its frame, as a connection decodes it."""
    return decode_command(msgspec.msgpack.encode(fields))


async def loaded(store: MemoryStore) -> tuple[Engine, CommitPipeline]:
    """An engine restored from `store` (so it tracks its changes) and its commit pipeline."""
    engine = Engine()
    await startup.load(engine, store, EPOCH_MS, 100)
    fanout = Fanout(engine.state, Clock(EPOCH_MS), EventBus())
    return engine, CommitPipeline(store, engine.state, engine.stored, fanout, lambda: None)


def run(engine: Engine, client: Client, **fields: Any) -> None:
    """Run one command in the current pass."""
    engine.execute(client, command(**fields), EPOCH_MS)


async def commit_pass(pipeline: CommitPipeline) -> None:
    """Commit the pass and send its replies, as the actor does (on the loop or threaded)."""
    if pipeline.threaded:
        pipeline.launch()
        await pipeline.settle()
    else:
        pipeline.commit()
        await pipeline.store_withheld()
        pipeline.fanout.send_replies()


@pytest.mark.parametrize("threaded", [False, True], ids=["on the loop", "threaded"])
async def test_a_pass_the_database_refused_is_retried_until_stored_whole(
    threaded: bool, autojump_clock: Any
) -> None:
    log: list[str] = []
    store = FlakyStore(log, failures=3, threaded=threaded)
    engine, pipeline = await loaded(store)
    client = Client(pipeline.fanout.outbox, log, "a")
    run(engine, client, cmd="PUSH", queue="q", data=1)
    run(engine, client, cmd="Pause", queue="q")
    run(engine, client, cmd="Cron", name="c", queue="q", data=1, repeatEvery=60_000)
    await commit_pass(pipeline)
    # Each refusal kept the writes; the reply went only after the one commit that stored them.
    assert log == ["unreachable"] * 3 + ["commit", "reply a"]
    assert [reply["ok"] for reply in client.sent] == [True, True, True]
    assert pipeline.withheld is None
    # Nothing of the pass was lost: a broker restarted on the store has the job, the paused
    # queue and the cron.
    restarted, _ = await loaded(store)
    asking = Client(set(), [], "b")
    run(restarted, asking, cmd="GetJobCounts", queue="q")
    run(restarted, asking, cmd="IsPaused", queue="q")
    run(restarted, asking, cmd="CronList")
    counts, paused, crons = asking.staged
    assert counts["counts"]["paused"] == 1  # the job, in its paused queue
    assert paused["paused"] is True
    assert [cron["name"] for cron in crons["crons"]] == ["c"]


async def test_threaded_passes_are_released_in_commit_order() -> None:
    log: list[str] = []
    store = FlakyStore(log, failures=0, threaded=True)
    engine, pipeline = await loaded(store)
    outbox = pipeline.fanout.outbox
    first, second = Client(outbox, log, "1"), Client(outbox, log, "2")
    run(engine, first, cmd="PUSH", queue="q", data=1)
    pipeline.launch()  # the first pass's commit is in flight...
    run(engine, second, cmd="PUSH", queue="q", data=2)  # ...while the next pass runs
    await pipeline.settle()
    assert log == ["commit", "reply 1"]  # the second pass's reply waits for its own commit
    assert len(second.staged) == 1
    pipeline.launch()
    await pipeline.settle()
    assert log == ["commit", "reply 1", "commit", "reply 2"]
    assert len(store.rows) == 2


async def test_a_threaded_pass_with_nothing_to_store_is_answered_at_once() -> None:
    log: list[str] = []
    engine, pipeline = await loaded(FlakyStore(log, failures=0, threaded=True))
    client = Client(pipeline.fanout.outbox, log, "a")
    run(engine, client, cmd="Count", queue="q")
    pipeline.launch()
    assert log == ["reply a"] and pipeline.in_flight is None


class LoggedStore(MemoryStore):
    """A memory store that notes what each commit wrote: rows, and the kinds of records."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[int, set[str]]] = []

    def commit(self, upserts: Any, deletes: Any, *, sync: bool, records: Any = (),
               record_deletes: Any = ()) -> None:  # fmt: skip
        """Commit, then note it."""
        super().commit(upserts, deletes, sync=sync, records=records, record_deletes=record_deletes)
        kinds = {record.kind for record in records} | {kind for kind, _ in record_deletes}
        self.written.append((len(upserts) + len(deletes), kinds))


RECORDS_ONLY = {
    "queue settings": ([{"cmd": "Pause", "queue": q} for q in "ab"], "queue"),
    "a cron": (
        [{"cmd": "Cron", "name": n, "queue": "q", "repeatEvery": 60_000} for n in "ab"],
        "cron",
    ),
    "a webhook": (
        [{"cmd": "AddWebhook", "url": "https://example.com/h", "events": ["*"]}] * 2,
        "webhook",
    ),
    # Checked in slices, one pass each, each slice's items stored as a part.
    "a large push's checked items": (
        [{"cmd": "PUSHB", "queue": "q", "jobs": [{"data": n} for n in range(3 * SLICED_ITEMS)]}],
        "bulk-part",
    ),
}


@pytest.mark.parametrize(("changes", "kind"), RECORDS_ONLY.values(), ids=list(RECORDS_ONLY))
async def test_passes_that_change_only_records_are_stored(
    changes: list[dict[str, Any]], kind: str
) -> None:
    # No job changed: the pipeline finds the changes in each component's `unstored` (stored.py),
    # after every commit (the second pass's after the first one's writes were taken).
    store = LoggedStore()
    engine, pipeline = await loaded(store)
    client = Client(pipeline.fanout.outbox, [], "a")
    for change in changes:
        run(engine, client, **change)
        pipeline.commit()
    for _ in range(3):  # a large command checks its items in the passes that follow
        if engine.bulks.running:
            engine.bulks.advance(EPOCH_MS)
        pipeline.commit()
    assert store.written.count((0, {kind})) >= 2, store.written
