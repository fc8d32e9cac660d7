"""A pass's job events reach subscribers as runs: TCP frames and WebSocket JSON built in one
call per run are those built one event at a time, a pass mixing kinds, queues and events with
data keeps its order for every kind of subscriber, and a run its encoder cannot encode costs
only the subscribers of that encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from broker.events import DROPPED_FAILED, JOB_EVENT_NAMES, EventBus, event_message
from broker.server.jsonwire import job_event_json, reply_json
from broker.server.tcp import event_frame, job_event_frames
from protocol import FrameDecoder, decode_any

# Ids of every MessagePack string size (fixstr, str8, str16, str32) and of non-ASCII text.
IDS = ["", "7", "a" * 31, "b" * 32, "c" * 255, "d" * 256, "e" * 65_535, "f" * 65_536, "é" * 40]


@dataclass
class FakeJob:
    """What the bus reads of a job."""

    queue: str
    id: str


@pytest.mark.parametrize("kind", ["pushed", "active", "completed", "failed", "progress"])
@pytest.mark.parametrize("queue", ["q", "quëue" * 20])
@pytest.mark.parametrize("now_ms", [0, 1.5, 1_733_400_000_123])
def test_a_run_s_frames_are_the_frames_of_its_events_one_by_one(
    kind: str, queue: str, now_ms: float
) -> None:
    jobs = [FakeJob(queue, job_id) for job_id in IDS]
    one_by_one = [event_frame(event_message(kind, job, {}, now_ms)) for job in jobs]
    assert job_event_frames(JOB_EVENT_NAMES[kind], queue, jobs, now_ms) == one_by_one


def test_frames_of_a_run_decode_to_the_reference_s_event() -> None:
    frames = job_event_frames("job:active", "q", [FakeJob("q", "j")], 2)
    (payload,) = FrameDecoder().feed(b"".join(frames))
    assert decode_any(payload) == {
        "type": "event",
        "event": {"queue": "q", "jobId": "j", "eventType": "pulled", "timestamp": 2.0},
    }


def recorded_pass() -> list[tuple[str, Any, dict[str, Any]]]:
    """A pass mixing runs of kinds and queues, an event with data, and one of no job."""
    a, b, c = FakeJob("q", "a"), FakeJob("q", "b"), FakeJob("other", "c")
    return [
        ("pushed", a, {}),
        ("pushed", b, {}),
        ("pushed", c, {}),
        ("progress", a, {"progress": 50}),
        ("active", a, {}),
        ("active", b, {}),
        ("queue:paused", None, {"queue": "q"}),
        ("completed", a, {}),
    ]


def expected(queue: str | None) -> list[dict[str, Any]]:
    """The messages of `recorded_pass` a subscriber of `queue` (None: all) takes, in order."""
    messages = [
        event_message(kind, job, extra, 7) for kind, job, extra in recorded_pass()
    ]
    return [
        m for m in messages if queue is None or m["data"].get("queue") in (None, queue)
    ]


@pytest.mark.parametrize("queue", [None, "q"])
def test_every_kind_of_subscriber_gets_a_mixed_pass_in_order(queue: str | None) -> None:
    bus = EventBus()
    delivered: list[list[bytes]] = []
    bus.subscribe_direct(
        ["*"], queue, event_frame, lambda items: delivered.append(items), lambda: None,
        job_event_frames,
    )  # fmt: skip
    plain: list[list[Any]] = []
    bus.subscribe_direct(["*"], queue, lambda m: m, lambda items: plain.append(items), print)
    channel = bus.subscribe(["*"], queue)
    heard: list[dict[str, Any]] = []
    bus.add_listener(heard.append, lambda: True, frozenset(JOB_EVENT_NAMES.values()))
    bus.publish_recorded(recorded_pass(), 7)
    want = expected(queue)
    assert delivered == [[event_frame(message) for message in want]]
    assert plain == [want]
    assert [channel.receive.receive_nowait() for _ in want] == want
    assert heard == [m for m in expected(None) if m["event"].startswith("job:")]


def test_a_run_its_encoder_cannot_encode_drops_only_that_encoder_s_subscribers() -> None:
    bus = EventBus()

    def broken(name: str, queue: str, jobs: list[Any], now_ms: float) -> list[Any]:
        raise ValueError("a bug")

    dropped: list[str] = []
    for label in ("first", "second"):
        subscription = bus.subscribe_direct(
            ["job:pushed"], None, event_frame, lambda items: None,
            lambda label=label: dropped.append(label), broken,
        )  # fmt: skip
    healthy: list[list[bytes]] = []
    bus.subscribe_direct(
        ["job:pushed"], None, event_frame, healthy.append, lambda: None, job_event_frames
    )
    jobs = [FakeJob("q", "a"), FakeJob("q", "b")]
    bus.publish_recorded([("pushed", job, {}) for job in jobs], 1)
    assert sorted(dropped) == ["first", "second"]
    assert subscription.dropped == DROPPED_FAILED
    assert healthy == [job_event_frames("job:pushed", "q", jobs, 1)]
    assert [s.dropped for s in bus.subscriptions] == [None]  # the others left, as failed


@pytest.mark.parametrize("kind", ["pushed", "active", "completed"])
@pytest.mark.parametrize("queue", ["q", 'qu"ëue\\' * 20])
@pytest.mark.parametrize("now_ms", [0, 1.5, 1_733_400_000_123])
def test_a_run_s_json_is_the_json_of_its_events_one_by_one(
    kind: str, queue: str, now_ms: float
) -> None:
    jobs = [FakeJob(queue, job_id) for job_id in [*IDS, 'q"uote\\', "\u2028\x00"]]
    one_by_one = [reply_json(event_message(kind, job, {}, now_ms)) for job in jobs]
    assert job_event_json(JOB_EVENT_NAMES[kind], queue, jobs, now_ms) == one_by_one
