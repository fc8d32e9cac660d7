"""Starting and stopping the servers under test, and sampling their memory.

* :class:`TrioqServer` runs ``<python> -m broker serve`` as a child process.
* :class:`ReferenceServer` runs the real bunqueue server through ``../shared/reference/bunqueue/``
  (``start.sh`` / ``stop.sh``), resolved from this package's location.
* :class:`RssSampler` polls a process tree's resident set size from a background thread.

Both servers run in the storage modes ``memory``, ``sqlite`` and ``postgres``. In postgres mode
trioq starts a private PostgreSQL server of its own (as the tests start theirs), unless it is
given a database URL: :class:`SharedPostgres` is one private server on which every server of a
comparison gets a fresh, empty database, so trioq and the reference use the same PostgreSQL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import psutil

__all__ = [
    "MODES",
    "REFERENCE_DIR",
    "REFERENCE_MODES",
    "REPO_ROOT",
    "START_TIMEOUT",
    "ReferenceServer",
    "RssSampler",
    "RunningServer",
    "ServerStartError",
    "SharedPostgres",
    "TrioqServer",
    "find_listening_pid",
    "free_port",
    "reference_available",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The project root (the directory that holds ``benchmarks/`` and ``broker/``)."""

REFERENCE_DIR = REPO_ROOT.parent / "shared" / "reference" / "bunqueue"
"""Where ``start.sh`` and ``stop.sh`` of the reference server live."""

MODES = ("memory", "sqlite", "postgres")
"""Storage modes trioq can be started in."""

REFERENCE_MODES = ("memory", "sqlite", "postgres")
"""Storage modes the reference server can be started in (postgres: given a database URL)."""

REFERENCE_CACHE = Path(os.environ.get("PEER_DIR") or Path.home() / ".cache" / "bunqueue-reference")
"""Where ``start.sh`` installs bun and bunqueue (its ``$PEER_DIR``)."""

START_TIMEOUT = 20.0
"""Seconds a freshly started trioq broker gets to accept connections."""

REFERENCE_START_TIMEOUT = 600.0
"""Seconds ``start.sh`` may take (its first run installs bun and bunqueue from npm)."""

LOOPBACK = "127.0.0.1"


class ServerStartError(Exception):
    """A server could not be started; the message says why (with its output when there is any)."""


