"""Job ids are UUIDv7: unique, and they sort in the order they were made."""

import uuid

from broker.engine.model import uuid7, uuid7s


def test_ids_are_version_7_unique_and_sorted_even_past_4096_a_millisecond() -> None:
    ids = [uuid7() for _ in range(3000)] + uuid7s(9000) + [uuid7() for _ in range(3000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for text in ids[::997]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, text)
