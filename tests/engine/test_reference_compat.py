"""What clients written for the reference server send and expect (issue 10): empty lock tokens,
batch token checks, dependency rules, dedup replace, and the commands those clients call."""

from __future__ import annotations

import pytest
import trio

from broker.engine.core import Engine
from protocol.commands import SubscribeEvents, UnsubscribeEvents
from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push, state_of


async def lease(client: FrameClient, queue: str = "q") -> tuple[str, str]:
    reply = await client.call("PULL", queue=queue, owner="w")
    return reply["job"]["id"], reply["token"]


# -- empty lock tokens (a `useLocks: false` Worker) ------------------------------------------


async def test_empty_token_on_an_unleased_job_counts_as_no_token(client: FrameClient) -> None:
    acked, batched, failed = [await push(client) for _ in range(3)]
    await client.call("PULLB", queue="q", count=3)
    assert (await client.call("ACK", id=acked, token=""))["ok"] is True
    assert (await client.call("ACKB", ids=[batched], tokens=[""]))["ok"] is True
    assert (await client.call("FAIL", id=failed, token="", error="x"))["ok"] is True
    assert [await state_of(client, i) for i in (acked, batched)] == ["completed"] * 2
    assert await state_of(client, failed) == "delayed"


@pytest.mark.parametrize(
    ("cmd", "fields"),
    [
        ("ExtendLock", {"duration": 1000}),
        ("ChangeDelay", {"delay": 1000}),
        ("MoveToDelayed", {"delay": 1000}),
        ("MoveToWait", {}),
        ("JobHeartbeat", {}),
        ("Discard", {}),
    ],
)
async def test_every_token_command_reads_an_empty_token_as_none(
    client: FrameClient, cmd: str, fields: dict[str, object]
) -> None:
    job_id = await push(client)
    await client.call("PULL", queue="q")
    reply = await client.call(cmd, id=job_id, token="", **fields)
    if cmd == "ExtendLock":  # no lease to extend, with or without a token
        assert reply["error"] == "Lock not found or invalid token"
    else:
        assert reply["ok"] is True, reply


async def test_empty_token_on_a_leased_job_is_a_missing_token(client: FrameClient) -> None:
    await push(client)
    job_id, _token = await lease(client)
    for reply in (
        await client.call("ACK", id=job_id, token=""),
        await client.call("ACKB", ids=[job_id], tokens=[""]),
        await client.call("FAIL", id=job_id, token=""),
    ):
        assert reply["error"] == f"Lock token required for job {job_id}"
    assert await state_of(client, job_id) == "active"


async def test_ackb_checks_the_token_of_every_position_of_a_repeated_id(
    client: FrameClient,
) -> None:
    await push(client)
    job_id, token = await lease(client)
    reply = await client.call("ACKB", ids=[job_id, job_id], tokens=[token, "bad"])
    assert reply["error"] == f"Invalid or expired lock token for job {job_id}"
    assert await state_of(client, job_id) == "active"


# -- dependencies ----------------------------------------------------------------------------


async def test_a_batch_job_cannot_depend_on_itself(client: FrameClient) -> None:
    reply = await client.call(
        "PUSHB", queue="q", jobs=[{"data": 1, "customId": "x", "dependsOn": ["x"]}]
    )
    assert reply["error"] == "jobs[0]: Job cannot depend on itself: x"
    assert await state_of(client, "x") == "unknown"


async def test_a_pushed_job_cannot_depend_on_itself(client: FrameClient) -> None:
    reply = await client.call("PUSH", queue="q", data=1, jobId="y", dependsOn=["y"])
    assert reply["error"] == "Job cannot depend on itself: y"


async def test_a_batch_cannot_hold_a_dependency_cycle(client: FrameClient) -> None:
    jobs = [
        {"data": 1, "customId": "a", "dependsOn": ["b"]},
        {"data": 2, "customId": "b", "dependsOn": ["a"]},
    ]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == "jobs[0]: Dependency cycle: a -> b -> a"
    assert await state_of(client, "a") == "unknown"


async def test_a_completed_and_removed_dependency_is_satisfied(client: FrameClient) -> None:
    done = await push(client, removeOnComplete=True)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    follower = await push(client, dependsOn=[done])
    assert await state_of(client, follower) == "waiting"


# -- dedup replace ---------------------------------------------------------------------------


