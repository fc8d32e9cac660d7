"""Large batches: read whole, their items checked later (by the engine, in slices).

Decoding a PUSHB of 200,000 jobs into checked items took 480 ms in one C call with a Python
`__post_init__` per item; nothing else on the event loop runs meanwhile. PUSHB, ACKB and
PUSHF therefore take their item arrays raw (`msgspec.Raw`: a slice of the frame, no copy) and
read the array's header: up to SLICED_ITEMS items they decode and check them at once, as
before; with more, the command is `large`, its items left raw, and the engine checks them a
slice at a time (broker/engine/components/bulk.py), with the same rules and the same error texts
(`jobs[i]: ...`). Other commands pay nothing for it.
"""

from __future__ import annotations

import msgspec

SLICED_ITEMS = 1000
"""A batch of more items than this is checked and applied by the engine in slices."""
NIL = msgspec.Raw(b"\xc0")
"""MessagePack's nil, raw: what an absent optional array stands for."""


def array_length(raw: msgspec.Raw | bytes) -> int | None:
    """The length of the MessagePack array `raw` starts with, read from its header (no copy
    of the rest); None when it is not an array."""
    head = bytes(memoryview(raw)[:5])
    if not head:
        return None
    first = head[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(head) >= 3:
        return int.from_bytes(head[1:3], "big")
    if first == 0xDD and len(head) == 5:
        return int.from_bytes(head[1:5], "big")
    return None


def given(raw: msgspec.Raw) -> bool:
    """Whether an optional raw field was sent (absent and nil are not)."""
    return bytes(memoryview(raw)[:1]) not in (b"", b"\xc0")
