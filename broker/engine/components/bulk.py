"""Large commands worked through in slices: one batch must not stall everyone (issue 29).

A PUSHB of 200,000 jobs was one engine pass of about 2 s (measured: read 15 ms, item decode
480, checks 170, job building 170, indexing 380, row encoding 320, SQLite 450, reply 30): no
other connection was served meanwhile. Now a large command (a PUSHB, ACKB or PUSHF of more
than SLICED_ITEMS items, a Drain, Clean, Obliterate, PurgeDlq or RetryDlq of many jobs) is a
`Bulk`: the actor runs one slice of one bulk per pass (about 5 ms of work), commits the pass,
sends its replies and sits out a few turns of the scheduler before the next (actor.py,
BULK_YIELDS), so other connections' commands are answered between slices.

A bulk goes through two phases, each in slices:

1. **Check.** Everything that can refuse the command is checked (item decoding and
   validation, dependencies, tokens, group room, cycles; for a removal, choosing its jobs),
   and nothing changes. An error answers the command and leaves the state as it was.
2. **Apply.** The check slices store, part by part, what a restart needs to apply the rest
   (the raw items, or the chosen ids); the pass that finishes the checks stores the bulk's
   record: that commit is the commit point. Each later pass applies one slice and stores its
   position with its rows. The pass of the last slice deletes the records; the reply is
   staged there and sent after that commit, so the client hears nothing before every change
   is stored, and a read after the reply sees them all.

All or nothing for its client: a broker stopped (even by kill -9) before the commit point
stored nothing of the command (the client got no reply); one stopped after it finds the
record at restart and applies the rest (`BulkRunner.restore`), as the large removals did
already (housekeeping.py). So after a restart a batch is either absent or whole: the state a
successful command whose reply was lost gives. That is why what a slice applied may be seen
and used at once by other clients (a worker may pull a job of a PUSHB still being applied):
the command is committed; a crash cannot take those jobs back.

What other commands did between the checks and a slice is taken as done before the slice:
an item is applied as the same command sent then would be (a customId pushed meanwhile by
another client is a duplicate; a job an ACKB checked that is no longer the same activation, its
lease run out, is reported in `ignoredIds`; a job a Drain chose that a worker started meanwhile
is not removed). The client's own later commands wait (`BulkRunner.held`) and run, in order,
right after the bulk's reply.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import msgspec

from broker.engine.errors import EngineError
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.ids import uuid7
from protocol import CommandError
from store import Record

# Its name before the engine was split into layers: operators filter on it.
log = logging.getLogger("broker.engine.bulk")

BULK = "bulk"
"""Record kind: a bulk past its commit point (its kind, its own body, how many parts)."""
BULK_PART = "bulk-part"
"""Record kind: one part of a bulk's items, written by a check slice (key `<bulk>:<n>`).
Parts of a bulk with no BULK record (the broker stopped before the commit point) are dropped
at restart. Written a slice at a time because a record is stored in its pass's commit:
measured here, a 4.4 MB record took 30-76 ms to commit, a 50 kB one a millisecond."""
BULK_AT = "bulk-at"
"""Record kind: how many of a bulk's items are applied (rewritten by each slice)."""

Reply = dict[str, Any]
_encode = msgspec.msgpack.Encoder().encode
_decode_position = msgspec.msgpack.Decoder(int).decode
_decode_head = msgspec.msgpack.Decoder(tuple[str, msgspec.Raw, int]).decode


class Bulk:
    """A large command in progress. A kind gives `check` (one slice of checks; True when all
    passed; raises EngineError or CommandError to refuse the command; it may `keep` parts of
    what a restart would need), `body` (its own part of the record), `apply` (one slice from
    `position`; True when all is applied) and `answer` (the reply); and a way to build it
    again from its record and parts, which its component registers in `BulkRunner.resume`."""

    kind: ClassVar[str] = ""

    def __init__(self, session: ReplySink | None, req_id: object) -> None:
        self.session = session
        self.req_id = req_id
        self.key = uuid7()
        self.applying = False  # past the commit point: nothing may refuse it now
        self.position = 0  # items applied (stored with each slice)
        self.parts = 0  # part records written
        self.new_parts: list[bytes] = []  # kept by the last check slice, to be written

    def check(self, state: EngineState, now: float) -> bool:
        """Check one slice; True once every check passed."""
        raise NotImplementedError

    def keep(self, part: bytes | msgspec.Raw) -> None:
        """Store `part` (of what a restart needs) with this pass; parts come back in order."""
        self.new_parts.append(bytes(part))  # (PostgreSQL takes bytes, not Raw)

    def body(self) -> bytes:
        """The record's own body (besides the parts): what `resume` needs with them."""
        raise NotImplementedError

    def apply(self, state: EngineState, now: float) -> bool:
        """Apply one slice from `position` (advancing it); True once all is applied."""
        raise NotImplementedError

    def answer(self) -> Reply:
        """The reply, once all is applied."""
        raise NotImplementedError

    def record(self) -> Record:
        """The record of the commit point: the kind, its body, how many parts."""
        return Record(BULK, self.key, _encode((self.kind, msgspec.Raw(self.body()), self.parts)))


Resume = Callable[[bytes, list[bytes], int], Bulk]
"""How a restart builds a bulk again: from its record's body, its parts and the position."""


def part_key(key: str, number: int) -> str:
    """The key of a bulk's part record."""
    return f"{key}:{number:08d}"


