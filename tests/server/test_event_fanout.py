"""How a committed pass's events reach subscribers: each subscriber gets its share of the pass
at once, in order (one socket write on TCP), each event encoded once for every subscriber of a
transport, nothing built for a subscriber whose queue filter refuses the event, listeners that
are not active never called; and the old bounds still hold (at most SUBSCRIBER_BUFFER events
at once, a connection's unread-bytes budget, frames never cut)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

import broker.events
import broker.server.sse
import broker.server.tcp
import broker.server.websocket
from broker.events import DROPPED_FAILED, EVENT_NAMES, SUBSCRIBER_BUFFER
from broker.node.app import App
from broker.server.frontdoor import InFlight
from broker.server.session import Session
from broker.server.unsent import UnsentBytes
from protocol import FrameDecoder, decode_any, encode, frame
from tests.support.client import FrameClient
from tests.support.http import SseClient
from tests.support.websocket import call, connect

JOBS = [{"name": "n", "data": i} for i in range(5)]


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """Replace `module.name` by a wrapper that records each first argument; returns the record."""
    calls: list[Any] = []
    real = getattr(module, name)

    def spy(*args: Any) -> Any:
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return calls


def counting_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Record the runs of job events TCP encodes at once (`job_event_frames`): their queue and
    job ids, one entry per call."""
    runs: list[tuple[str, list[str]]] = []
    real = broker.server.tcp.job_event_frames

    def spy(name: str, queue: str, jobs: list[Any], now_ms: float) -> list[bytes]:
        runs.append((queue, [job.id for job in jobs]))
        return real(name, queue, jobs, now_ms)

    monkeypatch.setattr(broker.server.tcp, "job_event_frames", spy)
    return runs


def frames_of(data: bytes) -> list[Any]:
    """The decoded frames of a run of bytes holding whole frames."""
    return [decode_any(payload) for payload in FrameDecoder().feed(data)]


