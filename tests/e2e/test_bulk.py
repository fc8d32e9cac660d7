"""A large batch against real trioq processes: other connections are answered while it is
worked through, and a kill -9 midway leaves it whole or absent after a restart (SQLite)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.broker import BrokerFactory, BrokerProcess, FrameSocket, encode_frame, poll_until

JOBS = 30_000  # a 0.5 MB PUSHB frame: tens of slices


def pushb(count: int = JOBS) -> dict[str, Any]:
    return {"cmd": "PUSHB", "queue": "big", "reqId": "big",
            "jobs": [{"name": "n", "data": n} for n in range(count)]}  # fmt: skip


def count_of(client: FrameSocket) -> int:
    reply = client.call("Count", queue="big")
    assert reply["ok"] is True, reply
    return int(reply["count"])


def fresh_ping(broker: BrokerProcess) -> bool:
    """A new connection's Ping is answered."""
    with FrameSocket(broker.address) as client:
        return bool(client.call("Ping")["ok"])


def test_other_connections_are_answered_while_a_large_pushb_is_applied(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(data_dir=tmp_path / "data")
    with FrameSocket(broker.address) as pusher, FrameSocket(broker.address) as watcher:
        pusher.send_raw(encode_frame(pushb()))
        seen: list[int] = []
        pings: list[bool] = []
        reply: dict[str, Any] | None = None
        while reply is None:
            seen.append(count_of(watcher))
            pings.append(fresh_ping(broker))
            with contextlib.suppress(TimeoutError):
                reply = pusher.receive(0.01)
        assert reply["ok"] is True and len(reply["ids"]) == JOBS, reply.get("error")
    # While the batch went in, others saw it arrive a slice at a time (never half a slice).
    assert any(0 < count < JOBS for count in seen), seen
    assert all(pings) and len(pings) > 1


def all_data(client: FrameSocket) -> list[Any]:
    """Every job of `big`, pulled (1,000 at a time): their data, sorted."""
    data: list[Any] = []
    while True:
        reply = client.call("PULLB", queue="big", count=1000)
        assert reply["ok"] is True, reply
        if not reply["jobs"]:
            return sorted(data)
        data += [job["data"] for job in reply["jobs"]]


def settled_count(client: FrameSocket) -> int:
    """The queue's count once it stopped changing for half a second (a resumed batch goes on
    in slices while the restarted broker serves)."""
    seen: list[tuple[float, int]] = []

    def stable(count: int) -> bool:
        now = time.monotonic()
        if not seen or seen[-1][1] != count:
            seen.append((now, count))
        return now - seen[-1][0] >= 0.5

    return int(poll_until(lambda: count_of(client), stable))


def kill_during(broker: BrokerProcess, watch: FrameSocket, when: str) -> None:
    """SIGKILL the broker as soon as the batch is `when` (`applying`: part of it is in)."""
    if when == "applying":
        counted = poll_until(lambda: count_of(watch), lambda count: 0 < count < JOBS)
        assert 0 < counted < JOBS, counted
    assert broker.kill_hard() == -signal.SIGKILL


def test_a_large_pushb_killed_midway_is_whole_or_absent_after_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    outcomes = []
    for when in ("applying", "just sent"):
        broker = broker_factory(data_dir=data_dir)
        with FrameSocket(broker.address) as client:
            assert client.call("Obliterate", queue="big")["ok"] is True  # the last round's
        with FrameSocket(broker.address) as pusher, FrameSocket(broker.address) as watch:
            sender = threading.Thread(target=pusher.send_raw, args=(encode_frame(pushb()),))
            sender.start()
            if when == "just sent":
                sender.join()
            kill_during(broker, watch, when)
            sender.join()
        restarted = broker_factory(data_dir=data_dir)
        with FrameSocket(restarted.address) as client:
            total = settled_count(client)  # the restart finishes a batch past its commit point
            outcomes.append(total)
            assert total in (0, JOBS), (when, total)
            assert all_data(client) == list(range(total))  # each job once
        restarted.stop()
    assert outcomes[0] == JOBS


def test_a_large_pushb_sent_in_pieces_is_answered_once_whole(
    broker_factory: BrokerFactory,
) -> None:
    # The frame arrives in many reads (a partial frame is handed back to the connection's
    # task by the read hub): it still decodes as one large batch, answered once.
    broker = broker_factory()
    data = encode_frame(pushb(5_000))
    with FrameSocket(broker.address) as client:
        for start in range(0, len(data), 16_384):
            client.send_raw(data[start : start + 16_384])
            time.sleep(0.001)
        reply = client.receive()
        assert reply["reqId"] == "big" and len(reply["ids"]) == 5_000
        assert count_of(client) == 5_000
