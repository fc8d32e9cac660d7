"""What only the PostgreSQL store does: its schema, its SQL columns, the fencing lease, and
database outages. Each test has its own schema on the session's private server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
import trio

from broker.ha import StepDown, keep_lease
from store import JobRow, LeaseLost, StoreError, StoreUnavailable, open_postgres
from store.postgres import SCHEMA_VERSION, PostgresStore
from tests.support.postgres import PrivateServer

SHORT_TTL_S = 0.5  # the lease's TTL in takeover tests (the database's clock decides expiry)
WAIT_S = 20.0  # bound on real waits on a loaded machine


@pytest.fixture
def stores(postgres_server: PrivateServer, pg_schema: str) -> Iterator[list[PostgresStore]]:
    """Open stores here to have them closed at teardown."""
    opened: list[PostgresStore] = []
    yield opened
    for store in opened:
        store.close()


@pytest.fixture
def sql(postgres_server: PrivateServer) -> Iterator[psycopg.Connection]:
    """An operator's own connection to the database."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


def open_store(
    server: PrivateServer, schema: str, stores: list[PostgresStore], **options: object
) -> PostgresStore:
    store = open_postgres(server.url, schema, **options)  # type: ignore[arg-type]
    stores.append(store)
    return store


def job(job_id: str, **columns: object) -> JobRow:
    return JobRow(job_id, "q", "waiting", b"\x80")._replace(**columns)


def acquire_within(store: PostgresStore, timeout_s: float = WAIT_S) -> bool:
    """Try to take the lease until it is taken or `timeout_s` real seconds passed."""
    deadline = time.monotonic() + timeout_s
    while not store.acquire_lease():
        if time.monotonic() > deadline:
            return False
        time.sleep(SHORT_TTL_S / 10)  # poll interval: expiry is decided by the database clock
    return True


def stored_ids(sql: psycopg.Connection, schema: str) -> list[str]:
    return [r[0] for r in sql.execute(f"SELECT id FROM {schema}.jobs ORDER BY id").fetchall()]


def test_jobs_have_columns_an_operator_can_query(postgres_server, pg_schema, stores, sql) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    row = job("j1", priority=5, run_at=1_800_000_060_000.0, created_at=1_800_000_000_000.0,
              attempts=2)  # fmt: skip
    store.commit([row, job("j2", state="delayed")], [], sync=False)
    found = sql.execute(
        f"SELECT id, queue, state, priority, extract(epoch FROM run_at - created_at), attempts "
        f"FROM {pg_schema}.jobs WHERE priority > 1"
    ).fetchall()
    assert found == [("j1", "q", "waiting", 5.0, 60, 2)]
    assert sorted(r.id for r in store.load()) == ["j1", "j2"]


def test_the_schema_is_created_once_with_its_version(
    postgres_server, pg_schema, stores, sql
) -> None:
    open_store(postgres_server, pg_schema, stores)
    open_store(postgres_server, pg_schema, stores)  # a second open finds it and keeps it
    version = sql.execute(f"SELECT value FROM {pg_schema}.meta WHERE key = 'schema_version'")
    assert version.fetchall() == [(str(SCHEMA_VERSION),)]


def test_a_newer_schema_is_refused_in_one_line(postgres_server, pg_schema, stores, sql) -> None:
    open_store(postgres_server, pg_schema, stores)
    sql.execute(f"UPDATE {pg_schema}.meta SET value = '{SCHEMA_VERSION + 1}'")
    with pytest.raises(StoreError, match="newer trioq") as refused:
        open_postgres(postgres_server.url, pg_schema)
    assert "\n" not in str(refused.value)


def test_two_schemas_in_one_database_are_independent(postgres_server, pg_schema, stores) -> None:
    first = open_store(postgres_server, pg_schema, stores)
    second = open_store(postgres_server, pg_schema + "_other", stores)
    assert first.acquire_lease() and second.acquire_lease()  # one lease per schema
    first.commit([job("a")], [], sync=False)
    assert second.load() == []