class RunningServer(Protocol):
    """A server this harness started and must stop."""

    name: str
    host: str
    port: int

    @property
    def pid(self) -> int | None:
        """The server's process id, for RSS sampling (None if unknown)."""
        ...

    def stop(self) -> None:
        """Stop the server and clean up after it."""
        ...


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    """True if a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def find_listening_pid(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (any address), or None if not found."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        connections = []
    for conn in connections:
        if _listens_on(conn, port) and conn.pid is not None:
            return int(conn.pid)
    # Without the rights to list every socket, look through the processes we may inspect.
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(_listens_on(conn, port) for conn in proc.net_connections(kind="tcp")):
                return int(proc.pid)
    return None


def _listens_on(conn: Any, port: int) -> bool:
    return bool(conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port)


class RssSampler:
    """Track the peak resident set size of a process and all its descendants.

    A daemon thread reads the RSS of every process in the tree each ``interval`` seconds (the
    list of descendants is refreshed about once a second, since walking the process table costs
    far more than reading a few ``/proc/<pid>/statm`` files). Use as a context manager or call
    :meth:`start` and :meth:`stop`; :attr:`peak_bytes` holds the maximum seen.
    """

    def __init__(self, pid: int, interval: float = 0.05, children_every: float = 1.0) -> None:
        """Prepare to sample ``pid``; nothing runs until :meth:`start`."""
        self.pid = pid
        self.interval = interval
        self.children_every = children_every
        self.peak_bytes: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def __enter__(self) -> RssSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start sampling in the background."""
        self._thread.start()

    def stop(self) -> int | None:
        """Stop sampling (after one last sample) and return the peak RSS in bytes, if any."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.peak_bytes

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        tree: list[psutil.Process] = [root]
        refreshed = 0.0
        while True:
            now = time.monotonic()
            if now - refreshed >= self.children_every:
                with contextlib.suppress(psutil.Error):
                    tree = [root, *root.children(recursive=True)]
                refreshed = now
            total = 0
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
            if total:
                self.samples += 1
                if self.peak_bytes is None or total > self.peak_bytes:
                    self.peak_bytes = total
            if self._stop.is_set():
                return
            self._stop.wait(self.interval)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


class TrioqServer:
    """A trioq broker running as a child process of the benchmark.

    Started as ``<sys.executable> -m broker serve --host H --port P --http-port 0`` plus
    ``--memory`` (memory mode) or ``--data-dir <fresh temporary directory>`` (sqlite mode), with
    the project root as working directory.
    """

    name = "trioq"

    def __init__(
        self,
        process: subprocess.Popen[str],
        host: str,
        port: int,
        data_dir: Path | None,
        output: deque[str],
        database: Any = None,
    ) -> None:
        """Wrap an already started broker process; use :meth:`start` to create one."""
        self.process = process
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.output = output
        self.database = database  # the private PostgreSQL server of postgres mode

    @property
    def pid(self) -> int | None:
        """The broker's process id."""
        return self.process.pid

    @classmethod
    def command(
        cls,
        mode: str,
        host: str,
        port: int,
        data_dir: Path | None,
        module: str = "broker",
        postgres_url: str = "",
        python: str = "",
    ) -> list[str]:
        """The command line that starts the broker in ``mode`` (with ``python``, by default
        this interpreter)."""
        _check_mode(mode)
        cmd = [python or sys.executable, "-m", module, "serve"]
        if mode == "memory":
            cmd.append("--memory")
        elif mode == "postgres":
            cmd += ["--postgres", postgres_url]
        else:
            cmd += ["--data-dir", str(data_dir)]
        cmd += ["--host", host, "--port", str(port), "--http-port", "0"]
        return cmd

    @classmethod
    def start(
        cls,
        mode: str,
        host: str = LOOPBACK,
        *,
        timeout: float = START_TIMEOUT,
        module: str = "broker",
        postgres_url: str = "",
        root: Path = REPO_ROOT,
        python: str = "",
    ) -> TrioqServer:
        """Start the broker on a free port and wait until it is ready.

        Ready means it printed a line containing ``listening`` or its port accepts a
        connection, whichever comes first, within ``timeout`` seconds. Raises
        :class:`ServerStartError` (with the tail of its output) if it exits or times out.
        In postgres mode it uses ``postgres_url``, else a private PostgreSQL server of its own.
        ``root`` is the checkout whose code runs (its working directory and ``PYTHONPATH``):
        another one than this project's runs an older trioq beside this one (``--baseline``),
        ``python`` another interpreter (``--baseline-python``).
        """
        _check_mode(mode)
        port = free_port(host)
        data_dir = Path(tempfile.mkdtemp(prefix="trioq-bench-")) if mode == "sqlite" else None
        database = None
        if mode == "postgres" and not postgres_url:
            database = _start_postgres()
            postgres_url = database.url
        cmd = cls.command(mode, host, port, data_dir, module, postgres_url, python)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if root != REPO_ROOT:
            env["PYTHONPATH"] = str(root)
        try:
            process = subprocess.Popen(
                cmd,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            _remove(data_dir)
            if database is not None:
                database.destroy()
            raise ServerStartError(f"trioq could not be launched: {exc}") from exc
        output: deque[str] = deque(maxlen=40)
        ready = threading.Event()
        assert process.stdout is not None
        threading.Thread(
            target=_drain, args=(process.stdout, output, ready), name="trioq-output", daemon=True
        ).start()
        server = cls(process, host, port, data_dir, output, database)
        deadline = time.monotonic() + timeout
        while not (ready.is_set() or port_accepts(host, port)):
            code = process.poll()
            if code is not None:
                time.sleep(0.1)  # let the output thread catch the last lines
                server.stop()
                raise ServerStartError(
                    f"trioq exited with code {code} before it was ready.\n"
                    f"  command: {' '.join(cmd)}\n{server.output_tail()}"
                )
            if time.monotonic() > deadline:
                server.stop()
                raise ServerStartError(
                    f"trioq did not accept connections on {host}:{port} within {timeout:g} s.\n"
                    f"  command: {' '.join(cmd)}\n{server.output_tail()}"
                )
            time.sleep(0.05)
        return server

    def output_tail(self) -> str:
        """The last lines the broker printed, indented, or a note that it printed nothing."""
        lines = list(self.output)
        if not lines:
            return "  (no output)"
        return "\n".join(f"  | {line}" for line in lines)

    def stop(self) -> None:
        """Send SIGTERM (SIGKILL after 5 s) to the broker and any children it left; remove its
        data directory."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            children = []
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        _remove(self.data_dir)
        if self.database is not None:
            self.database.destroy()


def _start_postgres() -> Any:
    """A private PostgreSQL server with fsync on (a durable setting, as in production)."""
    from tests.support.postgres import start_private_server

    try:
        return start_private_server(fsync=True)
    except RuntimeError as exc:
        raise ServerStartError(f"no PostgreSQL server for postgres mode: {exc}") from exc


class SharedPostgres:
    """One private PostgreSQL server (fsync on) for a whole comparison, started on first use.

    Each server under test gets a fresh, empty database of its own on it (:meth:`fresh_url`),
    so trioq, an older trioq and the reference all write to the same PostgreSQL with the same
    settings, and none reads what another left. :meth:`close` stops and deletes it.
    """

    def __init__(self) -> None:
        """Nothing is started until :meth:`fresh_url`."""
        self._server: Any = None
        self._count = 0

    def fresh_url(self) -> str:
        """The URL of a new empty database (the server is started on the first call)."""
        import psycopg

        if self._server is None:
            self._server = _start_postgres()
        self._count += 1
        name = f"bench{self._count}"
        with psycopg.connect(self._server.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self._server.url.rsplit("/", 1)[0] + "/" + name

    def close(self) -> None:
        """Stop the server and delete its files."""
        if self._server is not None:
            self._server.destroy()
            self._server = None


def _drain(stream: IO[str], output: deque[str], ready: threading.Event) -> None:
    """Read the broker's output until EOF, keeping the tail and flagging the ``listening`` line.

    Reading continues after start-up so the broker never blocks on a full pipe.
    """
    with contextlib.suppress(ValueError, OSError):
        for line in stream:
            output.append(line.rstrip("\n"))
            if "listening" in line.lower():
                ready.set()


def _remove(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _pid_file_value(peer_dir: Path = REFERENCE_CACHE) -> int | None:
    """The pid ``start.sh`` wrote to ``$PEER_DIR/server.pid``, if readable."""
    try:
        return int((peer_dir / "server.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _own_peer_dir() -> Path:
    """A ``$PEER_DIR`` for one reference server: ``start.sh`` allows one server per directory,
    so a private one sharing the installed ``node_modules`` lets this harness start its server
    while another user's runs. Without an installation yet, the shared directory itself (the
    first ``start.sh`` installs there)."""
    installed = REFERENCE_CACHE / "node_modules"
    if not (installed / ".bin" / "bun").exists():
        return REFERENCE_CACHE
    peer_dir = Path(tempfile.mkdtemp(prefix="bunqueue-peer-"))
    (peer_dir / "node_modules").symlink_to(installed)
    return peer_dir


def reference_available(script_dir: Path = REFERENCE_DIR) -> bool:
    """True if the reference server's ``start.sh`` and ``stop.sh`` are present."""
    return (script_dir / "start.sh").is_file() and (script_dir / "stop.sh").is_file()


