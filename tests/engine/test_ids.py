"""Job ids are UUIDv7: unique, and they sort in the order they were made."""

import time
import uuid

import pytest

from broker.engine.state import ids as generator
from broker.engine.state.ids import uuid7, uuid7s


@pytest.fixture
def own_id_clock(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The id generator's millisecond and counter put back after the test (which may freeze or
    step the clock), so that later ids follow the real clock again."""
    for name in ("_last_uuid_ms", "_uuid_counter", "_uuid_prefix"):
        monkeypatch.setattr(generator, name, getattr(generator, name))
    return monkeypatch


def test_ids_are_version_7_unique_and_sorted_even_past_4096_a_millisecond() -> None:
    before = [uuid7() for _ in range(3000)]
    bulk = uuid7s(9000)
    assert len(bulk) == 9000  # also when the counter runs out part way
    ids = before + bulk + [uuid7() for _ in range(3000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, text)


def test_every_id_made_in_bulk_carries_random_bits_in_every_random_digit() -> None:
    # The digits after the variant (20-22 and 24-35) are random in each id of a batch: none is
    # padding, none shifted in from a neighbour (64 batches all alike by chance: about 16^-63).
    batches = [uuid7s(3) for _ in range(64)]
    for index in range(3):
        for position in [*range(20, 23), *range(24, 36)]:
            assert len({batch[index][position] for batch in batches}) > 1, (index, position)


def test_ids_stay_unique_and_sorted_while_the_clock_stands_still(
    own_id_clock: pytest.MonkeyPatch,
) -> None:
    # A coarse or stopped clock (a VM, a 15 ms timer): the counter runs out and moves the
    # millisecond on by itself, in bulk as one at a time.
    own_id_clock.setattr(generator.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    ids = uuid7s(5000) + [uuid7() for _ in range(5000)] + uuid7s(5000)
    assert len(ids) == len(set(ids)) == 15000
    assert ids == sorted(ids)


def test_the_first_random_digit_of_an_id_is_uniform() -> None:
    # Half of all hex digits are 8 or more: a digit drawn from too many or too few bits is not.
    ids = [text for _ in range(1000) for text in uuid7s(2)]
    for index in range(2):
        high = sum(int(text[20], 16) >= 8 for text in ids[index::2])
        assert 350 < high < 650, (index, high)


def test_every_random_digit_of_a_single_id_takes_every_value() -> None:
    # 2000 ids: a digit missing one of its 16 values by chance is about 16 * (15/16)^2000 away.
    ids = [uuid7() for _ in range(2000)]
    for position in [*range(20, 23), *range(24, 36)]:
        assert len({text[position] for text in ids}) == 16, position


def test_single_and_bulk_ids_share_one_layout() -> None:
    # Variant bits 10 and two zero bits: the variant digit is always 8 (not 9, a or b).
    ids = [uuid7() for _ in range(500)] + uuid7s(500)
    assert {text[19] for text in ids} == {"8"}
    assert {(len(text), text[8], text[13], text[14], text[18], text[23]) for text in ids} == {
        (36, "-", "-", "7", "-", "-")
    }


def test_a_standing_clock_moves_the_ids_on_one_millisecond_per_4096(
    own_id_clock: pytest.MonkeyPatch,
) -> None:
    # The counter numbers every id of a millisecond: 8192 ids span at most three of them.
    own_id_clock.setattr(generator.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    ids = [uuid7() for _ in range(8192)]
    assert len({text[:14] for text in ids}) <= 3


def test_an_id_carries_the_millisecond_it_was_made_in(own_id_clock: pytest.MonkeyPatch) -> None:
    own_id_clock.setattr(generator, "_last_uuid_ms", 0)  # not run ahead by ids made before
    before = time.time_ns() // 1_000_000
    made = int(uuid7().replace("-", "")[:12], 16)
    after = time.time_ns() // 1_000_000
    assert before <= made <= after + 1  # +1: a counter run out moves the millisecond on


def test_each_new_millisecond_starts_its_counter_below_1024(
    own_id_clock: pytest.MonkeyPatch,
) -> None:
    # A random start below 1024 leaves every millisecond room for at least 3072 ids.
    ticks = iter(range(1_700_000_000_000, 1_700_000_001_000))
    own_id_clock.setattr(generator, "_last_uuid_ms", 0)
    own_id_clock.setattr(generator.time, "time_ns", lambda: next(ticks) * 1_000_000)
    counters = [int(uuid7()[15:18], 16) for _ in range(300)]
    assert max(counters) < 1024 and len(set(counters)) > 100
