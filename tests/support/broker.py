"""Served brokers: blocking frame sockets and trioq subprocesses on real loopback ports.

These helpers frame and decode on their own (struct + msgspec) instead of importing `protocol`, so a
bug in the broker's framing cannot hide behind the same bug in the test client."""

from __future__ import annotations

import itertools
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[2]
MAX_FRAME = 64 * 1024 * 1024

# Bounds on real waits, with margins for a loaded 2-core machine (a reply normally takes ~1 ms).
REPLY_TIMEOUT_S = 10.0
POLL_TIMEOUT_S = 20.0
START_TIMEOUT_S = 20.0

encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder().decode


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its 4-byte big-endian length."""
    return struct.pack(">I", len(payload)) + payload


def encode_frame(message: Any) -> bytes:
    """One framed MessagePack message."""
    return frame(encode(message))


class FrameSocket:
    """A blocking TCP client that sends frames and reads replies with a bounded wait."""

    def __init__(self, address: tuple[str, int], timeout: float = REPLY_TIMEOUT_S) -> None:
        self.address = address
        self.timeout = timeout
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._pending: list[Any] = []
        self._ids = itertools.count(1)

    def __enter__(self) -> FrameSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *messages: Any) -> None:
        """Send messages in one write (pipelined)."""
        self.sock.sendall(b"".join(encode_frame(m) for m in messages))

    def _next_frame(self) -> bytes | None:
        if len(self._buffer) < 4:
            return None
        size = int.from_bytes(self._buffer[:4], "big")
        if len(self._buffer) < 4 + size:
            return None
        payload = bytes(self._buffer[4 : 4 + size])
        del self._buffer[: 4 + size]
        return payload

    def receive(self, timeout: float | None = None) -> Any:
        """The next reply in arrival order; TimeoutError if none in time, EOFError on close."""
        if self._pending:
            return self._pending.pop(0)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            payload = self._next_frame()
            if payload is not None:
                try:
                    return decode(payload)
                except (msgspec.DecodeError, ValueError) as exc:  # ValueError: bad UTF-8
                    raise AssertionError(
                        f"the broker sent a frame that is not valid MessagePack ({exc}): "
                        f"{payload[:300]!r}"
                    ) from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no reply in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(262144)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                if self._buffer:
                    raise EOFError(f"closed with {len(self._buffer)} bytes of a partial frame")
                raise EOFError("connection closed by the server")
            self._buffer += chunk

    def receive_for(self, req_id: Any, timeout: float | None = None) -> Any:
        """The reply echoing `req_id`; replies for others are kept for later `receive` calls."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        kept: list[Any] = []
        try:
            while True:
                reply = self.receive(max(deadline - time.monotonic(), 0.0))
                if isinstance(reply, dict) and reply.get("reqId") == req_id:
                    return reply
                kept.append(reply)
        finally:
            self._pending[:0] = kept

    def call(self, cmd: str, **fields: Any) -> Any:
        """Send one command with a fresh reqId and return its reply."""
        req_id = f"c{next(self._ids)}"
        self.send({"cmd": cmd, "reqId": req_id, **fields})
        return self.receive_for(req_id)

    def read_until_eof(self, timeout: float | None = None) -> list[Any]:
        """Every reply until the server closes; TimeoutError if it does not close in time."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        replies: list[Any] = []
        while True:
            try:
                replies.append(self.receive(max(deadline - time.monotonic(), 0.0)))
            except EOFError:
                return replies


def poll_until(
    probe: Callable[[], Any], accept: Callable[[Any], bool], timeout: float = POLL_TIMEOUT_S
) -> Any:
    """Call `probe` until `accept(result)` or the deadline; returns the last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if accept(result) or time.monotonic() >= deadline:
            return result
        time.sleep(0.005)  # poll interval, bounded by the deadline above


class BrokerProcess:
    """A `trioq serve` subprocess on 127.0.0.1 and a free port, stderr kept in a file.

    Memory-only unless `data_dir` is given, in which case it persists to SQLite there, or
    `postgres` (URL, schema) is, in which case it persists to that PostgreSQL schema.
    """

    def __init__(
        self,
        *args: str,
        stderr_path: Path,
        command: list[str] | None = None,
        data_dir: Path | None = None,
        postgres: tuple[str, str] | None = None,
    ) -> None:
        base = command or [sys.executable, "-m", "broker"]
        argv = [*base, "serve", "--host", "127.0.0.1", "--port", "0", "--http-port", "0"]
        storage = ["--memory"] if data_dir is None else ["--data-dir", str(data_dir)]
        if postgres is not None:
            storage = ["--postgres", postgres[0], "--pg-schema", postgres[1]]
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            [*argv, *storage, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
        )
        try:
            self.address = self._read_address()
        except BaseException:
            self.stop()
            raise

    def _read_address(self) -> tuple[str, int]:
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], START_TIMEOUT_S)
        assert ready, f"broker printed nothing in {START_TIMEOUT_S}s: {self.stderr_text()}"
        line = stdout.readline()
        assert "trioq listening on tcp " in line, f"broker did not start: {line!r}"
        host, port = line.rsplit(" ", 1)[1].strip().rsplit(":", 1)
        return host, int(port)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def died(self, within: float = 2.0) -> bool:
        """Whether the process exits within `within` seconds (used after an unexpected close)."""
        try:
            self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return True

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def kill_hard(self, timeout: float = 10.0) -> int:
        """SIGKILL the process (no cleanup runs in it) and reap it; returns the exit status."""
        self.process.kill()
        return self.process.wait(timeout=timeout)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        """Terminate (if still running), reap, and close the pipes and the stderr file."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()
            self._stderr.close()


BrokerFactory = Callable[..., BrokerProcess]


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


