"""MessagePack extension types as msgpackr (the reference's encoder) sends them."""

from __future__ import annotations

from typing import Any

import msgspec

JS_UNDEFINED_EXT = 0


def ext_hook(code: int, data: memoryview) -> Any:
    """msgpackr encodes a JS `undefined` as ext type 0; it means "absent" (None)."""
    if code == JS_UNDEFINED_EXT:
        return None
    return msgspec.msgpack.Ext(code, bytes(data))
