"""FrameDecoder and frame(): 4-byte big-endian length prefix, reassembly, the 64 MiB limit."""

from __future__ import annotations

import pytest

from protocol import MAX_FRAME_SIZE, FrameDecoder, FrameTooLarge, ProtocolError, frame

PAYLOADS = [b"\x81\xa3cmd\xa4Ping", b"", b"x", b"\x00\x01\x02", bytes(range(256)) * 2, b"end"]
STREAM = b"".join(frame(payload) for payload in PAYLOADS)


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    """Feed every chunk in order and collect what the decoder returns."""
    payloads: list[bytes] = []
    for chunk in chunks:
        payloads.extend(decoder.feed(chunk))
    return payloads


def test_max_frame_size_is_64_mib() -> None:
    assert MAX_FRAME_SIZE == 67_108_864


def test_frame_prefixes_big_endian_length() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame(b"z" * 256)[:4] == b"\x00\x00\x01\x00"
    assert frame(b"z" * 70_000)[:4] == (70_000).to_bytes(4, "big") == b"\x00\x01\x11\x70"


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"len{len(p)}")
def test_frame_round_trip(payload: bytes) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(frame(payload)) == [payload]
    assert decoder.buffered == 0


def test_whole_stream_in_one_chunk() -> None:
    assert FrameDecoder().feed(STREAM) == PAYLOADS


def test_stream_split_at_every_offset() -> None:
    ends = []  # where each frame ends in STREAM
    for payload in PAYLOADS:
        ends.append((ends[-1] if ends else 0) + 4 + len(payload))
    for offset in range(len(STREAM) + 1):
        decoder = FrameDecoder()
        first = decoder.feed(STREAM[:offset])
        # Exactly the frames wholly inside the first chunk come out of the first feed.
        complete = sum(1 for end in ends if end <= offset)
        assert first == PAYLOADS[:complete], offset
        assert decoder.buffered == offset - (ends[complete - 1] if complete else 0), offset
        assert decoder.feed(STREAM[offset:]) == PAYLOADS[complete:], offset
        assert decoder.buffered == 0, offset


def test_small_stream_split_at_every_pair_of_offsets() -> None:
    payloads = [b"ab", b"", b"c", b"defg"]
    stream = b"".join(frame(payload) for payload in payloads)
    for first in range(len(stream) + 1):
        for second in range(first, len(stream) + 1):
            chunks = [stream[:first], stream[first:second], stream[second:]]
            assert feed_all(FrameDecoder(), chunks) == payloads, (first, second)


def test_stream_fed_byte_by_byte() -> None:
    decoder = FrameDecoder()
    results = [decoder.feed(STREAM[i : i + 1]) for i in range(len(STREAM))]
    assert [payload for batch in results for payload in batch] == PAYLOADS
    assert all(len(batch) <= 1 for batch in results)
    # The empty frame completes on its fourth header byte.
    empty_end = 4 + len(PAYLOADS[0]) + 4
    assert results[empty_end - 1] == [b""]


def test_partial_frame_is_buffered() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.buffered == 2
    assert decoder.feed(b"\x00\x05ab") == []
    assert decoder.buffered == 6
    assert decoder.feed(b"cde\x00\x00") == [b"abcde"]
    assert decoder.buffered == 2


def test_empty_chunk_returns_nothing() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.buffered == 0


def test_zero_length_frame() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00\x00") == [b""]
    assert decoder.buffered == 0
    assert decoder.feed(b"\x00\x00\x00\x00" * 3) == [b"", b"", b""]


def test_zero_length_frame_between_others() -> None:
    stream = frame(b"a") + frame(b"") + frame(b"b")
    assert FrameDecoder().feed(stream) == [b"a", b"", b"b"]