async def test_replace_is_refused_while_live_jobs_depend_on_the_job(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k")
    dependents = [await push(client, dependsOn=[first]) for _ in range(2)]
    reply = await client.call(
        "PUSH", queue="q", data=2, uniqueKey="k", dedup={"ttl": 60000, "replace": True}
    )
    assert len(dependents) == 2
    refused = f"Cannot replace deduplicated job {first} because live jobs depend on it"
    assert reply["error"] == refused
    assert await state_of(client, first) == "waiting"


async def test_pushb_applies_replace_like_push(client: FrameClient) -> None:
    jobs = [
        {"data": 1, "uniqueKey": "z"},
        {"data": 2, "uniqueKey": "z", "dedup": {"ttl": 60000, "replace": True}},
    ]
    ids = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert ids[0] != ids[1]
    assert await state_of(client, ids[0]) == "unknown"
    job = (await client.call("GetJob", id=ids[1]))["job"]
    assert job["data"] == 2


async def test_get_job_answers_ok_with_the_job_and_an_error_for_an_unknown_id(
    client: FrameClient,
) -> None:
    job_id = await push(client, data={"n": 1})
    reply = await client.call("GetJob", id=job_id)
    assert (reply["ok"], reply["job"]["id"], reply["job"]["data"]) == (True, job_id, {"n": 1})
    missing = await client.call("GetJob", id="no-such-job")
    assert (missing["ok"], missing["error"]) == (False, "Job not found")


async def test_a_grouped_job_with_a_priority_is_prioritized(client: FrameClient) -> None:
    grouped = await push(client, groupId="g", priority=2)
    first_in_group = await push(client, groupId="g", priority=0)
    assert await state_of(client, grouped) == "prioritized"
    assert await state_of(client, first_in_group) == "waiting"
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["prioritized"], counts["waiting"]) == (1, 1)


# -- numbers a JavaScript client reads as numbers --------------------------------------------


