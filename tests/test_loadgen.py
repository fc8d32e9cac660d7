"""The load generator's own logic: percentiles, pre-encoded frames, frame splitting, and how
its drivers keep a window full and account for jobs (no sockets, no timing)."""

from __future__ import annotations

import multiprocessing
from typing import Any

import msgspec
import pytest

from benchmarks.loadgen import (
    PULL,
    PULLB,
    FrameTemplate,
    JobRef,
    LoadError,
    PullbDriver,
    PushDriver,
    Reply,
    WorkerDriver,
    _share_progress,
    encode_frame,
    percentile,
    split_frames,
)

decode_any = msgspec.msgpack.decode


def body(frame: bytes) -> object:
    """The decoded message of one length-prefixed frame (checking the prefix)."""
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return decode_any(frame[4:])


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.999) == 100.0
    assert percentile([7.0], 0.999) == 7.0
    assert percentile([], 0.5) != percentile([], 0.5)  # NaN: no samples


def test_a_template_frame_is_the_message_with_its_req_id() -> None:
    message = {"cmd": "PUSH", "queue": "q", "name": "n", "data": {"body": "x" * 80}}
    template = FrameTemplate(message)
    assert body(template.frame("0000002a")) == {**message, "reqId": "0000002a"}
    assert template.frame("00000001") != template.frame("00000002")


def test_split_frames_keeps_a_partial_frame_for_the_next_read() -> None:
    stream = encode_frame({"ok": True, "reqId": "a"}) + encode_frame({"ok": True, "reqId": "b"})
    buf = bytearray(stream[:-3])
    assert split_frames(buf, decode_any) == [{"ok": True, "reqId": "a"}]
    buf += stream[-3:]
    assert split_frames(buf, decode_any) == [{"ok": True, "reqId": "b"}]
    assert buf == bytearray()


def reply_to(
    driver: PushDriver | WorkerDriver | PullbDriver, frame: bytes, **fields: Any
) -> list[bytes]:
    """The ok reply to ``frame``, fed to ``driver``; returns the frames it sends next."""
    message = body(frame)
    assert isinstance(message, dict)
    return driver.handle([Reply(ok=True, reqId=message["reqId"], **fields)], 1.0)


def test_a_push_driver_keeps_its_window_full_until_the_quota() -> None:
    driver = PushDriver("q", quota=5, window=3)
    first = driver.start(0.0)
    assert len(first) == 3
    assert len(reply_to(driver, first[0], id="1")) == 1
    assert len(reply_to(driver, first[1], id="2")) == 1
    assert reply_to(driver, first[2], id="3") == []  # all five sent
    assert not driver.done
    assert len(driver.latencies) == 3


def test_a_push_reply_without_an_id_is_an_error() -> None:
    driver = PushDriver("q", quota=1, window=1)
    (frame,) = driver.start(0.0)
    with pytest.raises(LoadError):
        reply_to(driver, frame)


def test_a_paced_push_driver_sends_only_what_is_due() -> None:
    driver = PushDriver("q", quota=100, window=50, rate=10.0)
    assert driver.start(0.0) == []
    out: list[bytes] = []
    driver.tick(0.55, out)  # due: the pushes of t=0.0, 0.1, ..., 0.5
    assert len(out) == 6
    message = body(out[0])
    assert isinstance(message, dict) and message["data"]["t"] == 0.55


def test_a_worker_chain_acks_what_it_pulls_and_records_push_to_start() -> None:
    driver = WorkerDriver("q", quota=None, chains=1)
    (pull,) = driver.start(0.0)
    (ack,) = reply_to(driver, pull, job=JobRef(id="7", data={"t": 0.25}))
    assert body(ack) == {"cmd": "ACK", "id": "7", "reqId": "00000002"}
    assert list(driver.push_to_start) == [0.75]
    (again,) = reply_to(driver, ack)
    assert body(again) == {"cmd": "PULL", "queue": "q", "timeout": 500, "reqId": "00000003"}
    assert driver.pending["00000003"][0] == PULL and driver.finished_jobs == 1
    driver.stop()
    assert driver.done


def test_an_empty_pull_from_a_filled_queue_is_an_error() -> None:
    driver = WorkerDriver("q", quota=2, chains=2)
    first = driver.start(0.0)
    with pytest.raises(LoadError):
        reply_to(driver, first[0])


def test_a_short_pullb_leaves_the_rest_of_the_quota_to_the_next_one() -> None:
    driver = PullbDriver("q", quota=5, chains=1, batch=4)
    (pullb,) = driver.start(0.0)
    assert body(pullb)["count"] == 4  # type: ignore[index]
    (ackb,) = reply_to(driver, pullb, jobs=[JobRef(id="1"), JobRef(id="2")])
    assert body(ackb)["ids"] == ["1", "2"]  # type: ignore[index]
    (next_pullb,) = reply_to(driver, ackb)
    assert body(next_pullb)["count"] == 3  # type: ignore[index]
    assert driver.finished_jobs == 2 and driver.pending["00000003"][0] == PULLB


def test_workers_stop_once_every_pushed_job_is_acknowledged_across_processes() -> None:
    acked = multiprocessing.get_context("spawn").Value("q", 3)  # another process acked 3
    worker = WorkerDriver("q", quota=None, chains=1)
    conns: list[Any] = [(None, PushDriver("q", quota=5, window=1), None), (None, worker, None)]
    worker.finished_jobs = 1
    reported = _share_progress(conns, acked, total=5, reported=0)
    assert (reported, acked.value, worker.done) == (1, 4, False)
    worker.finished_jobs = 2
    assert _share_progress(conns, acked, total=5, reported=reported) == 2
    assert acked.value == 5 and worker.done
