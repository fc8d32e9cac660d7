"""The command line: a setting, port, host or data directory that cannot be used is one clear
line (exit 2) before anything is created, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker import __version__
from broker.node.cli import claim_data_dir
from tests.support.broker import BrokerFactory, FrameSocket
from tests.support.make import make, make_checkout


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


def test_a_data_dir_held_by_another_trioq_is_refused_before_its_database_is_opened(
    tmp_path: Path,
) -> None:
    held = claim_data_dir(str(tmp_path))  # as a running broker holds it
    try:
        result = serve("--data-dir", str(tmp_path))
    finally:
        os.close(held)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"trioq: error: {tmp_path / 'trioq.db'} is in use by another process "
        "(one trioq per --data-dir)"
    )
    assert not (tmp_path / "trioq.db").exists()  # refused without waiting on SQLite's lock
    os.close(claim_data_dir(str(tmp_path)))  # let go with the process: free again


@pytest.mark.parametrize("flag", ["--port", "--http-port"])
def test_a_port_in_use_is_one_line_and_creates_nothing(tmp_path: Path, flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve("--host", "127.0.0.1", "--data-dir", str(tmp_path / "data"), flag, str(port))
    assert result.returncode == 2
    assert result.stderr == (
        f"trioq: error: cannot listen on 127.0.0.1:{port} ({flag}): Address already in use\n"
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--port", "99999"],
            "--port: port cannot be '99999' (it must be a whole number from 0 to 65535)",
        ),
        (["--http-port", "70000"], "--http-port: http_port cannot be '70000'"),
        (["--port", "-1"], "--port: port cannot be '-1'"),
        (["--host", "no-such-host.invalid"], "cannot resolve --host no-such-host.invalid: "),
        (["--memory"], "the command line: --memory keeps no files, so it cannot go with"),
    ],
)
def test_bad_listen_settings_are_one_line_and_create_nothing(
    tmp_path: Path, args: list[str], error: str
) -> None:
    result = serve("--data-dir", str(tmp_path / "data"), *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"trioq: error: {error}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "data").exists()


NOWHERE = "postgresql://trioq@127.0.0.1:1/postgres"  # never reached: refused before connecting


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--port", "abc"],
            "--port: port cannot be 'abc' (it must be a whole number from 0 to 65535)",
        ),
        (
            ["--http-port", "6790.5"],
            "--http-port: http_port cannot be '6790.5' (it must be a whole number from 0 to 65535)",
        ),
        (
            ["--keep-failed", "many"],
            "--keep-failed: keep_failed cannot be 'many' (it must be a whole number)",
        ),
        (
            ["--lease-ttl-s", "ten"],
            "--lease-ttl-s: lease_ttl_s cannot be 'ten' (it must be a number)",
        ),
        (
            ["--log-level", "loud"],
            "--log-level: log_level cannot be 'loud' (it must be DEBUG, INFO, WARNING or ERROR)",
        ),
        (
            ["--pg-schema", "Newbie-1", "--postgres", NOWHERE],
            "--pg-schema 'Newbie-1': a schema name is 1 to 63 characters of a-z, 0-9 and _, and "
            "does not start with a digit or pg_",
        ),
        (
            ["--postgres", "notaurl"],
            "--postgres: not a PostgreSQL URL (write postgresql://user@host:port/db)",
        ),
        (
            ["--postgres", "postgresql://trioq@localhost/q?colour=blue"],
            "--postgres: not a PostgreSQL URL (write postgresql://user@host:port/db): invalid URI "
            'query parameter: "colour"',
        ),
    ],
)
def test_a_bad_value_is_one_line_saying_what_the_option_takes(
    tmp_path: Path, args: list[str], error: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", "0", *args],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (2, f"trioq: error: {error}\n")
    assert list(tmp_path.iterdir()) == []  # no data directory made


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--prot", "7000"], "unrecognized arguments: --prot 7000 (did you mean --port?)"),
        (["--memroy"], "unrecognized arguments: --memroy (did you mean --memory?)"),
        (["--http-prot=0"], "unrecognized arguments: --http-prot=0 (did you mean --http-port?)"),
        (["--colour", "blue"], "unrecognized arguments: --colour blue"),
    ],
)
def test_an_unknown_option_shows_serves_usage_and_the_closest_option(
    tmp_path: Path, args: list[str], error: str
) -> None:
    result = serve("--data-dir", str(tmp_path / "data"), *args)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: trioq serve [-h] [--config FILE] [--host HOST]")
    assert lines[-1] == f"trioq serve: error: {error}"
    assert not (tmp_path / "data").exists()


def test_version_is_printed() -> None:
    command = [sys.executable, "-m", "broker", "--version"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (0, f"trioq {__version__}\n")


def test_make_test_without_npm_says_so_in_one_line(tmp_path: Path) -> None:
    checkout, env = make_checkout(tmp_path, {"id": "echo 1000"})  # not root: no apt-get
    result = make(checkout, env, "tests/interop/ts/node_modules/.installed")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "make test needs Node.js and npm for the TypeScript interop test" in line
    assert "about 113 MB" in line
    assert not (checkout / "tests" / "interop" / "ts" / "node_modules").exists()


def test_make_test_as_root_installs_npm_with_apt_get(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_npm = 'echo "npm $*" >> ../../../calls; mkdir -p node_modules'
    apt_get = (
        f'echo "apt-get $*" >> {tmp_path}/calls\n'
        f"if [ \"$1\" = install ]; then printf '#!/bin/sh\\n%s\\n' '{fake_npm}' > {bin_dir}/npm; "
        f"chmod +x {bin_dir}/npm; fi"
    )
    checkout, env = make_checkout(tmp_path, {"id": "echo 0", "apt-get": apt_get,
                                             "mkdir": 'exec /bin/mkdir "$@"',
                                             "chmod": 'exec /bin/chmod "$@"'})  # fmt: skip
    result = make(checkout, env, "tests/interop/ts/node_modules/.installed")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines() + (
        (checkout / "calls").read_text().splitlines()
    )
    assert "apt-get install -y -qq nodejs npm" in calls
    assert "npm ci --no-audit --no-fund" in calls
    assert (checkout / "tests" / "interop" / "ts" / "node_modules" / ".installed").exists()


def test_make_test_without_postgres_binaries_says_so_in_one_line(tmp_path: Path) -> None:
    checkout, env = make_checkout(tmp_path, {"id": "echo 1000"})  # not root: no apt-get
    result = make(checkout, env, "postgres-binaries", "PG_BINDIRS=/nonexistent")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "make test needs PostgreSQL's server binaries (initdb, pg_ctl)" in line
    assert "apt-get install postgresql" in line


def test_make_test_as_root_installs_postgres_binaries_with_apt_get(tmp_path: Path) -> None:
    apt_get = f'echo "apt-get $*" >> {tmp_path}/calls'
    checkout, env = make_checkout(tmp_path, {"id": "echo 0", "apt-get": apt_get})
    result = make(checkout, env, "postgres-binaries", "PG_BINDIRS=/nonexistent")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["apt-get update -qq", "apt-get install -y -qq postgresql"]
    bindir = tmp_path / "postgresql" / "15" / "bin"  # where Debian puts them
    bindir.mkdir(parents=True)
    (bindir / "initdb").write_text("")
    found = make(checkout, env, "postgres-binaries", f"PG_BINDIRS={tmp_path}/postgresql/*/bin")
    assert found.returncode == 0, found.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 2  # found: nothing installed


def test_make_serve_passes_arguments_through(tmp_path: Path) -> None:
    checkout, env = make_checkout(tmp_path, {})
    result = make(checkout, env, "-n", "serve", "ARGS=--http-port 0 --data-dir /tmp/q")
    assert result.stdout.splitlines()[-1] == (
        ".venv/bin/trioq serve --host 127.0.0.1 --port 6789 --http-port 0 --data-dir /tmp/q"
    )


def test_making_the_venv_says_where_the_trioq_command_is(tmp_path: Path) -> None:
    checkout, env = make_checkout(tmp_path, {})
    hint = (
        'echo "trioq is installed in .venv, not on PATH: run .venv/bin/trioq, or '
        "'source .venv/bin/activate' to have trioq on PATH in this shell\""
    )
    for target in (".venv/bin/.installed", ".venv/bin/.installed-test"):  # serve's, test's
        commands = make(checkout, env, "-n", target).stdout.splitlines()
        assert commands[-1] == hint, commands