def big_integers(value: object, path: str = "") -> list[str]:
    """Where a reply holds an integer that MessagePack sends in 64 bits (msgspec writes every
    integer in its smallest form), which msgpackr decodes as a BigInt, not a number."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [path] if not -(2**31) <= value < 2**32 else []
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in big_integers(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in big_integers(item, f"{path}[{i}]")]
    return []


async def test_ping_time_and_every_timestamp_are_js_numbers(client: FrameClient) -> None:
    job_id = await push(client, timestamp=1_800_000_000_000, ttl=10_000_000_000, jobId="t")
    await push(client, "r", repeat={"every": 1000, "startDate": 1_800_000_000_000.0})
    await client.call("PULL", queue="q", owner="w")
    await client.call("AddLog", id=job_id, message="m")
    await client.call("Cron", name="c", queue="q", data={}, repeatEvery=60000, timezone="UTC")
    await client.call("RegisterWorker", name="w", queues=["q"], pid=1, startedAt=1_800_000_000_000)
    replies = [
        await client.call("Ping"),
        await client.call("GetJob", id=job_id),
        await client.call("GetJobs", queue="q"),
        await client.call("GetJobs", queue="r"),
        await client.call("GetLogs", id=job_id),
        await client.call("CronList"),
        await client.call("ListWorkers"),
        await client.call("Stats"),
        await client.call("Metrics"),
        await client.call("Metrics", queue="q", type="completed"),
    ]
    assert isinstance(replies[0]["data"]["time"], float)
    found = [path for reply in replies for path in big_integers(reply)]
    assert found == []


# -- commands the official client sends ------------------------------------------------------


async def test_prometheus_command_answers_the_exposition_text(client: FrameClient) -> None:
    await push(client)
    reply = await client.call("Prometheus")
    assert reply["ok"] is True
    assert 'trioq_jobs{queue="q",state="waiting"} 1.0' in reply["data"]["metrics"]


async def test_metrics_of_a_queue_counts_finishes_per_minute(
    client: FrameClient, autojump_clock: object
) -> None:
    for _ in range(3):
        await push(client)
    for job_id in await pull_ids(client):
        await client.call("ACK", id=job_id)
    await trio.sleep(120)  # two minutes on: one empty minute between
    await push(client)
    await client.call("ACK", id=(await pull_ids(client))[0])
    reply = await client.call("Metrics", queue="q", type="completed")
    assert reply["data"]["data"] == [1, 0, 3]  # newest minute first
    assert reply["data"]["count"] == 3
    assert reply["data"]["meta"]["count"] == 4
    assert reply["data"]["meta"]["prevCount"] == 1
    page = await client.call("Metrics", queue="q", type="completed", start=1, end=1)
    assert page["data"]["data"] == [0]
    failed = await client.call("Metrics", queue="q", type="failed")
    assert failed["data"] == {"meta": {"count": 0, "prevTS": 0.0, "prevCount": 0}, "data": [],
                              "count": 0}  # fmt: skip
    assert "metrics" in await client.call("Metrics")  # without a queue: the global shape
    bad = await client.call("Metrics", queue="q", type="waiting")
    assert bad["error"] == "Metrics type must be 'completed' or 'failed'"


async def test_completions_are_counted_and_end_at_full_progress(client: FrameClient) -> None:
    for _ in range(2):
        await push(client)
    ids = await pull_ids(client)
    for job_id in ids:
        await client.call("ACK", id=job_id)
    assert (await client.call("Metrics"))["metrics"]["totalCompleted"] == 2
    assert (await client.call("GetJob", id=ids[0]))["job"]["progress"] == 100
    exposition = (await client.call("Prometheus"))["data"]["metrics"]
    assert "trioq_processing_seconds_count 2" in exposition  # both processing times observed
    assert "trioq_processing_seconds_sum 0.0" in exposition  # acknowledged as they started
    assert "trioq_push_to_start_seconds_sum 0.0" in exposition  # started as they were pushed


async def test_failures_are_counted_per_queue_and_in_total(client: FrameClient) -> None:
    for _ in range(2):
        await push(client, maxAttempts=1)
    for job_id in await pull_ids(client):
        await client.call("FAIL", id=job_id)
    failed = await client.call("Metrics", queue="q", type="failed")
    assert (failed["data"]["data"], failed["data"]["meta"]["count"]) == ([2], 2)
    completed = await client.call("Metrics", queue="q", type="completed")
    assert completed["data"]["meta"]["count"] == 0
    assert (await client.call("Metrics"))["metrics"]["totalFailed"] == 2
    assert (await client.call("Stats"))["stats"]["failed"] == 2


async def test_trim_events_answers_how_many_were_removed(client: FrameClient) -> None:
    reply = await client.call("TrimEvents", queue="q", maxLength=10)
    assert reply["data"] == {"removed": 0}
    bad = await client.call("TrimEvents", queue="q", maxLength=-1)
    assert bad["error"] == "maxLength must be a non-negative safe integer"


# -- transitions and listings ----------------------------------------------------------------


async def test_move_to_delayed_re_delays_a_queued_job(
    client: FrameClient, autojump_clock: object
) -> None:
    waiting = await push(client)
    prioritized = await push(client, priority=3)
    delayed = await push(client, delay=5000)
    for job_id in (waiting, prioritized, delayed):
        assert (await client.call("MoveToDelayed", id=job_id, delay=60000))["ok"] is True
        assert await state_of(client, job_id) == "delayed"
    job = (await client.call("GetJob", id=delayed))["job"]
    assert job["runAt"] == job["createdAt"] + 60000  # re-delayed from now (no time passed)


async def test_move_to_delayed_names_the_state_it_refuses(client: FrameClient) -> None:
    done = await push(client)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    assert (await client.call("MoveToDelayed", id="ghost", delay=1))["error"] == "Job not found"
    reply = await client.call("MoveToDelayed", id=done, delay=1)
    assert reply["error"] == "Job is not active (current state: completed)"


async def test_a_paused_queue_counts_and_lists_its_ready_jobs_as_paused(
    client: FrameClient,
) -> None:
    waiting = await push(client)
    prioritized = await push(client, priority=1)
    delayed = await push(client, delay=60000)
    await client.call("Pause", queue="q")
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["paused"], counts["waiting"], counts["prioritized"]) == (2, 0, 0)
    assert counts["delayed"] == 1
    listed = await client.call("GetJobs", queue="q", state="paused")
    assert sorted(job["id"] for job in listed["jobs"]) == sorted([waiting, prioritized])
    assert (await client.call("GetJobs", queue="q", state=["waiting"]))["jobs"] == []
    everything = await client.call("GetJobs", queue="q")
    assert {job["id"] for job in everything["jobs"]} == {waiting, prioritized, delayed}
    await client.call("Resume", queue="q")
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["paused"], counts["waiting"], counts["prioritized"]) == (0, 1, 1)
    assert (await client.call("GetJobs", queue="q", state="paused"))["jobs"] == []


@pytest.mark.parametrize("name", ["", "n" * 257])
async def test_a_job_name_is_a_non_empty_string_of_at_most_256(
    client: FrameClient, name: object
) -> None:
    rule = "Job name must be a non-empty string of at most 256 characters"
    reply = await client.call("PUSH", queue="q", name=name, data={})
    assert reply["error"] == rule
    items = [{"name": "ok", "data": 1}, {"name": name, "data": 2}]
    batch = await client.call("PUSHB", queue="q", jobs=items)
    assert batch["error"] == f"jobs[1]: {rule}"
    assert (await client.call("GetJobCounts", queue="q"))["counts"]["waiting"] == 0
    assert (await client.call("PUSH", queue="q", name="n" * 256, data={}))["ok"] is True


async def test_dedup_extend_on_an_active_job_returns_that_job(client: FrameClient) -> None:
    dedup = {"ttl": 60000, "extend": True}
    first = await push(client, uniqueKey="k", dedup=dedup)
    await client.call("PULL", queue="q")
    again = await client.call("PUSH", queue="q", data={}, uniqueKey="k", dedup=dedup)
    assert again == {"ok": True, "id": first, "reqId": again["reqId"]}
    counts = (await client.call("GetJobCounts", queue="q"))["counts"]
    assert (counts["active"], counts["waiting"]) == (1, 0)


async def test_subscribe_events_pushes_the_queue_job_events(
    client: FrameClient, connect: Connect
) -> None:
    assert (await client.call("SubscribeEvents", queue="q"))["ok"] is True
    other = await connect()
    job_id = await push(other)
    await push(other, "elsewhere")
    await other.call("PULL", queue="q")
    await other.call("ACK", id=job_id)
    events = [(await client.receive())["event"] for _ in range(3)]
    assert [(e["eventType"], e["jobId"], e["queue"]) for e in events] == [
        ("pushed", job_id, "q"), ("pulled", job_id, "q"), ("completed", job_id, "q"),
    ]  # fmt: skip
    assert all(isinstance(e["timestamp"], float) for e in events)
    assert (await client.call("UnsubscribeEvents"))["ok"] is True
    await push(other)
    assert (await client.call("Ping"))["ok"] is True  # the next frame is a reply, no event


async def test_subscribe_events_needs_a_valid_queue(client: FrameClient) -> None:
    reply = await client.call("SubscribeEvents", queue="bad queue")
    assert reply["error"] == "Queue name contains invalid characters"


async def test_a_flow_may_depend_on_a_completed_and_removed_job(client: FrameClient) -> None:
    done = await push(client, removeOnComplete=True)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=done)
    flow = [{"id": "f", "queue": "q", "input": {"name": "f", "data": 1, "dependsOn": [done]}}]
    assert (await client.call("PUSHF", jobs=flow))["ok"] is True
    assert await state_of(client, "f") == "waiting"


async def test_a_job_cannot_become_its_own_parent(client: FrameClient) -> None:
    job_id = await push(client)
    reply = await client.call("UpdateParent", parentId=job_id, childId=job_id)
    assert reply["error"] == f"Job cannot depend on itself: {job_id}"


def test_subscribe_events_from_another_transport_is_a_clear_error() -> None:
    class Session:
        def __init__(self) -> None:
            self.replies: list[dict[str, object]] = []

        def stage_reply(self, reply: dict[str, object], req_id: object) -> None:
            self.replies.append(reply)

    session = Session()
    engine = Engine()
    engine.execute(session, SubscribeEvents(queue="q"), 0.0)
    engine.execute(session, UnsubscribeEvents(), 0.0)
    assert session.replies == [
        {"ok": False, "error": f"{name} is only available over TCP (WebSocket: use Subscribe)"}
        for name in ("SubscribeEvents", "UnsubscribeEvents")
    ]


BAD_NAME = "Job name must be a non-empty string of at most 256 characters"


async def test_error_texts_are_the_references_where_the_seed_is_silent(
    client: FrameClient,
) -> None:
    async def error(cmd: str, **fields: object) -> object:
        reply = await client.call(cmd, **fields)
        assert reply["ok"] is False, reply
        return reply["error"]

    assert await error("PUSH", queue="q", name=5, data=1) == BAD_NAME
    assert await error("PUSH", queue="q", data={"name": ""}) == BAD_NAME  # an older SDK's form
    assert await error("PUSHB", queue="q", jobs=[{"name": ["a"], "data": 1}]) == (
        f"jobs[0]: {BAD_NAME}"
    )
    assert await error("PUSH", queue="q", data=1, groupId="g", groupMaxSize=0) == (
        "group.maxSize must be a positive safe integer"
    )
    assert await error("PUSH", queue="q", data=1, repeat={"every": -1}) == (
        "repeat.every must be a positive finite number"
    )
    assert await error("PUSH", queue="q", data=1, repeat={"pattern": "soon"}) == (
        "Invalid repeat pattern: soon"
    )
    await push(client, groupId="g", groupMaxSize=1)
    assert await error("PUSH", queue="q", data=2, groupId="g", groupMaxSize=1) == (
        "Group g has reached its maximum size of 1"
    )
    assert await error("RateLimit", queue="q", limit="x") == "limit must be a finite number"
    assert await error("SetConcurrency", queue="q", limit="x") == "limit must be a finite number"
    waiting = await push(client, "other")
    assert await error("Progress", id=waiting, progress=5) == (
        "Job is not active (current state: waiting)"
    )
    assert await error("UpdateParent", childId="ghost", parentId=waiting) == (
        "Child job not found: ghost"
    )
    assert await error("UpdateParent", childId=waiting, parentId="ghost") == (
        "Parent job not found: ghost"
    )
