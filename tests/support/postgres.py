"""A private PostgreSQL server for the tests and benchmarks: initdb + pg_ctl from the system's
binaries, in a temporary directory, on a free port, so tests may stop, kill and restart it.

initdb and postgres refuse to run as root; as root they run as `nobody` (through runuser or
setpriv) with a data directory that user owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

UNPRIVILEGED_USER = "nobody"
START_TIMEOUT_S = 30
MISSING = (
    "the tests need PostgreSQL's server binaries (initdb, pg_ctl): install them "
    "(e.g. sudo apt-get install postgresql) or put their directory on PATH"
)


def find_bindir() -> str | None:
    """The directory holding initdb and pg_ctl: pg_config's, Debian's, or PATH's."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        candidates.append(found.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)  # newest first
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(os.path.realpath(initdb)))
    for directory in candidates:
        if all(os.access(os.path.join(directory, n), os.X_OK) for n in ("initdb", "pg_ctl")):
            return directory
    return None


def free_port() -> int:
    """A TCP port nothing listens on now (the server binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """One PostgreSQL cluster in a temporary directory; `url` reaches its `postgres` database
    as the superuser `trioq` (trust authentication on loopback only)."""

    def __init__(self, *, fsync: bool = False, root: Path | None = None, port: int = 0) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(MISSING)
        self.bindir = bindir
        self.fsync = fsync
        self.root = root or Path(tempfile.mkdtemp(prefix="trioq-pg-"))
        self.data = self.root / "data"
        self.port = port or free_port()
        self.url = f"postgresql://trioq@127.0.0.1:{self.port}/postgres"
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to nobody
            shutil.chown(self.root, UNPRIVILEGED_USER)
            self._as_user = _run_as(UNPRIVILEGED_USER)

    def _run(self, tool: str, *args: str) -> None:
        command = [*self._as_user, os.path.join(self.bindir, tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}")

    def init(self) -> None:
        """Create the cluster (no fsync: a test database need not survive power loss)."""
        self._run("initdb", "-D", str(self.data), "-U", "trioq", "-A", "trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=50"
        )
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w",
                  "-t", str(START_TIMEOUT_S), "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: end sessions and shut down cleanly; `immediate`: abort)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (a crash: no clean-up, no checkpoint) and
        wait until they are gone, so `start` may run at once (recovering from the WAL)."""
        postmaster = psutil.Process(int((self.data / "postmaster.pid").read_text().split()[0]))
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            process.kill()
        psutil.wait_procs(processes, timeout=START_TIMEOUT_S)

    def running(self) -> bool:
        """Whether the server is up."""
        return _running(self.data)

    def destroy(self) -> None:
        """Stop the server if it runs and delete its files."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run_as(user: str) -> list[str]:
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user, "--"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    raise RuntimeError("running as root, and neither runuser nor setpriv can drop to nobody")


def _running(data: Path) -> bool:
    pid_file = data / "postmaster.pid"
    if not pid_file.exists():
        return False
    return psutil.pid_exists(int(pid_file.read_text().split()[0]))


def kept_server(root: Path) -> PrivateServer:
    """The server kept in `root` across test sessions, made there by the first session that
    asks and started if it is down; its port is in `root/port`. Mutation runs use it
    (TRIOQ_TEST_POSTGRES_DIR) so that each mutant's test session does not run initdb."""
    port_file = root / "port"
    if port_file.exists():
        server = PrivateServer(root=root, port=int(port_file.read_text()))
        if not server.running():
            server.start()
        return server
    root.mkdir(parents=True, exist_ok=True)
    server = PrivateServer(root=root)
    if os.geteuid() == 0:
        shutil.chown(root, UNPRIVILEGED_USER)
    server.init()
    server.start()
    port_file.write_text(str(server.port))
    return server


def start_private_server(*, fsync: bool = False) -> PrivateServer:
    """A new private server, initialised and started."""
    server = PrivateServer(fsync=fsync)
    try:
        server.init()
        server.start()
    except BaseException:
        server.destroy()
        raise
    return server


def stop_kept_server(root: Path) -> None:
    """Stop and delete a server that `kept_server` made (after a mutation run)."""
    port_file = root / "port"
    if port_file.exists():
        PrivateServer(root=root, port=int(port_file.read_text())).destroy()


def drop_schemas(server: PrivateServer, prefix: str) -> None:
    """Drop every schema whose name starts with `prefix` (starting the server if a test left
    it down)."""
    import psycopg

    if not server.running():
        server.start()
    with psycopg.connect(server.url, autocommit=True) as connection:
        names = connection.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchall()
        for (name,) in names:
            connection.execute(f'DROP SCHEMA "{name}" CASCADE')


if __name__ == "__main__":  # `python -m tests.support.postgres stop DIR`, used by `make mutation`
    import sys

    if sys.argv[1:2] != ["stop"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.support.postgres stop DIR")
    stop_kept_server(Path(sys.argv[2]))

