"""Store edge cases that mutation testing showed no test pinned down (`make mutation`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import JobRow, MemoryStore, Record, Store, StoreError, open_sqlite

PAGE_SIZE = 4096  # SQLite's default page size, the store's


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend = MemoryStore() if request.param == "memory" else open_sqlite(str(tmp_path / "t.db"))
    yield backend
    backend.close()


def test_deleting_a_record_that_is_not_stored_changes_nothing(store: Store) -> None:
    kept = Record("cron", "kept", b"\x80")
    store.commit([], [], sync=False, records=[kept])
    store.commit([], [], sync=False, record_deletes=[("cron", "never-stored")])
    assert store.load_records() == [kept]


def test_the_memory_store_counts_every_synced_commit() -> None:
    memory = MemoryStore()
    for sync in (True, False, True):
        memory.commit([], [], sync=sync)
    assert (memory.commits, memory.synced_commits) == (3, 2)


def test_a_file_that_is_not_a_database_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not an SQLite file at all" * 100)
    with pytest.raises(StoreError, match=r"junk\.db is not a trioq database or is corrupt"):
        open_sqlite(str(path))


def test_a_missing_directory_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "trioq.db"
    with pytest.raises(StoreError, match=r"cannot open .*no-such-dir.*directory writable"):
        open_sqlite(str(path))


def test_a_second_store_on_one_file_says_the_file_is_in_use(tmp_path: Path) -> None:
    path = str(tmp_path / "trioq.db")
    first = open_sqlite(path)
    try:
        with pytest.raises(StoreError, match=r"trioq.db is in use by another process"):
            open_sqlite(path)
    finally:
        first.close()


def test_a_database_that_cannot_keep_a_write_ahead_log_is_refused() -> None:
    with pytest.raises(StoreError) as refused:
        open_sqlite(":memory:")  # SQLite keeps no log for it: commits would not be durable
    assert str(refused.value) == ":memory:: cannot use WAL journal mode (got memory)"


def test_a_file_damaged_after_its_header_is_named_when_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "trioq.db"
    store = open_sqlite(str(path))
    jobs = [JobRow(f"job-{n:04}", "q", "waiting", b"x" * 300) for n in range(500)]
    store.commit(jobs, [], sync=False, records=[Record("cron", "nightly", b"\x80")])
    store.close()
    with path.open("r+b") as file:  # every page after the first (the schema) overwritten
        file.seek(PAGE_SIZE)
        file.write(b"\xa5" * (path.stat().st_size - PAGE_SIZE))
    damaged = open_sqlite(str(path))
    try:
        for read in (damaged.load_records, damaged.load, lambda: list(damaged.scan_jobs())):
            with pytest.raises(StoreError) as refused:  # not apsw's own error: the broker
                read()  # stops with this text at start-up
            assert str(refused.value) == f"{path} is not a trioq database or is corrupt"
    finally:
        damaged.close()


def test_a_commit_sqlite_refuses_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "trioq.db"
    store = open_sqlite(str(path))
    try:
        store.commit([JobRow("kept", "q", "waiting", b"\x80")], [], sync=False)
        broken = JobRow("broken", None, "waiting", b"\x80")  # type: ignore[arg-type]
        one_statement = ([broken], [])
        transaction = ([JobRow("new", "q", "waiting", b"\x80"), broken], ["kept"])
        for upserts, deletes in (one_statement, transaction):
            with pytest.raises(StoreError) as refused:
                store.commit(upserts, deletes, sync=False)
            assert str(refused.value) == f"{path}: NOT NULL constraint failed: jobs.queue"
            assert [row.id for row in store.load()] == ["kept"]
        store.commit([JobRow("next", "q", "waiting", b"\x80")], [], sync=False)  # goes on
        assert sorted(row.id for row in store.load()) == ["kept", "next"]
    finally:
        store.close()


def test_a_commit_of_nothing_on_a_reopened_file_changes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "trioq.db")
    open_sqlite(path).close()
    store = open_sqlite(path)  # an up-to-date file: opening it writes nothing
    try:
        for sync in (False, True):
            store.commit([], [], sync=sync)
        assert (store.load(), store.load_records()) == ([], [])
    finally:
        store.close()
