"""Large batches, read whole but checked later: PUSHB, ACKB and PUSHF with many items.

Decoding a PUSHB of 200,000 jobs into checked items took 480 ms in one C call with a Python
`__post_init__` per item; nothing else on the event loop runs meanwhile. Split into its fields
with the items left raw (`msgspec.Raw`, slices of the frame, no copy) it took 15 ms. So a
frame over LARGE_FRAME bytes whose command holds more than SLICED_ITEMS items decodes to one
of the `Large*` commands below: the command's own fields checked, its items not. The engine
checks them a slice at a time (broker/engine/bulk.py), with the same rules and the same error
texts as the whole decode (`jobs[i]: ...`). Smaller batches decode whole, as before: a frame of
at most LARGE_FRAME bytes holds at most that many items, a bounded cost.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import CommandError
from .flows import MAX_FLOW_JOBS
from .values import queue_name

LARGE_FRAME = 4096
"""Frames up to this many bytes always decode whole (a batch in one is small)."""
SLICED_ITEMS = 1000
"""A batch of more items than this is checked and applied by the engine in slices."""


class LargePushBatch(msgspec.Struct):
    """A PUSHB of more than SLICED_ITEMS jobs, its item array still raw (the engine splits it
    in a pass of its own, then checks the items in slices)."""

    reqId: Any = None
    queue: Any = None
    jobs: msgspec.Raw = msgspec.Raw()

    def __post_init__(self) -> None:
        # PushBatch's order: a `jobs` of the wrong type first, then the queue, then no `jobs`.
        is_array = array_length(self.jobs) is not None
        if not is_array and bytes(self.jobs) not in (b"", b"\xc0"):
            raise CommandError("jobs must be an array")
        self.queue = queue_name(self.queue)
        if not is_array:
            raise CommandError("jobs must be an array")

    def items(self) -> int:
        """How many items the batch holds."""
        return array_length(self.jobs) or 0


class LargeAckBatch(msgspec.Struct):
    """An ACKB of more than SLICED_ITEMS ids, its three lists still raw: each is read by the
    engine in a pass of its own (one C call, ~15 ms for 200,000 ids), then checked item by
    item in slices (`ids_raw`'s header says how many there are without reading them)."""

    reqId: Any = None
    ids: msgspec.Raw = msgspec.Raw()
    results: msgspec.Raw = msgspec.Raw()
    tokens: msgspec.Raw = msgspec.Raw()

    def __post_init__(self) -> None:
        if array_length(self.ids) is None:
            raise CommandError("ids must be an array of strings")

    def items(self) -> int:
        """How many ids the batch holds."""
        return array_length(self.ids) or 0


class LargePushFlow(msgspec.Struct):
    """A PUSHF of more than SLICED_ITEMS jobs, its job array still raw (the engine reads it
    in a pass of its own, then checks the jobs in slices)."""

    reqId: Any = None
    jobs: msgspec.Raw = msgspec.Raw()

    def __post_init__(self) -> None:
        count = array_length(self.jobs)
        if not count:
            raise CommandError("jobs must be a non-empty array")
        if count > MAX_FLOW_JOBS:
            raise CommandError(f"a flow holds at most {MAX_FLOW_JOBS} jobs")

    def items(self) -> int:
        """How many jobs the flow holds."""
        return array_length(self.jobs) or 0


class LargeFrame(msgspec.Struct):
    """Every field a large command may have, its arrays raw: a frame is read once to find
    its `cmd` and split it (`large_command` then builds the command)."""

    cmd: Any = None
    reqId: Any = None
    queue: Any = None
    jobs: msgspec.Raw = msgspec.Raw()
    ids: msgspec.Raw = msgspec.Raw()
    results: msgspec.Raw = msgspec.Raw()
    tokens: msgspec.Raw = msgspec.Raw()


def large_command(frame: LargeFrame) -> LargePushBatch | LargeAckBatch | LargePushFlow | None:
    """The large command a frame stands for, or None when it is not a PUSHB, ACKB or PUSHF
    (raises CommandError when its own fields are wrong)."""
    if frame.cmd == "PUSHB":
        return LargePushBatch(frame.reqId, frame.queue, frame.jobs)
    if frame.cmd == "ACKB":
        return LargeAckBatch(frame.reqId, frame.ids, frame.results, frame.tokens)
    if frame.cmd == "PUSHF":
        return LargePushFlow(frame.reqId, frame.jobs)
    return None




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
