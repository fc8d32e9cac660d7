"""Where a kind of job keeps its options: `option_slice` finds them once per JobFields subclass
and caches the answer, so the common job (no option at all) is recognised by one count.

The subclass here is defined by the test itself: the command structs' answers are already in
the cache of any process that decoded a job before (mutmut's test runs are forked from one)."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.jobspec import DEFAULT_MAX_ATTEMPTS, JobFields


def test_a_new_kind_of_job_tells_a_job_without_options_from_one_with() -> None:
    class Tagged(JobFields):  # its own field comes first, as PushItem's does
        tenant: Any = None

    decode = msgspec.msgpack.Decoder(Tagged).decode
    bare = decode(msgspec.msgpack.encode({"name": "send", "data": {"to": 1}}))
    assert (bare.optionsGiven, bare.priority, bare.maxAttempts) == (False, 0, DEFAULT_MAX_ATTEMPTS)
    given = decode(msgspec.msgpack.encode({"tenant": "t1", "name": "send", "data": 1,
                                           "priority": "5"}))  # fmt: skip
    assert (given.optionsGiven, given.priority, given.maxAttempts) == (
        True, 5, DEFAULT_MAX_ATTEMPTS,
    )  # fmt: skip
