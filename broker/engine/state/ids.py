"""Job ids (and lease tokens, bulk and webhook keys): UUIDv7 strings, unique, and sorting in
the order they were made."""

from __future__ import annotations

import os
import random
import time

_last_uuid_ms = 0
_uuid_counter = 0
# Ids need uniqueness, not secrecy from the id's holder: a generator seeded once from the OS is
# enough, and saves a system call per id. (Lease tokens use the same ids: a token is only
# useful to whoever already holds the job's id and a connection to the broker.)
_random = random.Random(os.urandom(32))


_uuid_prefix = ""
_HEX3 = [f"{i:03x}" for i in range(4096)]


def uuid7s(count: int) -> list[str]:
    """`count` UUIDv7 strings: 48-bit ms, version 7, a 12-bit counter (so ids made in one ms
    still sort), variant 0b10, then random bits.

    Made in bulk because a PUSHB needs many: the text up to the version digit changes once a
    millisecond, the counter digits come from a table, and the random part of every id is cut
    from one hex string.
    """
    global _uuid_counter
    ids: list[str] = []
    while len(ids) < count:
        prefix = _uuid_time_prefix()
        counter = _uuid_counter
        take = min(count - len(ids), 0x1000 - counter)
        rand = f"{_random.getrandbits(60 * take):0{15 * take}x}"
        ids += [
            f"{prefix}{_HEX3[counter + i]}-8{rand[j : j + 3]}-{rand[j + 3 : j + 15]}"
            for i, j in zip(range(take), range(0, 15 * take, 15), strict=True)
        ]
        _uuid_counter = counter + take
    return ids


def _uuid_time_prefix() -> str:
    """The id text up to the counter; moves to the next millisecond when the clock does, or
    early when this millisecond's 4096 counter values are used up (ids keep sorting)."""
    global _last_uuid_ms, _uuid_counter, _uuid_prefix
    ms = max(time.time_ns() // 1_000_000, _last_uuid_ms + (_uuid_counter >= 0x1000))
    if ms > _last_uuid_ms:
        _last_uuid_ms = ms
        _uuid_counter = _random.getrandbits(10)
        _uuid_prefix = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7"
    return _uuid_prefix


def uuid7() -> str:
    """One UUIDv7 string (see `uuid7s`)."""
    global _uuid_counter
    prefix = _uuid_time_prefix()
    counter = _uuid_counter
    _uuid_counter = counter + 1
    rand = _random.getrandbits(60)
    return f"{prefix}{_HEX3[counter]}-{0x8000 | rand >> 48:04x}-{rand & 0xFFFFFFFFFFFF:012x}"
