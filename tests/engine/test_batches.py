"""PUSHB adds, PULLB claims, and ACKB settles, a batch the way PUSH, PULL and ACK one job at a time
would: PUSHB's checks and duplicates item by item; every job's state, timeline, lease, events,
metrics and minute counts, jobs with keys, groups, timeouts and leases among plain ones, and the
completed jobs' cap applied to the whole batch (in-memory connections, MockClock)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from broker.clock import Clock
from broker.node.app import App
from broker.node.config import Config
from tests.support.app import EPOCH_MS, Connect, memory_connector
from tests.support.client import FrameClient
from tests.support.engine import drain, push, state_of


async def pushed_and_pulled(client: FrameClient, *options: dict[str, object]) -> list[str]:
    """Push one job per `options` (in order), then pull them all in one PULLB."""
    ids = [await push(client, data=index, **fields) for index, fields in enumerate(options)]
    reply = await client.call("PULLB", queue="q", count=len(ids))
    assert [job["id"] for job in reply["jobs"]] == ids
    return ids


async def test_ackb_completes_plain_keyed_grouped_and_leased_jobs_alike(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    assert app.actor is not None
    events = app.actor.bus.subscribe(["job:completed"])
    plain = await push(client)
    keyed = await push(client, uniqueKey="k")
    grouped = await push(client, group={"id": "g"})
    leased_reply = await client.call("PULL", queue="q", owner="w")  # the plain job, leased
    assert leased_reply["job"]["id"] == plain
    rest = await client.call("PULLB", queue="q", count=2)
    tail = await push(client)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == tail
    ids = [keyed, plain, grouped, tail]
    reply = await client.call(
        "ACKB", ids=ids, tokens=[None, leased_reply["token"], None, None], results=[1, 2, 3, 4]
    )
    assert reply["ok"] is True and "data" not in reply
    assert [job["id"] for job in rest["jobs"]] == [keyed, grouped]
    assert [await state_of(client, job_id) for job_id in ids] == ["completed"] * 4
    results = [(await client.call("GetResult", id=job_id))["result"] for job_id in ids]
    assert results == [1, 2, 3, 4]
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["active"], counts["completed"]) == (0, 4)
    assert drain(events) == [("job:completed", job_id) for job_id in ids]
    assert (await client.call("PUSH", queue="q", data={}, uniqueKey="k"))["ok"] is True  # freed
    job = (await client.call("GetJob", id=tail))["job"]
    assert (job["progress"], job["completedAt"]) == (100, EPOCH_MS)
    assert [entry["state"] for entry in job["timeline"]] == ["waiting", "active", "completed"]


async def test_ackb_counts_every_job_in_the_totals_metrics_and_minute_counts(
    client: FrameClient, app: App
) -> None:
    await pushed_and_pulled(client, {}, {}, {"group": {"id": "g"}})
    ids = [job_id async for job_id in _active_ids(client)]
    assert (await client.call("ACKB", ids=ids))["ok"] is True
    await client.call("ACK", id=await _one_more(client))
    totals = (await client.call("Metrics"))["metrics"]
    assert totals["totalCompleted"] == 4
    per_minute = (await client.call("Metrics", queue="q", type="completed"))["data"]
    assert (per_minute["data"], per_minute["meta"]["count"]) == ([4], 4)
    assert per_minute["meta"]["prevCount"] == 4
    text = (await client.call("Prometheus"))["data"]["metrics"]
    assert re.search(r"^trioq_processing_seconds_count 4(\.0)?$", text, re.M)


async def _active_ids(client: FrameClient) -> AsyncIterator[str]:
    for job in (await client.call("GetJobs", queue="q", state="active"))["jobs"]:
        yield job["id"]


async def _one_more(client: FrameClient) -> str:
    job_id = await push(client)
    assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
    return job_id


async def test_ackb_releases_the_connection_that_pulled_the_jobs(
    app: App, connect: Connect
) -> None:
    worker, producer = await connect(), await connect()
    ids = [await push(producer) for _ in range(3)]
    await worker.call("PULLB", queue="q", count=3)
    assert (await worker.call("ACKB", ids=ids))["ok"] is True
    assert app.actor is not None
    assert app.actor.engine.state.holdings == {}
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert [await state_of(producer, job_id) for job_id in ids] == ["completed"] * 3


async def test_ackb_ignores_a_repeated_id_and_a_removed_job_and_settles_the_rest(
    client: FrameClient,
) -> None:
    first, removed, last = await pushed_and_pulled(client, {}, {"removeOnComplete": True}, {})
    reply = await client.call("ACKB", ids=[first, removed, first, last, removed])
    assert reply["ok"] is True
    assert reply["data"] == {"ignoredIds": [first, removed], "ignoredIndices": [2, 4]}
    assert [await state_of(client, job_id) for job_id in (first, removed, last)] == [
        "completed", "unknown", "completed",
    ]  # fmt: skip
    assert (await client.call("GetResult", id=last))["result"] is None


@pytest.fixture
async def keeping_two(nursery: trio.Nursery) -> AsyncIterator[FrameClient]:
    """A broker keeping 2 completed jobs."""
    config = Config(port=0, http_port=0, memory=True, keep_completed=2)
    app = App(config, clock=Clock(EPOCH_MS))
    await nursery.start(app.run)
    yield await memory_connector(app, nursery)()
    app.shutdown()


async def test_an_ackb_past_the_completed_cap_keeps_the_newest(keeping_two: FrameClient) -> None:
    done = await pushed_and_pulled(keeping_two, {})
    await keeping_two.call("ACK", id=done[0])
    ids = await pushed_and_pulled(keeping_two, {}, {}, {})
    assert (await keeping_two.call("ACKB", ids=ids, results=["a", "b", "c"]))["ok"] is True
    states = [await state_of(keeping_two, job_id) for job_id in [*done, *ids]]
    assert states == ["unknown", "unknown", "completed", "completed"]
    counts = (await keeping_two.call("GetJobCounts", queue="q"))["counts"]
    assert counts["completed"] == 2
    assert (await keeping_two.call("GetResult", id=ids[2]))["result"] == "c"


def prometheus_sample(text: str, histogram: str, sample: str = "count") -> float:
    match = re.search(rf"^{histogram}_{sample} (\S+)$", text, re.M)
    assert match is not None
    return float(match[1])


async def test_pullb_claims_plain_and_special_jobs_alike(
    client: FrameClient, app: App, autojump_clock: object
) -> None:
    assert app.actor is not None
    events = app.actor.bus.subscribe(["job:active"])
    options = ({}, {"group": {"id": "g"}}, {"debounce": {"id": "d"}}, {"timeout": 500}, {})
    ids = [await push(client, data=index, **fields) for index, fields in enumerate(options)]
    await trio.sleep(0.25)
    reply = await client.call("PULLB", queue="q", count=10, owner="w", lockTtl=1000)
    assert [job["id"] for job in reply["jobs"]] == ids
    assert len(set(reply["tokens"])) == 5 and None not in reply["tokens"]
    assert {job["startedAt"] for job in reply["jobs"]} == {EPOCH_MS + 250}
    assert {job["lastHeartbeat"] for job in reply["jobs"]} == {EPOCH_MS + 250}
    assert [job["timeline"][-1]["state"] for job in reply["jobs"]] == ["active"] * 5
    assert drain(events) == [("job:active", job_id) for job_id in ids]
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["waiting"], counts["active"]) == (0, 5)
    assert (await client.call("Metrics"))["metrics"]["totalPulled"] == 5
    text = (await client.call("Prometheus"))["data"]["metrics"]
    assert prometheus_sample(text, "trioq_push_to_start_seconds") == 5
    assert prometheus_sample(text, "trioq_push_to_start_seconds", "sum") == 5 * 0.25
    assert (await client.call("ACKB", ids=ids[:1], tokens=["stale"]))["ok"] is False
    await trio.sleep(0.5)  # the timeout job times out; the others hold their leases
    assert [await state_of(client, job_id) for job_id in ids] == [
        "active", "active", "active", "delayed", "active",
    ]  # fmt: skip
    await trio.sleep(0.5)  # the leases run out: back to waiting
    assert await state_of(client, ids[0]) == "waiting"


async def test_pullb_without_a_lease_binds_the_jobs_to_the_connection(
    app: App, connect: Connect
) -> None:
    worker, producer = await connect(), await connect()
    ids = [await push(producer) for _ in range(3)]
    reply = await worker.call("PULLB", queue="q", count=2)
    assert reply["jobs"][0]["id"] == ids[0] and "tokens" not in reply
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert [await state_of(producer, job_id) for job_id in ids] == ["waiting"] * 3
    assert app.actor is not None
    assert app.actor.engine.state.holdings == {}


async def test_a_pullb_adds_a_repeating_jobs_next_occurrence_between_jobs(
    client: FrameClient, app: App
) -> None:
    assert app.actor is not None
    first = await push(client)
    repeating = await push(client, repeat={"every": 1000, "limit": 3})
    last = await push(client)
    events = app.actor.bus.subscribe(["job:*"], queue="q")
    reply = await client.call("PULLB", queue="q", count=10)
    assert [job["id"] for job in reply["jobs"]] == [first, repeating, last]
    got = drain(events)
    assert [event for event, _ in got] == [
        "job:active", "job:active", "job:pushed", "job:delayed", "job:active",
    ]  # fmt: skip
    assert [job_id for _, job_id in got[:2]] == [first, repeating]
    assert got[-1] == ("job:active", last)
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["active"], counts["delayed"]) == (3, 1)


async def test_a_leased_pullb_over_a_repeating_job_gives_every_job_its_token(
    client: FrameClient,
) -> None:
    ids = [await push(client), await push(client, repeat={"every": 1000}), await push(client)]
    reply = await client.call("PULLB", queue="q", count=10, owner="w", lockTtl=60_000)
    assert [job["id"] for job in reply["jobs"]] == ids
    assert len(reply["tokens"]) == 3
    for job_id, token in zip(ids, reply["tokens"], strict=True):
        assert (await client.call("ACK", id=job_id, token=token))["ok"] is True
        assert await state_of(client, job_id) == "completed"


async def test_a_pullb_after_a_repeating_job_still_takes_only_its_count(
    client: FrameClient,
) -> None:
    repeating, first, second = [
        await push(client, repeat={"every": 1000}), await push(client), await push(client)
    ]
    reply = await client.call("PULLB", queue="q", count=2)
    assert [job["id"] for job in reply["jobs"]] == [repeating, first]
    assert await state_of(client, second) == "waiting"


async def test_a_pullb_ending_on_a_repeating_job_returns_what_it_took(client: FrameClient) -> None:
    ids = [await push(client), await push(client, repeat={"every": 1000})]
    reply = await client.call("PULLB", queue="q", count=10)
    assert [job["id"] for job in reply["jobs"]] == ids


async def test_a_limited_queue_adds_a_repeating_jobs_next_occurrence_and_only_its(
    client: FrameClient,
) -> None:
    await client.call("SetConcurrency", queue="q", limit=5)
    plain, repeating = await push(client), await push(client, repeat={"every": 1000})
    reply = await client.call("PULLB", queue="q", count=10)
    assert [job["id"] for job in reply["jobs"]] == [plain, repeating]
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["active"], counts["delayed"], counts["waiting"]) == (2, 1, 0)


async def test_a_batch_keeps_a_long_timeline_at_its_cap(client: FrameClient) -> None:
    job_id = await push(client)
    for _ in range(10):  # waiting, then ten times active and back: 21 entries, 20 kept
        assert (await client.call("PULL", queue="q"))["job"]["id"] == job_id
        assert (await client.call("MoveToWait", id=job_id))["ok"] is True
    assert (await client.call("PULLB", queue="q", count=5))["jobs"][0]["id"] == job_id
    assert (await client.call("ACKB", ids=[job_id]))["ok"] is True
    timeline = (await client.call("GetJob", id=job_id))["job"]["timeline"]
    assert len(timeline) == 20
    assert [entry["state"] for entry in timeline[-3:]] == ["waiting", "active", "completed"]


async def test_an_ackb_releases_the_jobs_waiting_on_its_jobs(client: FrameClient) -> None:
    parent = await push(client)
    child = await push(client, dependsOn=[parent])
    assert (await client.call("PULLB", queue="q", count=5))["jobs"][0]["id"] == parent
    assert await state_of(client, child) == "waiting-children"
    assert (await client.call("ACKB", ids=[parent]))["ok"] is True
    assert await state_of(client, child) == "waiting"
    assert (await client.call("PULL", queue="q"))["job"]["id"] == child


async def test_ackb_ends_the_key_group_debounce_and_lease_each_job_held(
    client: FrameClient,
) -> None:
    options = ({"uniqueKey": "k"}, {"group": {"id": "g"}}, {"debounce": {"id": "d"}})
    keyed, grouped, debounced = await pushed_and_pulled(client, *options)
    leased = await push(client)
    token = (await client.call("PULL", queue="q", owner="w"))["token"]
    ids = [keyed, grouped, debounced, leased]
    reply = await client.call("ACKB", ids=ids, tokens=[None, None, None, token])
    assert reply["ok"] is True and "data" not in reply
    # The lease ended with the job: run again without one, it is acked without a token.
    assert (await client.call("RetryCompleted", queue="q", id=leased))["count"] == 1
    assert (await client.call("PULL", queue="q"))["job"]["id"] == leased
    assert (await client.call("ACK", id=leased))["ok"] is True
    active = await client.call("GetGroupActiveCount", queue="q", groupId="g")
    assert active["data"]["count"] == 0
    assert (await client.call("PUSH", queue="q", data={}, uniqueKey="k"))["id"] != keyed
    assert (await client.call("PUSH", queue="q", data={}, debounce={"id": "d"}))["id"] != debounced


async def test_a_connection_that_acked_part_of_its_batch_still_releases_the_rest(
    connect: Connect,
) -> None:
    worker, producer = await connect(), await connect()
    ids = [await push(producer) for _ in range(3)]
    assert len((await worker.call("PULLB", queue="q", count=3))["jobs"]) == 3
    assert (await worker.call("ACKB", ids=ids[:1]))["ok"] is True
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert [await state_of(producer, job_id) for job_id in ids] == [
        "completed", "waiting", "waiting",
    ]  # fmt: skip


async def test_two_ackbs_add_up_in_the_totals_and_the_processing_time(
    client: FrameClient, autojump_clock: object
) -> None:
    ids = await pushed_and_pulled(client, {}, {}, {}, {})
    await trio.sleep(0.5)
    assert (await client.call("ACKB", ids=ids[:2]))["ok"] is True
    assert (await client.call("ACKB", ids=ids[2:]))["ok"] is True
    assert (await client.call("Metrics"))["metrics"]["totalCompleted"] == 4
    text = (await client.call("Prometheus"))["data"]["metrics"]
    match = re.search(r"^trioq_processing_seconds_sum (\S+)$", text, re.M)
    assert match is not None and float(match[1]) == pytest.approx(2.0)


async def test_a_job_completed_again_by_ackb_counts_by_its_latest_completion(
    keeping_two: FrameClient,
) -> None:
    # Completed A, completed B, then A retried and completed again: the cap of two forgets the
    # oldest completion still standing, B's, not A's first (superseded) one.
    first, second = await pushed_and_pulled(keeping_two, {}, {})
    assert (await keeping_two.call("ACKB", ids=[first]))["ok"] is True
    assert (await keeping_two.call("ACKB", ids=[second]))["ok"] is True
    assert (await keeping_two.call("RetryCompleted", queue="q", id=first))["count"] == 1
    assert (await keeping_two.call("PULL", queue="q"))["job"]["id"] == first
    assert (await keeping_two.call("ACKB", ids=[first]))["ok"] is True
    [third] = await pushed_and_pulled(keeping_two, {})
    assert (await keeping_two.call("ACKB", ids=[third]))["ok"] is True
    states = [await state_of(keeping_two, job_id) for job_id in (first, second, third)]
    assert states == ["completed", "unknown", "completed"]


async def test_a_job_completed_by_ackb_answers_its_waitjob_at_once(
    connect: Connect, autojump_clock: object
) -> None:
    waiter, worker = await connect(), await connect()
    [job_id] = await pushed_and_pulled(worker, {})
    await waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "w"})
    await trio.sleep(1)
    acked = trio.current_time()
    assert (await worker.call("ACKB", ids=[job_id], results=["done"]))["ok"] is True
    assert await waiter.receive_for("w") == {
        "ok": True, "completed": True, "result": "done", "reqId": "w",
    }  # fmt: skip
    assert trio.current_time() == acked  # by the ACKB, not by the WaitJob's timeout


async def test_pullb_returns_jobs_with_large_data_intact(client: FrameClient) -> None:
    bodies = ["x" * 5000, "y" * 3000]  # more than the reply's reserve per job
    ids = [await push(client, data=body) for body in bodies]
    reply = await client.call("PULLB", queue="q", count=2)
    pulled = [(job["id"], job["data"]) for job in reply["jobs"]]
    assert pulled == list(zip(ids, bodies, strict=True))


async def count(client: FrameClient, queue: str = "q") -> int:
    return (await client.call("Count", queue=queue))["count"]


async def test_a_batch_item_with_a_bad_repeat_refuses_the_whole_batch(client: FrameClient) -> None:
    cases = [
        ({"pattern": "every day"}, "Invalid repeat pattern: every day"),
        ({"every": 1000, "endDate": 1000, "immediately": True}, "repeat has no future occurrence"),
    ]
    for repeat, error in cases:
        jobs = [{"data": 1, "repeat": {"every": 1000}}, {"data": 2, "repeat": repeat}]
        reply = await client.call("PUSHB", queue="q", jobs=jobs)
        assert reply == {"ok": False, "error": f"jobs[1]: {error}", "reqId": reply.get("reqId")}
    assert await count(client) == 0


async def test_a_batch_of_repeating_jobs_is_accepted(client: FrameClient) -> None:
    jobs = [{"data": n, "repeat": {"every": 1000}} for n in range(2)]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ok"] is True and len(reply["ids"]) == 2
    assert await count(client) == 2


async def test_a_batch_item_reusing_a_held_custom_id_gets_that_job(client: FrameClient) -> None:
    held = await push(client, jobId="x", data="first")
    jobs = [{"data": "again", "customId": "x"}, {"data": "new", "customId": "y"}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ids"] == [held, "y"]
    assert (await client.call("GetJob", id="x"))["job"]["data"] == "first"
    job = (await client.call("GetJob", id="y"))["job"]
    assert (job["data"], job["customId"]) == ("new", "y")
    assert await count(client) == 2


async def test_a_batch_item_with_a_held_unique_key_gets_the_holder(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k", data="first")
    jobs = [{"data": "again", "uniqueKey": "k"}, {"data": "other"}]
    ids = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert ids[0] == held and ids[1] != held
    assert (await client.call("GetJob", id=held))["job"]["data"] == "first"
    assert await count(client) == 2


REPLACE_BLOCKED_A = "Cannot replace deduplicated job a because live jobs depend on it"


async def test_a_batch_cannot_replace_a_held_job_that_others_wait_for(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k")
    waiter = await push(client, dependsOn=[held])
    jobs = [{"data": 2, "uniqueKey": "k", "dedup": {"ttl": 60000, "replace": True}}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert waiter != held
    text = f"jobs[0]: Cannot replace deduplicated job {held} because live jobs depend on it"
    assert reply["error"] == text
    assert await state_of(client, held) == "waiting"


async def test_a_batch_cannot_replace_its_own_item_that_another_item_waits_for(
    client: FrameClient,
) -> None:
    jobs = [
        {"data": 1, "customId": "a", "uniqueKey": "k"},
        {"data": 2, "customId": "b", "dependsOn": ["a"]},
        {"data": 3, "uniqueKey": "k", "dedup": {"ttl": 60000, "replace": True}},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[2]: {REPLACE_BLOCKED_A}"
    assert await count(client) == 0


async def test_a_waiting_batch_item_without_a_custom_id_also_blocks_the_replace(
    client: FrameClient,
) -> None:
    jobs = [
        {"data": 1, "customId": "a", "uniqueKey": "k"},
        {"data": 2, "dependsOn": ["a"]},
        {"data": 3, "uniqueKey": "k", "dedup": {"replace": True}},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[2]: {REPLACE_BLOCKED_A}"
