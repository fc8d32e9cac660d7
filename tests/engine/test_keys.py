"""uniqueKey with dedup {ttl, extend, replace} (a replace refused while live jobs depend on the
job), debounce, and the dedup key commands (rules in broker/engine/state/keys.py)."""

from __future__ import annotations

import trio

from broker.engine.state.keys import DEBOUNCE, UNIQUE, KeyRegistry
from broker.node.app import App
from tests.support.app import Broker
from tests.support.client import FrameClient
from tests.support.engine import push, state_of
from tests.support.stores import StoreFactory


async def test_dedup_ttl_frees_the_key_while_the_job_lives(
    client: FrameClient, autojump_clock
) -> None:
    first = await push(client, uniqueKey="k", dedup={"ttl": 1000})
    assert await push(client, uniqueKey="k", dedup={"ttl": 1000}) == first
    await trio.sleep(1.001)
    second = await push(client, uniqueKey="k", dedup={"ttl": 1000})
    assert second != first
    assert [await state_of(client, i) for i in (first, second)] == ["waiting", "waiting"]


async def test_dedup_extend_restarts_the_window(client: FrameClient, autojump_clock) -> None:
    options = {"uniqueKey": "k", "dedup": {"ttl": 1000, "extend": True}}
    first = await push(client, **options)
    for _ in range(3):
        await trio.sleep(0.8)
        assert await push(client, **options) == first
    await trio.sleep(1.001)
    assert await push(client, **options) != first


async def test_a_duplicate_without_extend_leaves_the_window_as_it_was(
    client: FrameClient, autojump_clock
) -> None:
    options = {"uniqueKey": "k", "dedup": {"ttl": 1000}}
    first = await push(client, **options)
    await trio.sleep(0.8)
    assert await push(client, **options) == first
    await trio.sleep(0.201)  # 1001 ms after the first push
    assert await push(client, **options) != first


async def test_a_duplicate_key_without_replace_is_no_replace_while_others_wait(
    client: FrameClient,
) -> None:
    # Only `replace` is refused while live jobs wait for the key's job: a plain duplicate is
    # answered with that job, in a batch and after one.
    held = await push(client, uniqueKey="k")
    await push(client, dependsOn=[held])
    assert await push(client, uniqueKey="k") == held
    jobs = [
        {"data": 1, "customId": "a", "uniqueKey": "j"},
        {"data": 2, "customId": "b", "dependsOn": ["a"]},
        {"data": 3, "uniqueKey": "j"},
    ]
    assert (await client.call("PUSHB", queue="q", jobs=jobs))["ids"] == ["a", "b", "a"]


