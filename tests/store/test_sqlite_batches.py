"""SQLite writes a batch with one multi-row statement per chunk: what a commit stores is
exactly what it was given, whatever the batch's size, and a failed batch stores nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import JobRow, StoreError, open_sqlite
from store.sqlite import MAX_CHUNK, SqliteStore


def rows(count: int, prefix: str = "j") -> list[JobRow]:
    """Rows that differ in every stored column, and carry PostgreSQL's columns too."""
    return [
        JobRow(f"{prefix}{index:05d}", f"q{index % 3}", ("waiting", "delayed")[index % 2],
               index.to_bytes(3, "big") + b"\xc0" * (index % 7), index, index * 2.5, 7.0, 1)
        for index in range(count)
    ]  # fmt: skip


def stored(store: SqliteStore) -> list[tuple[str, str, str, bytes]]:
    """The four columns SQLite keeps of every stored job, by id."""
    return sorted(tuple(job[:4]) for job in store.load())  # type: ignore[misc]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return open_sqlite(str(tmp_path / "t.db"))


@pytest.mark.parametrize("count", [1, 2, 3, 31, 32, 33, 100, 255, MAX_CHUNK, MAX_CHUNK + 1, 1000])
def test_a_batch_of_any_size_is_stored_row_for_row(store: SqliteStore, count: int) -> None:
    batch = rows(count)
    store.commit(batch, [], sync=False)
    assert stored(store) == sorted(tuple(job[:4]) for job in batch)


def test_a_batch_larger_than_a_chunk_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    batch = rows(3 * MAX_CHUNK + 5)
    first = open_sqlite(path)
    first.commit(batch, [], sync=False)
    first.close()
    again = open_sqlite(path)
    try:
        assert stored(again) == sorted(tuple(job[:4]) for job in batch)
    finally:
        again.close()


def test_a_batch_deletes_more_ids_than_a_chunk_holds(store: SqliteStore) -> None:
    batch = rows(MAX_CHUNK * 2 + 37)
    store.commit(batch, [], sync=False)
    gone = [job.id for job in batch[: MAX_CHUNK + 100]]
    store.commit(rows(3, "new"), gone, sync=False)
    assert stored(store) == sorted(
        tuple(job[:4]) for job in batch[MAX_CHUNK + 100 :] + rows(3, "new")
    )


def test_the_later_of_two_rows_for_one_id_in_a_batch_is_kept(store: SqliteStore) -> None:
    first, later = JobRow("a", "q", "waiting", b"\x01"), JobRow("a", "q", "active", b"\x02")
    store.commit([first, later], [], sync=False)
    assert stored(store) == [("a", "q", "active", b"\x02")]


@pytest.mark.parametrize("deletes", [[], ["old00000"]])
@pytest.mark.parametrize("count", [32, 100, MAX_CHUNK + 10])
def test_a_batch_with_a_bad_row_in_its_last_chunk_stores_nothing(
    store: SqliteStore, count: int, deletes: list[str]
) -> None:
    """32 rows without deletes are one statement, committed without BEGIN; the others one
    transaction of several statements."""
    store.commit(rows(2, "old"), [], sync=False)
    batch = rows(count)
    batch[-1] = batch[-1]._replace(body=None)  # type: ignore[arg-type]  # NOT NULL fails
    with pytest.raises(StoreError):
        store.commit(batch, deletes, sync=False)
    assert stored(store) == sorted(tuple(job[:4]) for job in rows(2, "old"))
    # The store goes on working after the failure.
    store.commit(rows(count), [], sync=False)
    assert len(store.load()) == count + 2
