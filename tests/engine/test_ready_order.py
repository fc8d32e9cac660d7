"""Ready jobs come out in the heap's order whether they wait in the queue's lane (default
options, ready in time order) or on its heap (priorities, lifo, a job back with an older run
time, an entry put back): the oldest run time first, then arrival (in-memory, MockClock)."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.app import Connect
from tests.support.client import FrameClient
from tests.support.engine import pull_ids, push


async def test_a_job_back_from_an_expired_lease_goes_before_later_pushes(
    client: FrameClient, autojump_clock: object
) -> None:
    first, second = await push(client), await push(client)
    assert (await client.call("PULL", queue="q", owner="w", lockTtl=1000))["job"]["id"] == first
    await trio.sleep(0.5)
    later = [await push(client), await push(client)]
    await trio.sleep(0.5)  # the lease runs out: `first` is ready again at its old run time
    # `second` was ready at the same run time, earlier in arrival order.
    assert await pull_ids(client) == [second, first, *later]


async def test_a_job_released_by_a_closed_connection_goes_before_later_pushes(
    connect: Connect, autojump_clock: object
) -> None:
    worker, producer = await connect(), await connect()
    held = await push(producer)
    assert (await worker.call("PULL", queue="q"))["job"]["id"] == held
    await trio.sleep(1)
    later = await push(producer)
    await worker.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert await pull_ids(producer) == [held, later]


async def test_a_delayed_job_due_earlier_goes_before_a_later_push(
    client: FrameClient, autojump_clock: object
) -> None:
    delayed = await push(client, delay=1000)
    await trio.sleep(1.5)  # promoted at its run time, before this push
    pushed = await push(client)
    early = await push(client, delay=-5000)  # a negative delay: ready, five seconds ago
    assert await pull_ids(client) == [early, delayed, pushed]


async def test_priorities_and_lifo_keep_their_order_around_the_lane(client: FrameClient) -> None:
    plain = await push(client)
    urgent = await push(client, priority=5)
    newest_first = [await push(client, lifo=True) for _ in range(2)]
    plain_later = await push(client)
    assert await pull_ids(client) == [urgent, *newest_first[::-1], plain, plain_later]


async def test_a_cancelled_job_in_the_lane_is_skipped(client: FrameClient) -> None:
    cancelled, kept = await push(client), await push(client)
    assert (await client.call("Cancel", id=cancelled))["ok"] is True
    assert (await client.call("PULL", queue="q"))["job"]["id"] == kept
    assert (await client.call("PULL", queue="q", timeout=0))["job"] is None


async def test_a_pull_passes_over_a_cancelled_job_at_the_top_of_the_heap(
    client: FrameClient,
) -> None:
    # Prioritized jobs wait on the heap; the cancelled best one leaves a stale entry on top.
    best = await push(client, priority=9)
    other = await push(client, priority=1)
    assert (await client.call("Cancel", id=best))["ok"] is True
    assert (await client.call("PULL", queue="q"))["job"]["id"] == other
