"""The command line: a data directory that cannot be used is a clear error, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import BrokerFactory, FrameSocket


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", "0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_a_corrupt_database_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "trioq.db").write_bytes(b"not a database at all" * 200)
    result = serve("--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"trioq: error: {tmp_path / 'trioq.db'} is not a trioq database or is corrupt"
    )


def test_a_data_dir_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    result = serve("--data-dir", str(blocker / "data"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"trioq: error: cannot create data directory {blocker}")
    assert "Traceback" not in result.stderr


def test_a_database_from_a_newer_trioq_is_refused(tmp_path: Path) -> None:
    import apsw

    db = apsw.Connection(str(tmp_path / "trioq.db"))
    db.execute("PRAGMA user_version=999")
    db.close()
    result = serve("--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "written by a newer trioq (schema 999" in result.stderr


def test_a_second_broker_on_the_same_data_dir_is_refused(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    first = broker_factory(data_dir=tmp_path)
    with FrameSocket(first.address) as client:
        job_id = client.call("PUSH", queue="q", data={"n": 1})["id"]
    result = serve("--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"trioq: error: {tmp_path / 'trioq.db'} is in use by another process "
        "(one trioq per --data-dir)"
    )
    with FrameSocket(first.address) as client:  # the first goes on, its jobs untouched
        assert client.call("GetState", id=job_id)["state"] == "waiting"
