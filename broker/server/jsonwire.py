"""The encodings of the HTTP and WebSocket front ends, all in one place: requests in, replies
out, never raising.

Requests: a JSON text becomes a command through the same decoder and validation as a TCP frame
(`command_from`), and whatever JSON can express that MessagePack cannot (integers beyond 64
bits, nesting deeper than the decoders follow) is a clear error, never an exception.

Replies: `reply_json` is the one place a reply becomes JSON. Stored job data is MessagePack, which
holds values JSON cannot; they are shown as follows (README, "Operating"):

- an extension type other than 0 (0 is JavaScript's `undefined`, shown as null) becomes
  `{"$ext": <type>, "data": "<base64 of its bytes>"}`; MessagePack binary becomes a base64 string;
- a map key that is not a string or a number (nil, an array, an extension) becomes its JSON text
  (`"null"`, `"[1,2]"`);
- NaN and the infinities become null (as JavaScript's `JSON.stringify` does);
- a stored value that is not readable MessagePack at all (e.g. a timestamp extension of the
  wrong length) becomes `{"$msgpack": "<base64 of its bytes>"}`.

If even that fails, the reply is `{"ok": false, "error": "Reply cannot be shown as JSON"}`.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from protocol import Rejected, decode_command

from ..engine.state.wireform import wire_parts

log = logging.getLogger(__name__)

JS_UNDEFINED_EXT = 0
UNSHOWABLE = b'{"ok":false,"error":"Reply cannot be shown as JSON"}'
INVALID_JSON = "Invalid JSON body"
NUMBER_TOO_LARGE = "Numbers must fit in 64 bits"
INVALID_FORMAT = "Invalid command format"


class JsonExt(msgspec.Struct, frozen=True, rename={"code": "$ext"}):
    """A MessagePack extension value as JSON shows it (frozen: usable as a map key)."""

    code: int
    data: bytes


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == JS_UNDEFINED_EXT:
        return None
    return JsonExt(code, bytes(data))


_to_msgpack = msgspec.msgpack.Encoder().encode
_from_msgpack = msgspec.msgpack.Decoder(ext_hook=_ext_hook).decode
_from_msgpack_plain = msgspec.msgpack.Decoder().decode
_to_json = msgspec.json.Encoder().encode
_from_json = msgspec.json.Decoder().decode


def parse_json(text: bytes | bytearray | str) -> Any:
    """Decode a JSON text; raises ValueError(INVALID_JSON) for anything that is not JSON."""
    try:
        return _from_json(text)
    except (msgspec.DecodeError, RecursionError, ValueError) as exc:
        raise ValueError(INVALID_JSON) from exc


def decode_message(message: str | bytes) -> Any:
    """A WebSocket message as plain values: a binary message is MessagePack, a text one JSON.
    Raises ValueError("Invalid command format") when it is neither."""
    if isinstance(message, str):
        try:
            return parse_json(message)
        except ValueError as exc:
            raise ValueError(INVALID_FORMAT) from exc
    try:
        return _from_msgpack_plain(message)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(INVALID_FORMAT) from exc


def encode_reply(reply: Any, binary: bool) -> str | bytes:
    """A reply in the form of its request: MessagePack for binary, else JSON text."""
    if binary:
        return reply_msgpack(reply)
    return reply_json(reply).decode()


def reply_msgpack(reply: Any) -> bytes:
    """A reply as MessagePack (what TCP frames carry)."""
    return _to_msgpack(reply)


def msgpack_key(value: Any) -> bytes:
    """`value` (any decoded value, hashable or not) as MessagePack bytes: a key to match a
    reply's reqId with its request's."""
    return _to_msgpack(value)


def command_from(message: Any) -> Any:
    """The command a decoded JSON message stands for, validated as a TCP frame would be; a
    `Rejected` (never an exception) when it is not one."""
    req_id = message.get("reqId") if isinstance(message, dict) else None
    try:
        payload = _to_msgpack(message)
    except OverflowError:
        return Rejected(req_id, NUMBER_TOO_LARGE)
    except (TypeError, ValueError, RecursionError):
        return Rejected(req_id, INVALID_FORMAT)
    return decode_command(payload)


def reply_json(reply: Any) -> bytes:
    """A reply (which may hold raw MessagePack) as JSON text. Never raises."""
    try:
        plain = _from_msgpack(_to_msgpack(reply))
    except Exception:  # a stored value msgspec will not read (an invalid timestamp)
        try:
            plain = _readable(reply)
        except Exception:
            log.exception("a reply could not be read back from MessagePack")
            return UNSHOWABLE
    try:
        return _to_json(plain)
    except (TypeError, ValueError, RecursionError):
        pass  # a map key JSON cannot hold: the slow path below rewrites keys
    try:
        return _to_json(_string_keys(plain))
    except Exception:
        log.exception("a reply could not be shown as JSON")
        return UNSHOWABLE


def job_event_json(name: str, queue: str, jobs: list[Any], now_ms: float) -> list[bytes]:
    """`reply_json` of each job's event message `name` with no extra data (`{event, ts, data:
    {queue, jobId}}`), in one call: the text around the job id is encoded once for the run
    (see `Subscriber.encode_jobs`). Strings and numbers read back from MessagePack unchanged,
    so this is the JSON `reply_json` writes."""
    head = b'{"event":%s,"ts":%s,"data":{"queue":%s,"jobId":' % (
        _to_json(name),
        _to_json(now_ms),
        _to_json(queue),
    )
    return [head + _to_json(job.id) + b"}}" for job in jobs]


def _readable(value: Any) -> Any:
    """`value` as plain values, each raw MessagePack part read on its own (the slow path)."""
    if isinstance(value, msgspec.Raw):
        try:
            return _from_msgpack(value)
        except (msgspec.DecodeError, ValueError, RecursionError):
            parts = wire_parts(value)  # a pulled job: only its data is unreadable
            if parts is not None:
                return _readable(parts)
            return {"$msgpack": bytes(value)}  # JSON shows bytes as base64
    if isinstance(value, msgspec.Struct):
        value = msgspec.structs.asdict(value)
    if isinstance(value, dict):
        return {key: _readable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_readable(item) for item in value]
    return value


def _string_keys(value: Any) -> Any:
    """`value` with every map key JSON cannot hold replaced by its JSON text."""
    if isinstance(value, dict):
        return {_key(key): _string_keys(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_string_keys(item) for item in value]
    return value


def _key(key: Any) -> Any:
    if isinstance(key, str | int | float) and not isinstance(key, bool):
        return key
    return _to_json(_string_keys(key)).decode()