def test_an_invalid_schema_name_is_refused(postgres_server) -> None:
    with pytest.raises(StoreError, match="--pg-schema"):
        open_postgres(postgres_server.url, "Robert'); DROP TABLE")


def test_an_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
        open_postgres("postgresql://trioq@127.0.0.1:1/postgres")


def test_a_store_without_the_lease_cannot_write(postgres_server, pg_schema, stores, sql) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.lease().holder is None  # a new schema's lease is free
    with pytest.raises(LeaseLost):
        store.commit([job("a")], [], sync=False)
    assert stored_ids(sql, pg_schema) == []


def test_a_live_lease_is_not_taken_and_names_its_holder(postgres_server, pg_schema, stores) -> None:
    first = open_store(postgres_server, pg_schema, stores, advertise="10.0.0.1:6789")
    second = open_store(postgres_server, pg_schema, stores)
    assert first.acquire_lease()
    assert not second.acquire_lease()
    lease = second.lease()
    assert (lease.epoch, lease.holder, lease.address) == (first.epoch, first.holder,
                                                          "10.0.0.1:6789")  # fmt: skip
    assert lease.expires_in_s > 0


def test_a_takeover_after_the_ttl_fences_the_old_holder(
    postgres_server, pg_schema, stores, sql
) -> None:
    old = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    new = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert old.acquire_lease()
    old.commit([job("before")], [], sync=False)
    old_epoch = old.epoch
    assert acquire_within(new)  # once the old lease expired by the database's clock
    assert new.epoch == old_epoch + 1  # type: ignore[operator]
    with pytest.raises(LeaseLost):
        old.commit([job("after")], ["before"], sync=False)
    with pytest.raises(LeaseLost):
        old.renew_lease()
    with pytest.raises(LeaseLost):  # fenced for good: it does not take the lease back silently
        old.commit([job("after")], [], sync=False)
    assert stored_ids(sql, pg_schema) == ["before"]
    new.commit([job("new")], [], sync=False)
    assert stored_ids(sql, pg_schema) == ["before", "new"]


def test_renewing_keeps_the_lease(postgres_server, pg_schema, stores) -> None:
    holder = open_store(postgres_server, pg_schema, stores, lease_ttl_s=2.0)
    other = open_store(postgres_server, pg_schema, stores, lease_ttl_s=2.0)
    assert holder.acquire_lease()
    for _ in range(3):
        holder.renew_lease()
        assert holder.lease().expires_in_s > 1.0  # renewed to a full TTL from the db's now
        assert not other.acquire_lease()
    holder.commit([job("a")], [], sync=False)


def test_a_holder_paused_inside_a_transaction_does_not_block_a_takeover(
    postgres_server, pg_schema, stores, sql
) -> None:
    old = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    new = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert old.acquire_lease()
    # The old holder is paused midway through a commit: its transaction holds the lease row's
    # lock and has written a row, and it sends nothing more.
    paused = old._connection()
    paused.execute("BEGIN")
    paused.execute(f"SELECT 1 FROM {pg_schema}.lease FOR SHARE")
    paused.execute(f"INSERT INTO {pg_schema}.jobs VALUES ('ghost', 'q', 'waiting', 0, now(), "
                   "now(), 0, '')")  # fmt: skip
    assert acquire_within(new)  # the server ended the idle transaction, releasing the lock
    assert stored_ids(sql, pg_schema) == []  # and rolled its write back
    with pytest.raises(StoreError):  # whether it notices the lost connection or the epoch
        old.commit([job("late")], [], sync=False)
    with pytest.raises(LeaseLost):  # reconnected: the epoch check fences it
        old.commit([job("late")], [], sync=False)
    assert stored_ids(sql, pg_schema) == []


def test_a_commit_that_waits_too_long_for_the_lease_row_can_be_retried(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=SHORT_TTL_S)
    assert store.acquire_lease()
    with sql.transaction():  # someone holds the lease row (as a takeover in progress would)
        sql.execute(f"SELECT 1 FROM {pg_schema}.lease FOR UPDATE")
        with pytest.raises(StoreUnavailable, match="lease row"):
            store.commit([job("a")], [], sync=False)
    store.commit([job("a")], [], sync=False)  # the lock went away: the retry goes through
    assert stored_ids(sql, pg_schema) == ["a"]


