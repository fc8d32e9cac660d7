"""What goes on the wire: command names, frame encoding, and the typed shapes of replies.

Framing and the command vocabulary come from `protocol/` (the broker's own sans-IO layer):
`append_frame` encodes a request straight onto a connection's output buffer, `FrameDecoder`
splits what the socket reads into frames, and every command name used here is checked against
the names the broker's command types accept, at import.

Replies are decoded twice on purpose: the connection's reader decodes only `reqId` and `type`
(msgspec skips the rest without building objects) to route a frame, and the caller decodes the
frame into the shape it needs. Jobs keep `data` raw, so a payload is decoded once, into the
type its reader asks for (a msgspec Struct, or plain values).
"""

from __future__ import annotations

import functools
from typing import Any, Final, TypeVar

import msgspec

from protocol.codec import COMMAND_NAMES, append_frame
from protocol.commands import DEFAULT_LOCK_TTL_MS, MAX_POLL_MS, MAX_PULL_BATCH
from protocol.extensions import ext_hook
from protocol.framing import FrameDecoder

from ._errors import ServerError

__all__ = [
    "DEFAULT_LOCK_TTL_MS",
    "MAX_POLL_MS",
    "MAX_PULL_BATCH",
    "AckBatchReply",
    "Envelope",
    "FrameDecoder",
    "IdsReply",
    "PulledJobs",
    "WireJob",
    "append_frame",
    "command",
    "decode_reply",
    "decode_value",
    "encode",
]

T = TypeVar("T")


def command(name: str) -> str:
    """`name`, checked to be a command the broker's protocol layer knows (at import)."""
    if name not in COMMAND_NAMES:
        raise AssertionError(f"{name} is not a bunqueue command")
    return name


class Envelope(msgspec.Struct):
    """What the reader needs to route a frame: its `reqId`, or `type: "event"`."""

    reqId: Any = None
    type: Any = None


decode_envelope: Final = msgspec.msgpack.Decoder(Envelope, ext_hook=ext_hook).decode
_decode_map = msgspec.msgpack.Decoder(dict[str, Any], ext_hook=ext_hook).decode
_decode_any = msgspec.msgpack.Decoder(ext_hook=ext_hook).decode
encode: Final = msgspec.msgpack.Encoder().encode


def decode_reply(payload: bytes, name: str) -> dict[str, Any]:
    """A reply as a dict; raises ServerError when it says `ok: false`."""
    reply = _decode_map(payload)
    if reply.get("ok") is not True:
        raise ServerError(str(reply.get("error") or f"{name} failed"), name)
    return reply


@functools.lru_cache(maxsize=256)
def _decoder(kind: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(kind, ext_hook=ext_hook)


def decode_value(raw: bytes | msgspec.Raw | None, kind: Any = Any) -> Any:
    """Decode a raw MessagePack value as `kind` (Any: plain Python values; a msgspec Struct:
    that Struct, validated). An absent value is None."""
    if raw is None:
        return None
    if kind is Any:
        return _decode_any(raw)
    return _decoder(kind).decode(raw)


class WireJob(msgspec.Struct):
    """A job as the broker shows it, with the fields this client reads.

    Fields the reference server may send as JavaScript `undefined` are typed `Any`: msgpackr
    encodes `undefined` as an extension, which only an untyped field can take (as None).
    """

    id: str
    queue: Any = None
    name: Any = None
    data: msgspec.Raw = msgspec.Raw()
    priority: Any = 0
    createdAt: Any = None
    runAt: Any = None
    startedAt: Any = None
    completedAt: Any = None
    attempts: Any = 0
    maxAttempts: Any = None
    progress: Any = 0
    progressMessage: Any = None
    stacktrace: Any = None
    tags: Any = None
    dependsOn: Any = None
    childrenIds: Any = None
    parentId: Any = None
    groupId: Any = None
    customId: Any = None
    uniqueKey: Any = None
    delay: Any = None
    timeout: Any = None
    ttl: Any = None
    lifo: Any = False
    state: Any = None
    returnvalue: msgspec.Raw = msgspec.Raw()
    failedReason: Any = None


class _Reply(msgspec.Struct):
    ok: Any = False
    error: Any = None


class IdsReply(_Reply):
    """PUSHB's answer."""

    ids: list[str] = []


class PulledJobs(_Reply):
    """PULLB's answer: the jobs, and their lease tokens when pulled with an owner."""

    jobs: list[WireJob] = []
    tokens: Any = None


class AckBatchReply(_Reply):
    """ACKB's answer (`data.ignoredIds` when a deadline finalized some jobs first)."""

    data: Any = None


class JobReply(_Reply):
    """GetJob's answer."""

    job: WireJob | None = None


class JobsReply(_Reply):
    """The answer of GetJobs and Dlq."""

    jobs: list[WireJob] = []


class FlowReply(_Reply):
    """PUSHF's answer: `data.jobs`."""

    data: Any = None


def decode_typed(payload: bytes, kind: type[T], name: str) -> T:
    """A reply decoded as `kind` (one of the reply Structs above); raises ServerError when it
    says `ok: false`."""
    reply = _decoder(kind).decode(payload)  # type: ignore[arg-type]  # a Struct class hashes
    if reply.ok is not True:
        raise ServerError(str(reply.error or f"{name} failed"), name)
    return reply  # type: ignore[no-any-return]