@pytest.mark.parametrize("size", [MAX_FRAME_SIZE + 1, 0x7FFF_FFFF, 0xFFFF_FFFF])
def test_oversized_header_rejected_before_body(size: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge) as caught:
        decoder.feed(size.to_bytes(4, "big"))
    assert str(caught.value) == f"Frame too large: {size} bytes exceeds maximum 67108864"
    assert caught.value.size == size
    assert caught.value.limit == MAX_FRAME_SIZE
    assert isinstance(caught.value, ProtocolError)
    assert decoder.buffered == 0


def test_oversized_header_text_matches_reference() -> None:
    with pytest.raises(FrameTooLarge) as caught:
        FrameDecoder().feed(b"\x7f\xff\xff\xff")
    assert str(caught.value) == "Frame too large: 2147483647 bytes exceeds maximum 67108864"


def test_oversized_header_rejected_when_its_last_byte_arrives() -> None:
    header = (MAX_FRAME_SIZE + 1).to_bytes(4, "big")
    decoder = FrameDecoder()
    assert decoder.feed(header[:1]) == []
    assert decoder.feed(header[1:3]) == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(header[3:])


def test_oversized_header_after_a_complete_frame_is_rejected() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(frame(b"ok")) == [b"ok"]
    with pytest.raises(FrameTooLarge, match="Frame too large: 67108865 bytes"):
        decoder.feed((MAX_FRAME_SIZE + 1).to_bytes(4, "big") + b"partial body")
    assert decoder.buffered == 0


def test_frame_exactly_at_limit_passes_header_check() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(MAX_FRAME_SIZE.to_bytes(4, "big")) == []
    assert decoder.buffered == 4
    assert decoder.feed(b"\x00" * 1000) == []
    assert decoder.buffered == 1004


def test_custom_limit_is_inclusive() -> None:
    decoder = FrameDecoder(limit=10)
    assert decoder.feed(frame(b"0123456789")) == [b"0123456789"]
    with pytest.raises(FrameTooLarge) as caught:
        decoder.feed(frame(b"0123456789A"))
    assert str(caught.value) == "Frame too large: 11 bytes exceeds maximum 10"


def test_whole_frames_gives_every_payload_of_a_chunk_of_whole_frames() -> None:
    decoder = FrameDecoder()
    chunk = frame(b"one") + frame(b"") + frame(b"three")
    assert decoder.whole_frames(chunk) == [b"one", b"", b"three"]
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    "chunk",
    [
        frame(b"one") + frame(b"two")[:-1],  # the last frame unfinished
        frame(b"one") + b"\0\0",  # half a header
        frame(b"x" * 11),  # over the limit
        frame(b"one") + frame(b"x" * 11),  # over the limit after a whole frame
    ],
)
def test_whole_frames_leaves_any_other_chunk_to_feed(chunk: bytes) -> None:
    decoder = FrameDecoder(limit=10)
    assert decoder.whole_frames(chunk) is None
    assert decoder.buffered == 0  # nothing was kept: `feed` still sees the whole chunk
    assert fed(decoder, chunk) == fed(FrameDecoder(limit=10), chunk)


def fed(decoder: FrameDecoder, chunk: bytes) -> tuple[list[bytes], int] | str:
    """What `feed` makes of `chunk`: the payloads and the bytes kept, or the error."""
    try:
        return decoder.feed(chunk), decoder.buffered
    except FrameTooLarge as exc:
        return str(exc)


def test_whole_frames_of_a_chunk_ending_in_an_empty_frame() -> None:
    assert FrameDecoder().whole_frames(frame(b"one") + frame(b"")) == [b"one", b""]


def test_whole_frames_of_a_frame_exactly_at_the_limit() -> None:
    assert FrameDecoder(limit=3).whole_frames(frame(b"abc")) == [b"abc"]


def test_whole_frames_refuses_while_a_partial_frame_is_buffered() -> None:
    decoder = FrameDecoder()
    decoder.feed(frame(b"one")[:5])
    assert decoder.whole_frames(frame(b"two")) is None
    assert decoder.buffered == 5