def test_a_database_restart_is_survived_by_reconnecting(
    postgres_server, pg_schema, stores, sql
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("a")], [], sync=False)
    sql.close()
    postgres_server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            store.commit([job("b")], [], sync=False)
        with pytest.raises(StoreUnavailable):
            store.renew_lease()
    finally:
        postgres_server.start()
    store.commit([job("b")], [], sync=False)  # the same pass, retried, on a new connection
    store.renew_lease()
    assert sorted(r.id for r in store.load()) == ["a", "b"]


def test_sync_commits_survive_a_database_crash(postgres_server, pg_schema, stores) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("a"), job("b")], [], sync=True)
    postgres_server.kill()
    postgres_server.start()
    with pytest.raises(StoreUnavailable):  # the old connection died with the server
        store.commit([job("c")], ["a"], sync=False)
    store.commit([job("c")], ["a"], sync=True)
    assert sorted(r.id for r in store.load()) == ["b", "c"]


def test_a_plain_commit_turns_the_wal_flush_off_for_itself_only(
    postgres_server, pg_schema, stores
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job("plain")], [], sync=False)
    setting = store._connection().execute("SHOW synchronous_commit").fetchone()
    assert setting == ("on",)  # the next sync commit waits for the flush again


async def test_the_broker_stops_when_its_lease_is_taken(
    postgres_server, pg_schema, stores, sql, autojump_clock
) -> None:
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    await keep_lease_for(store, renewals=3)  # renewing quietly while it holds the lease
    sql.execute(f"UPDATE {pg_schema}.lease SET epoch = epoch + 1, holder = 'another'")
    with pytest.raises(LeaseLost):
        await keep_lease_for(store, renewals=1)


async def test_the_broker_steps_down_after_a_ttl_without_reaching_the_database(
    postgres_server, pg_schema, stores, autojump_clock, caplog
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=3.0)
    assert store.acquire_lease()
    postgres_server.stop()
    try:
        with pytest.raises(StepDown, match="no lease renewal for 3 s"):
            await keep_lease(store)
        assert trio.current_time() >= 3.0  # it kept trying for a whole TTL first
    finally:
        postgres_server.start()
    outage_logs = [r for r in caplog.records if "cannot renew" in r.getMessage()]
    assert len(outage_logs) == 1  # once per outage, with its cause
    assert "connect" in outage_logs[0].getMessage()


def test_a_renewal_inside_a_long_transaction_counts_from_when_it_runs(
    postgres_server, pg_schema, stores
) -> None:
    store = open_store(postgres_server, pg_schema, stores, lease_ttl_s=5.0)
    assert store.acquire_lease()
    conn = store._connection()
    with conn.transaction():  # as the restore's scan holds one open while the keeper renews
        conn.execute("SELECT pg_sleep(0.01)")
        store.renew_lease()
        later = conn.execute(
            f"SELECT expires_at > now() + interval '5 s' FROM {pg_schema}.lease"
        ).fetchone()
    assert later == (True,)  # not the transaction's start + TTL


def test_a_scan_holds_no_transaction_open_between_its_pages(
    postgres_server, pg_schema, stores, monkeypatch
) -> None:
    monkeypatch.setattr("store.postgres.SCAN_BATCH", 3)
    store = open_store(postgres_server, pg_schema, stores)
    assert store.acquire_lease()
    store.commit([job(f"j{n:02}") for n in range(10)], [], sync=False)
    seen = []
    for row in store.scan_jobs():  # a restore pauses here, and the lease keeper renews
        status = store._connection().info.transaction_status
        assert status == psycopg.pq.TransactionStatus.IDLE, status
        seen.append(row.id)
    assert seen == [f"j{n:02}" for n in range(10)]


async def keep_lease_for(store: PostgresStore, renewals: int) -> None:
    """Run the broker's lease keeper for `renewals` renewal periods (plus a little)."""
    with trio.move_on_after(store.lease_ttl_s / 3 * (renewals + 0.5)):
        await keep_lease(store)