class ReferenceServer:
    """The real bunqueue server, started with ``start.sh <mode> <tcp> <http>``.

    ``start.sh`` keeps one server per ``$PEER_DIR`` and refuses to start a second one; this class
    only calls ``stop.sh`` for a server it started itself, each in a ``$PEER_DIR`` of its own
    (see :func:`_own_peer_dir`). In sqlite mode ``start.sh`` puts the database in a fresh
    ``mktemp -d`` directory of its own; in postgres mode it is given the database's URL
    (``$BUNQUEUE_POSTGRES_URL``).
    """

    name = "reference"

    def __init__(
        self, host: str, port: int, http_port: int, script_dir: Path, peer_dir: Path
    ) -> None:
        """Describe a running reference server; use :meth:`start` to create one."""
        self.host = host
        self.port = port
        self.http_port = http_port
        self.script_dir = script_dir
        self.peer_dir = peer_dir
        self._pid = find_listening_pid(port) or _pid_file_value(peer_dir)

    @property
    def pid(self) -> int | None:
        """The pid of the process listening on the server's TCP port."""
        return self._pid

    @classmethod
    def start(
        cls,
        mode: str,
        *,
        script_dir: Path = REFERENCE_DIR,
        timeout: float = REFERENCE_START_TIMEOUT,
        postgres_url: str = "",
    ) -> ReferenceServer:
        """Start the reference on free loopback ports; raise :class:`ServerStartError` if not.

        In postgres mode it uses ``postgres_url`` (start.sh's default, the machine's server at
        127.0.0.1:5432, when empty)."""
        _check_mode(mode)
        if not reference_available(script_dir):
            raise ServerStartError(f"the reference server is not available ({script_dir})")
        peer_dir = _own_peer_dir()
        env = {**os.environ, "PEER_DIR": str(peer_dir)}
        if postgres_url:
            env["BUNQUEUE_POSTGRES_URL"] = postgres_url
        port = free_port()
        http_port = free_port()
        while http_port == port:
            http_port = free_port()
        cmd = ["bash", str(script_dir / "start.sh"), mode, str(port), str(http_port)]
        try:
            done = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                env=env,
            )
        except subprocess.TimeoutExpired as exc:
            _drop_peer_dir(peer_dir)
            raise ServerStartError(f"{' '.join(cmd)} did not finish within {timeout:g} s") from exc
        if done.returncode != 0:
            _drop_peer_dir(peer_dir)
            message = (done.stderr.strip() or done.stdout.strip() or "(no output)").splitlines()
            hint = ""
            if any(line.startswith("already running") for line in message):
                hint = (
                    f"\n  another reference server is running; stop it with"
                    f" {script_dir / 'stop.sh'} (or set PEER_DIR) and try again"
                )
            tail = "\n".join(f"  | {line}" for line in message[-20:])
            raise ServerStartError(
                f"the reference server did not start (exit code {done.returncode}):\n{tail}{hint}"
            )
        return cls(LOOPBACK, port, http_port, script_dir, peer_dir)

    def stop(self) -> None:
        """Stop the server with ``stop.sh``; remove its private ``$PEER_DIR``."""
        subprocess.run(
            ["bash", str(self.script_dir / "stop.sh")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
            env={**os.environ, "PEER_DIR": str(self.peer_dir)},
        )
        _drop_peer_dir(self.peer_dir)


def _drop_peer_dir(peer_dir: Path) -> None:
    """Remove a private ``$PEER_DIR`` (never the shared installation it links to)."""
    if peer_dir != REFERENCE_CACHE:
        (peer_dir / "node_modules").unlink(missing_ok=True)  # the link, not the install
        _remove(peer_dir)


def each_server(modes: Sequence[str]) -> Iterator[tuple[str, RunningServer]]:
    """Start trioq, then the reference (if available), once per mode; yield each running
    server with a label such as "trioq (memory)" and stop it when the caller is done."""
    for mode in modes:
        starters: list[tuple[str, Callable[[], RunningServer]]] = [
            ("trioq", lambda m=mode: TrioqServer.start(m))  # type: ignore[misc]
        ]
        if reference_available():
            starters.append(("reference", lambda m=mode: ReferenceServer.start(m)))  # type: ignore[misc]
        for name, start in starters:
            try:
                server = start()
            except ServerStartError as exc:
                print(f"{name} ({mode}): did not start: {exc}", file=sys.stderr)
                continue
            try:
                yield f"{name} ({mode})", server
            finally:
                server.stop()


def add_comparison_arguments(parser: argparse.ArgumentParser, pg_jobs_what: str) -> None:
    """The options every side-by-side benchmark takes: the reference, `--baseline` checkouts
    and their interpreters. `pg_jobs_what` names what `--reference-pg-jobs` counts."""
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    parser.add_argument(
        "--reference-dir",
        type=Path,
        default=REFERENCE_DIR,
        help="where the reference's start.sh and stop.sh are (default %(default)s)",
    )
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="only trioq and the --baseline checkouts (e.g. two builds of trioq)",
    )
    parser.add_argument(
        "--reference-pg-jobs",
        type=int,
        default=1_000,
        help=f"{pg_jobs_what} for the reference in postgres mode (default %(default)s:"
        " it runs at a few hundred jobs/s)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also run the trioq checkout in DIR (e.g. a git worktree of an older commit) as"
        " the column 'trioq before', alternating with the others; repeatable (before2, ...)",
    )
    parser.add_argument(
        "--baseline-python",
        action="append",
        default=[],
        metavar="PYTHON",
        help="the interpreter of the --baseline of the same position (default: this one), e.g."
        " another venv's python, to compare interpreters in one run",
    )