class BulkRunner:
    """The bulks in progress, and the commands their clients sent meanwhile."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self.running: deque[Bulk] = deque()
        # Each session with a bulk in progress -> the actor's items (batches of its later
        # commands, its disconnect) that wait for the bulk's reply. Read by the actor for
        # every command while a bulk runs: a session in here runs nothing else.
        self.held: dict[ReplySink, list[Any]] = {}
        self.resume: dict[str, Resume] = {}  # Bulk.kind -> its Resume (the components')

    def start(self, bulk: Bulk) -> None:
        """Take a new bulk (the actor runs its slices at the end of this pass and the next
        ones); its session's later commands wait for its reply."""
        self.running.append(bulk)
        if bulk.session is not None:
            self.held[bulk.session] = []

    def advance(self, now: float) -> list[Any]:
        """One slice of the bulk at the front, which then goes to the back (bulks take turns).
        Returns the items its session held, when it finished (the caller runs them next)."""
        bulk = self.running.popleft()
        reply = self._step(bulk, now)
        if reply is None:
            self.running.append(bulk)
            return []
        self._forget(bulk)
        session = bulk.session
        if session is None:
            return []
        if reply:  # an empty reply: nobody left to answer
            session.stage_reply(reply, bulk.req_id)
        return self.held.pop(session, [])

    def _step(self, bulk: Bulk, now: float) -> Reply | None:
        """One slice; the reply (empty when there is no one to hear it) once the bulk ended."""
        state = self.state
        try:
            if not bulk.applying:
                if bulk.session is not None and bulk.session.closed:
                    return {}  # checks only so far, nothing changed: no one waits for it
                checked = bulk.check(state, now)
                self._write_parts(bulk)
                if checked:
                    bulk.applying = True
                    if state.changes.tracking:
                        state.changes.add_record(bulk.record())  # the commit point
                return None
            if not bulk.apply(state, now):
                if state.changes.tracking:
                    state.changes.add_record(Record(BULK_AT, bulk.key, _encode(bulk.position)))
                return None
            return bulk.answer() if bulk.session is not None else {}
        except (EngineError, CommandError) as exc:
            if bulk.applying:  # after the commit point nothing may refuse: a bug
                log.error("%s %s refused while applying: %s", bulk.kind, bulk.key, exc)
            return {"ok": False, "error": str(exc)}
        except Exception:  # a bug must cost this command, not the broker
            log.exception("%s %s failed", bulk.kind, bulk.key)
            return {"ok": False, "error": "Internal server error"}

    def _write_parts(self, bulk: Bulk) -> None:
        """Store the parts the last check slice kept, with this pass."""
        changes = self.state.changes
        for part in bulk.new_parts:
            if changes.tracking:
                changes.add_record(Record(BULK_PART, part_key(bulk.key, bulk.parts), part))
            bulk.parts += 1
        bulk.new_parts.clear()

    def _forget(self, bulk: Bulk) -> None:
        """A bulk ended: its records go, in the pass of its reply."""
        if not self.state.changes.tracking:
            return
        deletes = [(BULK, bulk.key), (BULK_AT, bulk.key)]
        deletes += [(BULK_PART, part_key(bulk.key, n)) for n in range(bulk.parts)]
        self.state.changes.add_records(deletes)

    def restore(self, records: list[Record]) -> None:
        """Bulks a stopped broker had committed to: they go on, from where they got (their
        sessions are gone: nobody hears their replies). Parts of a bulk stopped before its
        commit point are deleted."""
        positions = {r.key: _decode_position(r.body) for r in records if r.kind == BULK_AT}
        parts: dict[str, list[Record]] = {}
        for record in records:
            if record.kind == BULK_PART:
                parts.setdefault(record.key.rpartition(":")[0], []).append(record)
        for record in sorted((r for r in records if r.kind == BULK), key=lambda r: r.key):
            kind, body, count = _decode_head(record.body)
            kept = sorted(parts.pop(record.key, []), key=lambda r: r.key)
            resume = self.resume.get(kind)
            if resume is None or len(kept) != count:
                log.error("stored bulk %s (%r) cannot be resumed: dropped", record.key, kind)
                self.state.changes.add_record((BULK, record.key))
                parts[record.key] = kept
                continue
            bulk = resume(bytes(body), [part.body for part in kept], positions.get(record.key, 0))
            bulk.key = record.key
            bulk.applying = True
            bulk.parts = count
            self.running.append(bulk)
        for orphans in parts.values():  # no commit point: as if never sent
            self.state.changes.add_records([(BULK_PART, part.key) for part in orphans])
        resumed = {bulk.key for bulk in self.running}
        self.state.changes.add_records([(BULK_AT, key) for key in positions if key not in resumed])


def raw_array(chunks: list[bytes]) -> msgspec.Raw:
    """One MessagePack array of the items of several encoded arrays (each chunk the encoding
    of a list), without decoding them: a slice's part of a reply is encoded with the slice,
    and the reply joins the parts (200,000 ids: one copy of 7.6 MB instead of 30 ms of
    encoding in the pass that sends it)."""
    count = 0
    bodies = []
    for chunk in chunks:
        first = chunk[0]
        if first <= 0x9F:  # a fixarray
            count += first & 0x0F
            bodies.append(chunk[1:])
        elif first == 0xDC:
            count += int.from_bytes(chunk[1:3], "big")
            bodies.append(chunk[3:])
        else:
            count += int.from_bytes(chunk[1:5], "big")
            bodies.append(chunk[5:])
    return msgspec.Raw(array_head(count) + b"".join(bodies))


def raw_values(values: Sequence[bytes | msgspec.Raw]) -> msgspec.Raw:
    """One MessagePack array of values each already encoded."""
    return msgspec.Raw(array_head(len(values)) + b"".join(values))


def array_head(count: int) -> bytes:
    """MessagePack's header of an array of `count` values."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 0x10000:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def encoded(items: list[Any]) -> bytes:
    """`items` encoded as one MessagePack array (a chunk for `raw_array`)."""
    return _encode(items)
