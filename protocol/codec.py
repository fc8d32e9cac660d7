"""Bytes to commands and replies to bytes, with msgpackr compatibility.

Decoding has a fast path and a slow path. The fast path decodes a frame straight into the tagged
command union (validation included). Only when that fails does the slow path decode the frame
generically to find its `reqId` and `cmd` and to word the error exactly as bunqueue does:
`Invalid command format` (not MessagePack), `Invalid command` (no `cmd`), `Unknown command: X`,
or the validation message of the command itself.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Union

import msgspec

from .admin import ADMIN_COMMANDS
from .commands import WIRE_COMMANDS, PushBatchItems
from .crons import CRON_COMMANDS
from .errors import CommandError, readable_validation_error
from .extensions import ext_hook
from .flows import FLOW_COMMANDS
from .groups import GROUP_COMMANDS
from .lifecycle import LIFECYCLE_COMMANDS
from .values import js_text
from .webhooks import WEBHOOK_COMMANDS

MAX_REQ_ID = 256
MAX_SHOWN_NAME = 64
REQ_ID_TOO_LONG = f"reqId too long (max {MAX_REQ_ID} characters)"

ALL_COMMANDS = (
    WIRE_COMMANDS
    + LIFECYCLE_COMMANDS
    + CRON_COMMANDS
    + FLOW_COMMANDS
    + ADMIN_COMMANDS
    + WEBHOOK_COMMANDS
    + GROUP_COMMANDS
)
COMMAND_NAMES = frozenset(cls.__struct_config__.tag for cls in ALL_COMMANDS)
_AnyCommand = Union[ALL_COMMANDS]  # type: ignore[valid-type]  # noqa: UP007
_decode_command = msgspec.msgpack.Decoder(_AnyCommand, ext_hook=ext_hook).decode
_decode_any = msgspec.msgpack.Decoder(ext_hook=ext_hook).decode
_decode_pushb_items = msgspec.msgpack.Decoder(PushBatchItems, ext_hook=ext_hook).decode
_encoder = msgspec.msgpack.Encoder()
_pack_length = struct.Struct(">I").pack_into  # a frame's 4-byte big-endian length prefix
encode = _encoder.encode



class _Envelope(msgspec.Struct):
    """Just `cmd` and `reqId`: other fields are skipped unchecked, so it decodes frames whose
    other fields are broken (e.g. not UTF-8), and their error can still carry the reqId."""

    cmd: Any = None
    reqId: Any = None


_decode_envelope = msgspec.msgpack.Decoder(_Envelope, ext_hook=ext_hook).decode


class Rejected(msgspec.Struct, frozen=True):
    """A frame that could not become a command: the error text and the reqId, if any."""

    req_id: Any
    error: str


def decode_command(payload: bytes) -> Any:
    """Decode and validate one frame payload; never raises. A large batch comes back `large`,
    its items left for the engine to check (protocol/bulk.py)."""
    try:
        command = _decode_command(payload)
    except Exception:  # any bad frame (invalid UTF-8, too deep, ...) is the slow path's job
        return explain_rejection(payload)
    req_id = command.reqId
    if req_id is None or req_id.__class__ is int:
        return command
    if req_id.__class__ is str and len(req_id) <= MAX_REQ_ID:
        return command
    return command if req_id_fits(req_id) else Rejected(None, REQ_ID_TOO_LONG)


def req_id_fits(req_id: Any) -> bool:
    """A reqId is echoed in the reply, so it is bounded: a string of at most 256 characters,
    or another value of at most 256 bytes of MessagePack."""
    if isinstance(req_id, str):
        return len(req_id) <= MAX_REQ_ID
    if isinstance(req_id, int | float | bool):
        return True
    return len(_encoder.encode(req_id)) <= MAX_REQ_ID


def unknown_command(cmd: Any) -> str:
    """`Unknown command: X` naming what was sent, without a Python repr and at most 64
    characters of it (an error text never echoes a large value)."""
    if isinstance(cmd, bool):
        text = "true" if cmd else "false"
    elif isinstance(cmd, int | float):
        # JavaScript's names for the infinities (NaN never gets here: falsy, `Invalid command`).
        text = js_text(cmd) if math.isfinite(cmd) else ("Infinity" if cmd > 0 else "-Infinity")
    elif isinstance(cmd, str):
        text = cmd if len(cmd) <= MAX_SHOWN_NAME else cmd[:MAX_SHOWN_NAME] + "..."
    else:
        text = "[object Object]"  # what the reference (JavaScript) prints for such a value
    return f"Unknown command: {text}"


def explain_rejection(payload: bytes) -> Rejected:
    """Word the error for a payload the fast path refused (the slow, rare path)."""
    try:
        envelope = _decode_envelope(payload)
    except msgspec.ValidationError:
        # Not a map: "Invalid command" when it is valid MessagePack at all.
        try:
            _decode_any(payload)
        except (msgspec.DecodeError, ValueError, RecursionError):
            return Rejected(None, "Invalid command format")
        return Rejected(None, "Invalid command")
    except (msgspec.DecodeError, ValueError, RecursionError):
        # ValueError covers invalid UTF-8; RecursionError nesting deeper than we follow.
        return Rejected(None, "Invalid command format")
    req_id = envelope.reqId
    if req_id is not None and not req_id_fits(req_id):
        return Rejected(None, REQ_ID_TOO_LONG)
    cmd = envelope.cmd
    if not cmd or cmd != cmd:  # NaN is falsy in JavaScript too
        return Rejected(req_id, "Invalid command")
    if not isinstance(cmd, str) or cmd not in COMMAND_NAMES:
        return Rejected(req_id, unknown_command(cmd))
    try:
        if cmd == "PUSHB":  # the queue, then each item by index (`jobs[i]: ...`)
            _decode_pushb_items(payload)
        _decode_command(payload)
    except CommandError as exc:
        return Rejected(req_id, str(exc))
    except msgspec.ValidationError as exc:
        return Rejected(req_id, readable_validation_error(str(exc)))
    except (msgspec.DecodeError, ValueError, RecursionError):
        return Rejected(req_id, "Invalid command format")
    return Rejected(req_id, "Invalid command")


def append_frame(buffer: bytearray, reply: Any) -> None:
    """Encode `reply` onto the end of `buffer` as one length-prefixed frame, without copies."""
    start = len(buffer)
    buffer += b"\0\0\0\0"
    _encoder.encode_into(reply, buffer, start + 4)
    # One C call, no objects: a slice assignment of bytes would copy them to a bytearray first.
    _pack_length(buffer, start, len(buffer) - start - 4)


def decode_any(payload: bytes) -> Any:
    """Decode MessagePack into plain Python values (ext 0 becomes None)."""
    return _decode_any(payload)