async def test_a_pass_s_events_reach_a_tcp_subscriber_in_order_in_one_write(
    app: App, client: FrameClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    real_sender = broker.server.tcp.direct_sender

    def recording_sender(stream: trio.abc.Stream) -> Any:
        send = real_sender(stream)
        if send is None:  # a memory stream (`client`): written by its writer task
            return None

        def record(data: bytearray) -> int:
            writes.append(bytes(data))
            return send(data)

        return record

    monkeypatch.setattr(broker.server.tcp, "direct_sender", recording_sender)
    ours, theirs = trio.socket.socketpair()
    assert app.tcp is not None
    app.tcp.adopt(trio.SocketStream(ours))
    subscriber = FrameClient(trio.SocketStream(theirs))
    assert (await subscriber.call("SubscribeEvents", events=["job:pushed"], queue="q"))["ok"]
    ids = (await client.call("PUSHB", queue="q", jobs=JOBS))["ids"]
    got = [(await subscriber.receive())["event"] for _ in ids]
    assert [(e["eventType"], e["jobId"]) for e in got] == [("pushed", i) for i in ids]
    with_events = [w for w in writes if any(f.get("type") == "event" for f in frames_of(w))]
    assert len(with_events) == 1
    assert [f["event"]["jobId"] for f in frames_of(with_events[0])] == ids
    await subscriber.stream.aclose()


async def test_an_event_a_subscriber_s_queue_refuses_is_neither_built_nor_encoded(
    app: App, client: FrameClient, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = counting(monkeypatch, broker.events, "event_message")
    encoded = counting(monkeypatch, broker.server.tcp, "event_frame")
    runs = counting_runs(monkeypatch)
    subscriber = await connect()
    assert (await subscriber.call("SubscribeEvents", queue="q"))["ok"] is True
    await client.call("PUSHB", queue="elsewhere", jobs=JOBS)
    assert (built, encoded, runs) == ([], [], [])  # no listener is active: nobody wants them
    job_id = (await client.call("PUSH", queue="q", data=1))["id"]
    event = (await subscriber.receive())["event"]
    assert (event["eventType"], event["jobId"]) == ("pushed", job_id)
    # Encoded straight from the job: TCP needs no message built for a job event.
    assert (built, encoded, runs) == ([], [], [("q", [job_id])])


async def test_each_event_is_encoded_once_for_all_tcp_subscribers(
    app: App, client: FrameClient, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = counting(monkeypatch, broker.server.tcp, "event_frame")
    runs = counting_runs(monkeypatch)
    subscribers = [await connect() for _ in range(3)]
    for subscriber in subscribers:
        assert (await subscriber.call("SubscribeEvents", events=["job:pushed"]))["ok"] is True
    ids = (await client.call("PUSHB", queue="q", jobs=JOBS))["ids"]
    for subscriber in subscribers:
        assert [(await subscriber.receive())["event"]["jobId"] for _ in ids] == ids
    # The batch's events are one run, encoded in one call for the three subscribers.
    assert (encoded, runs) == ([], [("q", ids)])


async def test_each_event_is_encoded_once_for_all_websocket_subscribers(
    app: App, nursery: trio.Nursery, client: FrameClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The subscription keeps the encoders it was made with: count only event messages.
    encoded = counting(monkeypatch, broker.server.websocket, "reply_json")
    runs: list[list[str]] = []
    real = broker.server.websocket.job_event_json

    def spy(name: str, queue: str, jobs: list[Any], now_ms: float) -> list[bytes]:
        runs.append([job.id for job in jobs])
        return real(name, queue, jobs, now_ms)

    monkeypatch.setattr(broker.server.websocket, "job_event_json", spy)
    watchers = [await connect(app, nursery) for _ in range(2)]
    for watcher in watchers:
        assert (await call(watcher, cmd="Subscribe", events=["job:pushed"], reqId="s"))["ok"]
    ids = (await client.call("PUSHB", queue="q", jobs=JOBS))["ids"]
    for watcher in watchers:
        got = [json.loads(await watcher.get_message()) for _ in ids]
        assert [(e["event"], e["data"]["jobId"]) for e in got] == [("job:pushed", i) for i in ids]
    # The batch's events are one run, encoded in one call for both sockets.
    assert [m for m in encoded if "event" in m and "ok" not in m] == []
    assert runs == [ids]


async def test_a_listener_that_is_not_active_is_not_called(app: App, client: FrameClient) -> None:
    assert app.actor is not None
    heard: list[str] = []
    active = False
    app.actor.bus.add_listener(lambda m: heard.append(m["data"]["jobId"]), lambda: active)
    subscription = app.actor.bus.subscribe(["job:pushed"])  # the engine records events
    await client.call("PUSH", queue="q", data=1)
    assert heard == [] and subscription.receive.receive_nowait()["event"] == "job:pushed"
    active = True
    job_id = (await client.call("PUSH", queue="q", data=2))["id"]
    assert heard == [job_id]


async def test_without_sse_clients_the_ring_keeps_nothing(app: App, client: FrameClient) -> None:
    assert app.actor is not None and app.http is not None
    app.actor.bus.subscribe(["*"])  # someone listens, but not over SSE
    await client.call("PUSHB", queue="q", jobs=JOBS)
    assert app.http.events.last_id == 0 and not app.http.events.events


class RecordingStream(trio.abc.Stream):
    """A stream recording each `send_all` (the server's side of an SSE client)."""

    def __init__(self, stream: trio.abc.Stream, writes: list[bytes]) -> None:
        self.stream = stream
        self.writes = writes

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Record, then send."""
        self.writes.append(bytes(data))
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """As the stream."""
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """As the stream."""
        return bytes(await self.stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        """As the stream."""
        await self.stream.aclose()


async def test_sse_clients_get_a_pass_s_events_in_one_write_formatted_once(
    app: App, nursery: trio.Nursery, client: FrameClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    formatted = counting(monkeypatch, broker.server.sse, "format_event")
    writes: list[list[bytes]] = [[], []]

    def pair(writes: list[bytes]) -> Any:
        def recording_pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
            ours, server = trio.testing.memory_stream_pair()
            return ours, RecordingStream(server, writes)

        return recording_pair

    streams = [await SseClient.open(app, nursery, stream_pair=pair(w)) for w in writes]
    for stream in streams:
        await stream.message()  # the greeting
    ids = (await client.call("PUSHB", queue="q", jobs=JOBS))["ids"]
    for stream, written in zip(streams, writes, strict=True):
        got = [json.loads((await stream.message()).split("data: ")[1])["jobId"] for _ in ids]
        assert got == ids
        assert sum(b"event: job:pushed" in w for w in written) == 1  # one write for them all
    assert len(formatted) == len(ids)  # each once, for both clients


async def test_a_tcp_subscriber_gets_at_most_the_buffer_at_once_then_is_dropped(
    app: App,
) -> None:
    assert app.actor is not None and app.tcp is not None
    ours, theirs = trio.socket.socketpair()  # the socket takes the events at once
    app.tcp.adopt(trio.SocketStream(ours))
    subscriber = FrameClient(trio.SocketStream(theirs))
    assert (await subscriber.call("SubscribeEvents", events=["job:pushed"]))["ok"] is True
    messages = [
        {"event": "job:pushed", "ts": 1.0, "data": {"queue": "q", "jobId": str(n)}}
        for n in range(SUBSCRIBER_BUFFER + 2)
    ]
    app.actor.bus.publish(messages)
    got = []
    with pytest.raises(EOFError):
        while True:
            got.append((await subscriber.receive())["event"]["jobId"])
    # One being sent and SUBSCRIBER_BUFFER behind it: the one after that is too many.
    assert got == [str(n) for n in range(SUBSCRIBER_BUFFER + 1)]
    assert not app.actor.bus.subscriptions
    await subscriber.stream.aclose()


def test_event_frames_beyond_what_the_socket_takes_wait_whole_until_the_budget_is_passed() -> None:
    taken: list[bytes] = []

    def socket(data: bytearray) -> int:  # takes 10 bytes, then nothing
        taken.append(bytes(data[:10]))
        return 10

    session = Session(set(), InFlight(), direct_send=socket, unsent=UnsentBytes(250, 1 << 20))
    frames = [frame(encode({"n": n, "pad": "x" * 90})) for n in range(5)]
    size = len(frames[0])
    # As if sent one by one, each while the session is not full: the first (its rest, after
    # the 10 bytes the socket took) and the second leave 198 bytes unsent, under the budget of
    # 250; the third is still sent whole, passing it; the fourth and fifth are not.
    assert session.send_events(frames) == 3
    assert taken == [frames[0][:10]]  # one write for all of them
    assert session.unsent_bytes() == 3 * size - 10 and session.full
    assert session.send_events(frames[3:]) == 0  # full: nothing more


def test_the_catalogue_has_a_tcp_event_type_for_every_name() -> None:
    assert set(broker.events.TCP_EVENT_TYPES) == EVENT_NAMES
    assert broker.events.TCP_EVENT_TYPES["job:active"] == "pulled"
    assert broker.events.TCP_EVENT_TYPES["worker:connected"] == "worker:connected"


async def test_a_subscriber_whose_events_fail_is_dropped_and_the_engine_serves_on(
    app: App, client: FrameClient, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert app.actor is not None
    bus = app.actor.bus
    dropped: list[str | None] = []

    def broken(message: dict[str, Any]) -> bytes:
        raise ValueError("a bug")

    failing = bus.subscribe_direct(
        ["job:pushed"], None, broken, lambda items: None, lambda: dropped.append(failing.dropped)
    )
    tcp = await connect()
    assert (await tcp.call("SubscribeEvents", events=["job:pushed"]))["ok"] is True
    sound = bus.subscribe(["job:pushed"])
    job_id = (await client.call("PUSH", queue="q", data=1))["id"]
    assert dropped == [DROPPED_FAILED]
    assert "could not be encoded" in caplog.text
    assert sound.receive.receive_nowait()["data"]["jobId"] == job_id
    assert (await tcp.receive())["event"]["jobId"] == job_id
    assert failing not in bus.subscriptions
    assert (await client.call("PUSH", queue="q", data=2))["ok"] is True


async def test_a_tcp_subscriber_whose_delivery_fails_is_disconnected(
    app: App, client: FrameClient, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    subscriber = await connect()
    assert (await subscriber.call("SubscribeEvents", events=["job:pushed"]))["ok"] is True

    def broken(self: Session, frames: list[bytes]) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Session, "send_events", broken)
    assert (await client.call("PUSH", queue="q", data=1))["ok"] is True
    with pytest.raises(EOFError):
        await subscriber.receive()
    assert (await client.call("PUSH", queue="q", data=2))["ok"] is True
