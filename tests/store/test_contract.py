"""The store contract, run against every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import JobRow, MemoryStore, Record, Store, StoreError, open_postgres, open_sqlite
from store.sqlite import SCHEMA_VERSION


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: Store
    if request.param == "postgres":
        backend = open_leading_postgres(request.getfixturevalue("postgres_server").url,
                                        request.getfixturevalue("pg_schema"))  # fmt: skip
    elif request.param == "sqlite":
        backend = open_sqlite(str(tmp_path / "t.db"))
    else:
        backend = MemoryStore()
    yield backend
    backend.close()


def open_leading_postgres(url: str, schema: str) -> Store:
    """A PostgreSQL store on `schema` holding its lease (as a broker's is)."""
    store = open_postgres(url, schema)
    assert store.acquire_lease()
    return store


def row(job_id: str, state: str = "waiting", body: bytes = b"\x80") -> JobRow:
    return JobRow(job_id, "q", state, body)


def test_a_new_store_is_empty(store: Store) -> None:
    assert store.load() == []


def test_commit_writes_replaces_and_deletes(store: Store) -> None:
    store.commit([row("a"), row("b")], [], sync=False)
    store.commit([row("a", "active", b"\x81\xa1x\x01")], ["b"], sync=True)
    assert store.load() == [row("a", "active", b"\x81\xa1x\x01")]


def test_scan_jobs_yields_every_row_one_at_a_time(store: Store) -> None:
    store.commit([row("a"), row("b", "delayed")], [], sync=False)
    scan = store.scan_jobs()
    first = next(scan)
    assert sorted([first, *scan]) == [row("a"), row("b", "delayed")]


def test_scan_bodies_yields_the_body_of_every_row_one_at_a_time(store: Store) -> None:
    store.commit([row("a", body=b"\x81"), row("b", "delayed", b"\x82")], [], sync=False)
    scan = store.scan_bodies()
    first = next(scan)
    assert sorted([first, *scan]) == [b"\x81", b"\x82"]


def test_a_one_job_commit_keeps_every_other_change_made_with_it(store: Store) -> None:
    cron = Record("cron", "nightly", b"\x80")
    store.commit([row("a")], [], sync=False, records=[cron])
    assert store.load_records() == [cron]
    store.commit([row("b")], ["a"], sync=False)
    assert store.load() == [row("b")]
    store.commit([row("c")], [], sync=False, record_deletes=[("cron", "nightly")])
    assert (sorted(store.load()), store.load_records()) == ([row("b"), row("c")], [])


def test_deleting_an_unknown_id_is_not_an_error(store: Store) -> None:
    store.commit([], ["ghost"], sync=False)
    assert store.load() == []


def test_a_failed_commit_writes_nothing(store: Store) -> None:
    store.commit([row("a")], [], sync=False)

    class RowsThenFailure(list[JobRow]):
        def __iter__(self) -> Iterator[JobRow]:
            yield row("b")
            raise RuntimeError("encoder broke mid-batch")

    with pytest.raises(RuntimeError):
        store.commit(RowsThenFailure([row("b"), row("c")]), ["a"], sync=False)
    assert store.load() == [row("a")]


def test_sqlite_rows_survive_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    first = open_sqlite(path)
    first.commit([row("a"), row("b", "completed", b"\x01")], [], sync=True)
    first.close()
    second = open_sqlite(path)
    assert sorted(second.load()) == [row("a"), row("b", "completed", b"\x01")]
    second.close()


def test_postgres_rows_survive_reopening(postgres_server, pg_schema: str) -> None:
    first = open_leading_postgres(postgres_server.url, pg_schema)
    first.commit([row("a"), row("b", "completed", b"\x01")], [], sync=True)
    first.commit([], [], sync=False, records=[Record("cron", "c", b"\x02")])
    first.close()
    second = open_leading_postgres(postgres_server.url, pg_schema)  # at once: it was released
    assert sorted(second.load()) == [row("a"), row("b", "completed", b"\x01")]
    assert second.load_records() == [Record("cron", "c", b"\x02")]
    second.close()


def test_a_second_broker_on_the_same_file_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    from store.sqlite import SqliteStore

    path = str(tmp_path / "t.db")
    open_sqlite(path).close()
    first = open_sqlite(path)  # holds the file from the start, before it writes anything
    with pytest.raises(StoreError, match="in use by another process"):
        SqliteStore(path, busy_timeout_ms=50)
    first.commit([row("a")], [], sync=False)
    first.commit([row("b")], [], sync=False)  # the refused opener changed nothing
    first.close()
    second = SqliteStore(path, busy_timeout_ms=50)
    assert sorted(r.id for r in second.load()) == ["a", "b"]
    second.close()


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    import apsw

    path = str(tmp_path / "t.db")
    db = apsw.Connection(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer trioq") as refused:
        open_sqlite(path)
    assert refused.value.__traceback__ is not None  # kept alive, with the frames it holds
    db = apsw.Connection(path)  # the refused store let go of the file: it can be fixed at once
    db.execute("PRAGMA user_version=2")
    db.close()
    open_sqlite(path).close()


def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a trioq database or is corrupt"):
        open_sqlite(str(path))


def test_records_commit_with_jobs_and_survive_reopening(store: Store, tmp_path: Path) -> None:
    cron = Record("cron", "nightly", b"\x81\xa1n\x01")
    store.commit([row("a")], [], sync=False, records=[cron, Record("cron", "x", b"\x01")])
    store.commit([], [], sync=False, record_deletes=[("cron", "x")])
    assert store.load_records() == [cron]


def test_sqlite_migrates_a_version_1_file_forward(tmp_path: Path) -> None:
    import apsw

    from store.sqlite import MIGRATIONS

    path = str(tmp_path / "t.db")
    db = apsw.Connection(path)
    db.execute(MIGRATIONS[1])
    db.execute("INSERT INTO jobs VALUES ('a', 'q', 'waiting', x'80')")
    db.execute("PRAGMA user_version=1")
    db.close()
    store = open_sqlite(path)
    assert store.load() == [row("a")]
    store.commit([], [], sync=False, records=[Record("cron", "c", b"\x01")])
    assert store.load_records() == [Record("cron", "c", b"\x01")]
    store.close()
