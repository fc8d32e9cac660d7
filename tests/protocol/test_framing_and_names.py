"""Framing after a complete frame, with a lowered limit (what a connection has before it
authenticates), the oversized frame's leftovers, and the job name older SDKs put in `data`
(each case pinned because `make mutation` showed it unpinned)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol import decode_command
from protocol.codec import Rejected
from protocol.errors import FrameTooLarge
from protocol.framing import FrameDecoder, frame


def test_a_partial_header_after_a_frame_waits_for_its_last_byte() -> None:
    decoder = FrameDecoder(limit=100)
    # 00 00 ff 00: its first three bytes alone would read as 255, over the limit too, but the
    # size is only known (and refused) once all four bytes are in.
    header = (65_280).to_bytes(4, "big")
    assert decoder.feed(frame(b"abc") + header[:3]) == [b"abc"]
    assert decoder.buffered == 3
    with pytest.raises(FrameTooLarge) as raised:
        decoder.feed(header[3:])
    assert (raised.value.size, raised.value.complete, raised.value.rest) == (65_280, [], header)


def test_an_oversized_frame_hands_back_the_frames_before_it_and_the_bytes_from_it_on() -> None:
    decoder = FrameDecoder(limit=10)
    oversized = (11).to_bytes(4, "big") + b"0123456789a"
    with pytest.raises(FrameTooLarge) as raised:
        decoder.feed(frame(b"one") + frame(b"two") + oversized)
    assert raised.value.complete == [b"one", b"two"]
    assert raised.value.rest == oversized
    assert decoder.buffered == 0
    decoder.limit = 11  # the caller raised its limit: the rest now reads as a frame
    assert decoder.feed(raised.value.rest) == [b"0123456789a"]


def push_with_data(data: Any) -> Any:
    result = decode_command(msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": data}))
    assert not isinstance(result, Rejected), result
    return result


@pytest.mark.parametrize("keys", [15, 16, 65_536])  # fixmap's largest, map16's smallest, map32's
def test_the_name_is_taken_out_of_data_whatever_the_size_of_the_map(keys: int) -> None:
    data = {"name": "from-data", **{f"k{i}": i for i in range(keys - 1)}}
    push = push_with_data(data)
    assert push.name == "from-data"
    assert "name" not in msgspec.msgpack.decode(push.data)


def test_list_items_of_1024_characters_are_accepted() -> None:
    push = decode_command(
        msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": 1, "tags": ["t" * 1024]})
    )
    assert push.tags == ["t" * 1024]
