"""Odd payloads the HTTP and WebSocket fronts must carry unchanged."""

from __future__ import annotations

import msgspec

# {[1, 2]: 1, nil: 2, "x": ext 5 (0x01), "u": ext 0 (undefined)}
ODD_DATA = b"\x84\x92\x01\x02\x01\xc0\x02\xa1x\xd4\x05\x01\xa1u\xd4\x00\x00"
ODD_AS_JSON = {"[1,2]": 1, "null": 2, "x": {"$ext": 5, "data": "AQ=="}, "u": None}


def frame_with_raw(message: dict, **raw_fields: bytes) -> bytes:
    """A frame of `message` with `raw_fields` put in as MessagePack bytes as they are."""
    payload = msgspec.msgpack.encode(
        {**message, **{name: msgspec.Raw(value) for name, value in raw_fields.items()}}
    )
    return len(payload).to_bytes(4, "big") + payload
