"""Interop: drive the broker with the official Python SDK (PyPI ``bunqueue-client`` 0.1.5).

The SDK is synchronous and thread-based (a blocking socket, a daemon reader thread, and for
``Worker`` a poll thread, a heartbeat thread and a ThreadPoolExecutor), so these are plain
``def`` tests: under pytest-trio's trio_mode only ``async def`` tests run under Trio. The broker
behind ``broker_address`` must therefore run outside the test's own thread (its own thread
or process); a blocking SDK call made from inside the broker's Trio loop would deadlock.

Every wait is bounded by ``DEADLINE_S`` and wakes on a ``threading.Event`` set from the
worker's event callbacks; nothing relies on a bare sleep. Each test uses its own queue name,
so a broker shared between tests is fine.

Wire traffic produced here: PUSH / PUSHB with the job name inside
``data``; RegisterWorker (twice on start-up); PULLB {count, timeout, owner, lockTtl} long
polls pipelined with ACK / FAIL / Heartbeat / JobHeartbeatB on the same connection (the
responses must be matched by reqId, not arrival order); UnregisterWorker on close; GetState /
GetResult / GetJob from the producer side.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from bunqueue import Job, Queue, Worker

DEADLINE_S = 20.0
POLL_TIMEOUT_MS = 200  # short long-poll: Worker.close() waits for the PULLB in flight
HEARTBEAT_S = 0.2  # short, so Heartbeat / JobHeartbeatB really reach the broker


def _queue_name(tag: str) -> str:
    return f"sdk-{tag}-{uuid.uuid4().hex[:12]}"


class _Recorder:
    """Collects a Worker's events and wakes the test whenever one arrives."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.completed: list[tuple[str, Any]] = []
        self.failed: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        # The SDK's heartbeat thread can race Worker.close() (a JobHeartbeatB sent after the
        # connection was closed fails locally with EBADF); such errors are not the broker's.
        self.closing = False
        self.errors_while_closing: list[BaseException] = []

    def attach(self, worker: Worker) -> None:
        worker.on("completed", self._on_completed)
        worker.on("failed", self._on_failed)
        worker.on("error", self._on_error)
        worker.on("closed", self.changed.set)

    def _on_completed(self, job: Job, result: Any) -> None:
        with self.lock:
            self.completed.append((job.id, result))
        self.changed.set()

    def _on_failed(self, job: Job, exc: BaseException) -> None:
        with self.lock:
            self.failed.append((job.id, str(exc)))
        self.changed.set()

    def _on_error(self, exc: BaseException) -> None:
        with self.lock:
            (self.errors_while_closing if self.closing else self.errors).append(exc)
        self.changed.set()

    def wait_for(self, worker: Worker, what: str, predicate: Callable[[], bool]) -> None:
        """Block until ``predicate()`` holds; fail at the deadline or if the worker died."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            self.changed.clear()
            with self.lock:
                if predicate():
                    return
            if worker.is_closed():
                pytest.fail(f"worker stopped while waiting for {what}; errors: {self.errors!r}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                with self.lock:
                    pytest.fail(
                        f"timed out after {DEADLINE_S}s waiting for {what}; "
                        f"completed={len(self.completed)} failed={self.failed!r} "
                        f"errors={self.errors!r}"
                    )
            # Wake on any worker event; the 0.5 s cap only re-checks is_closed().
            self.changed.wait(min(remaining, 0.5))


def _wait_for_heartbeat(address: tuple[str, int], job_id: str) -> None:
    """Block until the broker has a heartbeat for the active job later than its start."""
    deadline = time.monotonic() + DEADLINE_S
    with socket.create_connection(address, timeout=DEADLINE_S) as conn:
        while time.monotonic() < deadline:
            body = msgspec.msgpack.encode({"cmd": "GetJob", "id": job_id})
            conn.sendall(struct.pack(">I", len(body)) + body)
            size = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))[0]
            job = msgspec.msgpack.decode(conn.recv(size, socket.MSG_WAITALL))["job"]
            if job["lastHeartbeat"] > job["startedAt"]:
                return
            # Poll the broker; the heartbeat thread beats every HEARTBEAT_S.
            threading.Event().wait(HEARTBEAT_S / 4)
    pytest.fail(f"no heartbeat reached the broker for {job_id} within {DEADLINE_S}s")


@contextmanager
def _queue(address: tuple[str, int], name: str) -> Iterator[Queue]:
    host, port = address
    queue = Queue(name, host=host, port=port, command_timeout=DEADLINE_S)
    try:
        yield queue
    finally:
        queue.close()


@contextmanager
def _worker(
    address: tuple[str, int],
    name: str,
    processor: Callable[[Job], Any],
    recorder: _Recorder,
    **options: Any,
) -> Iterator[Worker]:
    host, port = address
    worker = Worker(
        name,
        processor,
        host=host,
        port=port,
        autorun=False,
        poll_timeout_ms=POLL_TIMEOUT_MS,
        heartbeat_interval_s=HEARTBEAT_S,
        **options,
    )
    recorder.attach(worker)
    worker.start()
    try:
        worker.wait_until_ready(DEADLINE_S)
        yield worker
    finally:
        with recorder.lock:
            recorder.closing = True
        closed = worker.close(DEADLINE_S)
        assert closed, "Worker.close() did not finish within the deadline"


def test_add_then_worker_processes_it(broker_address: tuple[str, int]) -> None:
    name = _queue_name("add")
    recorder = _Recorder()
    seen: list[tuple[str, Any]] = []

    def process(job: Job) -> dict[str, Any]:
        seen.append((job.id, job.data))
        # Stay active until the worker's JobHeartbeatB has reached the broker with a live lease.
        _wait_for_heartbeat(broker_address, job.id)
        return {"doubled": job.data["n"] * 2}

    with _queue(broker_address, name) as queue:
        job = queue.add("double", {"n": 21})
        assert job.id and job.id != "None"

        with _worker(broker_address, name, process, recorder, concurrency=2) as worker:
            recorder.wait_for(worker, "the job to complete", lambda: len(recorder.completed) >= 1)

        assert recorder.completed == [(job.id, {"doubled": 42})]
        assert [job_id for job_id, _ in seen] == [job.id]
        # The job name travels inside ``data`` on the wire; whether the broker hands it back
        # there is not asserted, only that the user's fields arrive intact.
        assert seen[0][1]["n"] == 21
        assert recorder.failed == []
        assert recorder.errors == []

        assert queue.get_state(job.id) == "completed"
        assert queue.get_result(job.id) == {"doubled": 42}
        stored = queue.get_job(job.id)
        assert stored is not None
        assert stored.id == job.id
        assert queue.get_job(f"missing-{uuid.uuid4().hex}") is None


def test_add_bulk_every_job_processed_exactly_once(broker_address: tuple[str, int]) -> None:
    name = _queue_name("bulk")
    recorder = _Recorder()
    total = 20
    calls: Counter[str] = Counter()
    calls_lock = threading.Lock()

    def process(job: Job) -> int:
        with calls_lock:
            calls[job.id] += 1
        return int(job.data["i"])

    with _queue(broker_address, name) as queue:
        ids = queue.add_bulk([{"name": "item", "data": {"i": i}} for i in range(total)])
        assert len(ids) == total
        assert len(set(ids)) == total

        with _worker(
            broker_address, name, process, recorder, concurrency=4, batch_size=10
        ) as worker:
            recorder.wait_for(
                worker, f"{total} completions", lambda: len(recorder.completed) >= total
            )

        # After close(): nothing is in flight any more, so late duplicates would show up here.
        assert set(calls) == set(ids)
        assert all(count == 1 for count in calls.values()), calls
        assert sorted(job_id for job_id, _ in recorder.completed) == sorted(ids)
        by_id = dict(recorder.completed)
        assert [by_id[job_id] for job_id in ids] == list(range(total))
        assert recorder.failed == []
        assert recorder.errors == []
        assert all(queue.get_state(job_id) == "completed" for job_id in ids)


def test_failed_first_attempt_is_retried_then_completes(broker_address: tuple[str, int]) -> None:
    name = _queue_name("retry")
    recorder = _Recorder()
    attempts_seen: list[int] = []

    def process(job: Job) -> str:
        attempts_seen.append(job.attempts)
        if len(attempts_seen) == 1:
            raise RuntimeError("first attempt fails on purpose")
        return "second time lucky"

    with _queue(broker_address, name) as queue:
        job = queue.add("flaky", {"k": "v"}, attempts=3, backoff=10)

        with _worker(broker_address, name, process, recorder, concurrency=1) as worker:
            recorder.wait_for(
                worker, "the retried job to complete", lambda: len(recorder.completed) >= 1
            )

        assert recorder.failed == [(job.id, "first attempt fails on purpose")]
        assert recorder.completed == [(job.id, "second time lucky")]
        # Run twice; the job record the worker pulled counts the earlier failed attempts.
        assert attempts_seen == [0, 1]
        assert recorder.errors == []

        assert queue.get_state(job.id) == "completed"
        assert queue.get_result(job.id) == "second time lucky"
        stored = queue.get_job(job.id)
        assert stored is not None
        assert stored.attempts == 1
        assert stored.max_attempts == 3


def test_flow_producer_children_run_before_the_parent(broker_address: tuple[str, int]) -> None:
    """FlowProducer.add sends PUSH (children with parentId 'pending'), PUSH (parent with
    dependsOn) and UpdateParent; 2.9.5 refuses the placeholder, trioq accepts it."""
    from bunqueue import FlowProducer

    children_queue, parent_queue = _queue_name("kids"), _queue_name("parent")
    child_recorder, parent_recorder = _Recorder(), _Recorder()
    order: list[str] = []
    seen_by_parent: dict[str, Any] = {}

    def child(job: Job) -> int:
        order.append("child")
        return int(job.data["n"]) * 10

    def parent(job: Job) -> str:
        order.append("parent")
        seen_by_parent.update(job.get_children_values())
        return "done"

    host, port = broker_address
    producer = FlowProducer(host=host, port=port)
    try:
        tree = producer.add(
            {
                "name": "report",
                "queueName": parent_queue,
                "data": {"kind": "parent"},
                "children": [
                    {"name": "part", "queueName": children_queue, "data": {"n": n}} for n in (1, 2)
                ],
            }
        )
    finally:
        producer.close()
    parent_id = tree.job.id
    with (
        _worker(broker_address, parent_queue, parent, parent_recorder) as parent_worker,
        _worker(broker_address, children_queue, child, child_recorder) as child_worker,
    ):
        child_recorder.wait_for(
            child_worker, "both children", lambda: len(child_recorder.completed) >= 2
        )
        parent_recorder.wait_for(
            parent_worker, "the parent", lambda: len(parent_recorder.completed) >= 1
        )
    assert order == ["child", "child", "parent"]
    assert sorted(seen_by_parent.values()) == [10, 20]
    assert all(key.startswith(f"{children_queue}:") for key in seen_by_parent)
    assert parent_recorder.completed == [(parent_id, "done")]
    assert child_recorder.errors == [] and parent_recorder.errors == []