async def test_dedup_replace_swaps_a_job_not_yet_started(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k", data={"v": 1})
    second = await push(client, uniqueKey="k", data={"v": 2}, dedup={"replace": True})
    assert second != first
    assert await state_of(client, first) == "unknown"
    pulled = (await client.call("PULL", queue="q"))["job"]
    assert (pulled["id"], pulled["data"]) == (second, {"v": 2})
    third = await push(client, uniqueKey="k", data={"v": 3}, dedup={"replace": True})
    assert third == second  # already started: kept, and the duplicate is refused


async def test_debounce_window(client: FrameClient, autojump_clock) -> None:
    first = await push(client, debounceId="d", debounceTtl=1000)
    await client.call("PULL", queue="q")
    await client.call("ACK", id=first)
    assert await push(client, debounceId="d", debounceTtl=1000) == first  # still in its window
    await trio.sleep(1.001)
    assert await push(client, debounceId="d", debounceTtl=1000) != first


async def test_debounce_without_ttl_lasts_until_the_job_starts(client: FrameClient) -> None:
    first = await push(client, debounceId="d")
    assert await push(client, debounceId="d") == first
    await client.call("PULL", queue="q")
    assert await push(client, debounceId="d") != first


async def test_a_job_retried_from_the_dlq_takes_its_unique_key_again(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k", maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=first)  # failed for good: the key is free
    assert (await client.call("RetryDlq", queue="q", jobId=first))["count"] == 1
    assert await push(client, uniqueKey="k") == first  # held again by the retried job


async def test_a_retried_job_does_not_take_a_key_held_by_a_newer_job(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k", maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=first)
    newer = await push(client, uniqueKey="k")
    assert newer != first
    assert (await client.call("RetryDlq", queue="q", jobId=first))["count"] == 1
    assert await push(client, uniqueKey="k") == newer


async def test_expired_debounce_windows_are_let_go_of(
    app: App, client: FrameClient, autojump_clock
) -> None:
    # A timed window outlives its job; once it ends, the broker holds nothing for it.
    jobs = [{"data": n, "debounceId": f"d{n}", "debounceTtl": 1000} for n in range(100)]
    ids = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    await client.call("PULLB", queue="q", count=100)
    await client.call("ACKB", ids=ids)
    assert app.actor is not None
    keys = app.actor.engine.state.keys
    assert len(keys) == 100
    await trio.sleep(1.001)
    assert len(keys) == 0


async def test_an_untimed_debounce_ends_when_its_job_goes_away(client: FrameClient) -> None:
    first = await push(client, debounceId="d")
    assert (await client.call("Cancel", id=first))["ok"] is True
    second = await push(client, debounceId="d")
    assert second != first and await state_of(client, second) == "waiting"


async def test_draining_a_queue_ends_its_untimed_debounces(client: FrameClient) -> None:
    first = await push(client, debounceId="d")
    await push(client)  # a plain job drained alongside
    assert (await client.call("Drain", queue="q"))["count"] == 2
    second = await push(client, debounceId="d")
    assert second != first and await state_of(client, second) == "waiting"


def test_a_hold_ends_at_its_expiry_and_is_freed_only_by_its_holder() -> None:
    keys = KeyRegistry()
    timed, untimed = (UNIQUE, "q", "t"), (DEBOUNCE, "q", "u")
    keys.take(timed, "a", 1000.0)
    keys.take(untimed, "b")
    assert (keys.owner(timed, 999.5), keys.owner(untimed, 1e18)) == ("a", "b")
    assert keys.owner(timed, 1000.0) is None and len(keys) == 1  # dropped when looked up
    keys.take(timed, "a", 2000.0)
    keys.free(timed, "a", only_untimed=True)  # a timed hold outlives its job
    keys.free(untimed, "other")
    assert (keys.owner(timed, 0), keys.owner(untimed, 0)) == ("a", "b")
    keys.free(timed, "a")
    keys.free(untimed, "b", only_untimed=True)
    assert (keys.owner(timed, 0), keys.owner(untimed, 0), len(keys)) == (None, None, 0)


def test_a_hold_timer_drops_only_the_hold_it_was_set_for() -> None:
    keys = KeyRegistry()
    key = (UNIQUE, "q", "k")
    keys.take(key, "a", 1000.0)
    keys.take(key, "a", 3000.0)  # extended: the first timer is stale
    keys.expire(key, "a", 1000.0)
    keys.expire(key, "b", 3000.0)
    assert keys.owner(key, 2000.0) == "a"
    keys.expire(key, "a", 3000.0)
    assert len(keys) == 0


async def test_replace_with_a_key_no_job_holds_is_a_plain_push(client: FrameClient) -> None:
    job_id = await push(client, uniqueKey="fresh", dedup={"replace": True})
    assert await state_of(client, job_id) == "waiting"


async def test_replace_of_a_started_job_answers_that_job_even_while_others_wait(
    client: FrameClient,
) -> None:
    held = await push(client, uniqueKey="k")
    await push(client, dependsOn=[held])
    assert (await client.call("PULL", queue="q"))["job"]["id"] == held
    assert await push(client, uniqueKey="k", dedup={"replace": True}) == held
    assert await state_of(client, held) == "active"


async def test_replace_goes_ahead_once_the_job_waiting_for_it_is_cancelled(
    client: FrameClient,
) -> None:
    held = await push(client, uniqueKey="k")
    waiter = await push(client, dependsOn=[held])
    assert (await client.call("Cancel", id=waiter))["ok"] is True
    replacement = await push(client, uniqueKey="k", dedup={"replace": True})
    assert replacement != held and await state_of(client, held) == "unknown"


async def test_dedup_key_commands(client: FrameClient) -> None:
    first = await push(client, uniqueKey="k")
    found = await client.call("GetDeduplicationJobId", queue="q", deduplicationId="k")
    assert (found["ok"], found["data"]) == (True, {"jobId": first})
    gone = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert (gone["ok"], gone["data"]) == (True, {"count": 1})
    second = await push(client, uniqueKey="k")
    assert second != first
    removed = await client.call("RemoveJobDeduplicationKey", id=second)
    assert (removed["ok"], removed["data"]) == (True, {"removed": True})
    assert (await client.call("RemoveJobDeduplicationKey", id=second))["data"] == {"removed": False}
    assert await push(client, uniqueKey="k") not in (first, second)


async def test_dedup_key_commands_on_keys_and_jobs_that_hold_nothing(client: FrameClient) -> None:
    plain = await push(client)
    nobody = await client.call("GetDeduplicationJobId", queue="q", deduplicationId="k")
    assert nobody["data"] == {"jobId": None}
    none = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert (none["ok"], none["data"]) == (True, {"count": 0})
    for job_id in (plain, "missing"):
        reply = await client.call("RemoveJobDeduplicationKey", id=job_id)
        assert (reply["ok"], reply["data"]) == (True, {"removed": False})


async def test_a_job_does_not_free_a_key_a_newer_job_holds(client: FrameClient) -> None:
    old = await push(client, uniqueKey="k", maxAttempts=1)
    await client.call("PULL", queue="q")
    await client.call("FAIL", id=old)  # failed for good: the key goes to the next push
    newer = await push(client, uniqueKey="k")
    assert (await client.call("RemoveJobDeduplicationKey", id=old))["data"] == {"removed": False}
    assert await push(client, uniqueKey="k") == newer
    gone = await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="k")
    assert gone["data"] == {"count": 1}
    old_job = (await client.call("GetJob", id=old))["job"]
    assert old_job["uniqueKey"] == "k"  # not the key's owner: its own record is left alone


async def test_a_removed_dedup_key_stays_free_after_a_restart(store_factory: StoreFactory) -> None:
    broker = Broker(store_factory)
    async with broker.running() as connect:
        client = await connect()
        by_key = await push(client, uniqueKey="a")
        by_job = await push(client, uniqueKey="b")
        await client.call("RemoveDeduplicationKey", queue="q", deduplicationId="a")
        await client.call("RemoveJobDeduplicationKey", id=by_job)
        for job_id in (by_key, by_job):
            assert (await client.call("GetJob", id=job_id))["job"]["uniqueKey"] is None
    async with broker.running() as connect:
        client = await connect()
        assert await push(client, uniqueKey="a") != by_key
        assert await push(client, uniqueKey="b") != by_job
        for job_id in (by_key, by_job):
            assert (await client.call("GetJob", id=job_id))["job"]["uniqueKey"] is None


REPLACE = {"replace": True}


def blocked(job_id: str) -> str:
    return f"Cannot replace deduplicated job {job_id} because live jobs depend on it"


async def test_a_batch_item_waiting_for_a_held_job_blocks_a_later_item_replacing_it(
    client: FrameClient,
) -> None:
    held = await push(client, uniqueKey="k", jobId="held")
    jobs = [{"data": 1, "dependsOn": [held]}, {"data": 2, "uniqueKey": "k", "dedup": REPLACE}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["error"] == f"jobs[1]: {blocked(held)}"
    assert await state_of(client, held) == "waiting"
    assert (await client.call("Count", queue="q"))["count"] == 1  # nothing of the batch landed


async def test_a_job_may_not_replace_the_job_it_depends_on(client: FrameClient) -> None:
    held = await push(client, uniqueKey="k", jobId="held")
    alone = await client.call(
        "PUSH", queue="q", data=2, uniqueKey="k", dedup=REPLACE, dependsOn=[held]
    )
    assert alone["error"] == blocked(held)
    item = {"data": 2, "uniqueKey": "k", "dedup": REPLACE, "dependsOn": [held]}
    batch = await client.call("PUSHB", queue="q", jobs=[item])
    assert batch["error"] == f"jobs[0]: {blocked(held)}"
    assert await state_of(client, held) == "waiting"


async def test_a_batch_item_replacing_an_earlier_one_gets_its_own_id_as_push_does(
    client: FrameClient,
) -> None:
    jobs = [{"data": 1, "uniqueKey": "k"}, {"data": 2, "uniqueKey": "k", "dedup": REPLACE}]
    first, second = (await client.call("PUSHB", queue="q", jobs=jobs))["ids"]
    assert first != second
    listed = (await client.call("GetJobs", queue="q"))["jobs"]
    assert [(job["id"], job["data"]) for job in listed] == [(second, 2)]
