"""Who holds the PostgreSQL lease, and when a broker may call its holder gone.

The lease row (store/postgres.py) names its holder with `Holder.text()`: this process's host,
kernel boot, network and pid namespaces, pid and start time, the addresses it listens on, and
a random nonce. A broker restarted after a crash (kill -9, a supervisor starting the same
command again) finds its predecessor's lease still live for up to a TTL. It may take it over
at once, without waiting for the expiry, when it can prove the holder is gone
(`proven_gone`):

* same machine and boot: the holder's host name and kernel boot id are this process's;
* same network namespace: its listening addresses mean the same sockets as ours;
* this process listens now on an address the holder listened on. A broker keeps its TCP
  listener open from before it first asks for the lease until after it released it (ha.py's
  RoleLoop), and the kernel lets one socket at a time listen on an address (trioq does not
  set SO_REUSEPORT): so the holder no longer has its listener, and cannot be serving or
  renewing its lease;
* and, where this process can see it (same pid namespace), no live process has the holder's
  pid with its start time (a recycled pid has another start time).

Two live brokers can never both believe this of each other: each would have to listen on an
address the other listens on, in the same namespace. Without /proc (not Linux) the boot and
namespaces are unknown and nothing is ever proven: the broker waits for the expiry, as before.
Safety never rests on the proof alone: a takeover bumps the lease's epoch, and every commit
checks the epoch in the database, so even a wrongly taken lease could not let two brokers
write.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterable

import attrs

FORMAT = "trioq/1"
UNKNOWN = "-"


@attrs.frozen
class Holder:
    """One broker process as the lease row names it."""

    host: str
    boot: str
    netns: str
    pidns: str
    pid: int
    start: str
    """The process's start time in clock ticks after boot (UNKNOWN when unreadable)."""
    listen: tuple[str, ...]
    """HOST:PORT of each listening TCP socket (as bound, e.g. 0.0.0.0:6789)."""
    nonce: str

    def text(self) -> str:
        """The holder id written to the lease row (readable in SQL; no spaces in values)."""
        fields = {
            "host": self.host, "boot": self.boot, "netns": self.netns, "pidns": self.pidns,
            "pid": str(self.pid), "start": self.start, "listen": ",".join(self.listen),
            "nonce": self.nonce,
        }  # fmt: skip
        return " ".join([FORMAT, *(f"{key}={value}" for key, value in fields.items())])

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        """The Holder a lease row names, or None (no holder, an older trioq's random id)."""
        if not text:
            return None
        words = text.split(" ")
        if words[0] != FORMAT:
            return None
        fields = dict(word.partition("=")[::2] for word in words[1:])
        try:
            return cls(
                host=fields["host"], boot=fields["boot"], netns=fields["netns"],
                pidns=fields["pidns"], pid=int(fields["pid"]), start=fields["start"],
                listen=tuple(a for a in fields["listen"].split(",") if a),
                nonce=fields["nonce"],
            )  # fmt: skip
        except (KeyError, ValueError):
            return None


def this_process(listening: Iterable[str]) -> Holder:
    """This process, listening on `listening` (HOST:PORT each), with a fresh nonce."""
    pid = os.getpid()
    return Holder(
        host=socket.gethostname(), boot=_read(BOOT_ID), netns=_namespace("net"),
        pidns=_namespace("pid"), pid=pid, start=start_time(pid),
        listen=tuple(sorted(listening)), nonce=secrets.token_hex(8),
    )  # fmt: skip


def proven_gone(
    recorded: str | None, me: Holder, alive: Callable[[int, str], bool] | None = None
) -> bool:
    """Whether the lease holder `recorded` is provably a broker process that is gone (see the
    module docstring), so that `me` may take its live lease over at once."""
    other = Holder.parse(recorded)
    if other is None or other.nonce == me.nonce:
        return False
    same_place = (other.host, other.boot, other.netns) == (me.host, me.boot, me.netns)
    if not same_place or UNKNOWN in (me.boot, me.netns):
        return False
    if not set(other.listen) & set(me.listen):
        return False
    still_running = (alive or process_alive)(other.pid, other.start)
    return not (other.pidns == me.pidns != UNKNOWN and still_running)


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read().strip() or UNKNOWN
    except OSError:
        return UNKNOWN


def _namespace(kind: str) -> str:
    try:
        link = os.readlink(f"/proc/self/ns/{kind}")  # e.g. net:[4026531833]
    except OSError:
        return UNKNOWN
    return link.partition("[")[2].rstrip("]") or UNKNOWN


def start_time(pid: int) -> str:
    """The process's start time in clock ticks after boot (field 22 of /proc/PID/stat), or
    UNKNOWN: with the pid, it names one process (a pid is reused, its start time is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return UNKNOWN
    fields = stat.rpartition(b")")[2].split()  # after the command name, which may hold spaces
    return fields[19].decode() if len(fields) > 19 else UNKNOWN


def process_alive(pid: int, start: str) -> bool:
    """Whether a process with this pid and start time runs (visible to this process); with
    the start time unknown, whether any process has the pid."""
    if start == UNKNOWN:
        return os.path.exists(f"/proc/{pid}")
    return start_time(pid) == start
