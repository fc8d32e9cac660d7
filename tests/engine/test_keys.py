"""uniqueKey with dedup {ttl, extend, replace}, and debounce (rules in broker/engine/keys.py)."""

from __future__ import annotations

import trio

from broker.engine.keys import DEBOUNCE, UNIQUE, KeyRegistry
from broker.node.app import App
from tests.engine.test_push_pull import push, state_of
from tests.support.client import FrameClient


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
