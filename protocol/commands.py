"""One msgspec Struct per command, tagged on `cmd`, validated on decode.

Where the seed fixes the error text a field is decoded as any value (`Checked[T]`, see
fields.py) and `__post_init__` applies the rules with the helpers in `values.py`, so a decoded
command is always a valid, normalised command whose fields have their declared types.
Command names are case-sensitive, as in the reference server.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from .bulk import SLICED_ITEMS, array_length, given
from .errors import CommandError
from .extensions import ext_hook
from .fields import ABSENT, Checked, FromRaw, checked_only
from .jobspec import JS_UNDEFINED, NO_DATA, JobFields, check_payload
from .values import (
    at_least,
    at_most,
    finite,
    flag,
    lease_token,
    optional_str,
    queue_name,
    required_str,
    short_str,
    str_list,
)

DEFAULT_LOCK_TTL_MS = 30_000
MAX_POLL_MS = 60_000
MAX_PULL_BATCH = 1000


def raw_or_none(value: msgspec.Raw | bytes | None, field: str) -> bytes | None:
    """Return checked raw MessagePack bytes, or None when absent or a JS `undefined`."""
    if value is None:
        return None
    raw = bytes(value)
    if not raw or raw == JS_UNDEFINED:
        return None
    check_payload(raw, field)
    return raw


class Command(msgspec.Struct, kw_only=True, tag_field="cmd"):
    """Base of every command; `reqId` is echoed in the reply whatever its type."""

    reqId: Any = None


class Hello(Command, tag="Hello"):
    """Protocol negotiation; the server answers with its own version and capabilities."""

    protocolVersion: object = None
    capabilities: object = None


class Auth(Command, tag="Auth"):
    """Authenticate the connection with a token."""

    token: object = None


class Ping(Command, tag="Ping"):
    """Liveness check."""


class Push(JobFields, tag_field="cmd", tag="PUSH"):
    """Add one job; `jobId` makes it idempotent."""

    reqId: Any = None
    queue: Checked[str] = ABSENT
    jobId: Checked[str | None] = None

    def __post_init__(self) -> None:
        self.queue = queue_name(self.queue)
        JobFields.__post_init__(self)  # not super(): every PUSH
        if self.jobId is not None:
            self.jobId = short_str(self.jobId, "jobId") or None


class PushItem(JobFields):
    """One job of a PUSHB batch; `customId` plays the part of PUSH's `jobId`."""

    customId: Checked[str | None] = None

    def __post_init__(self) -> None:
        JobFields.__post_init__(self)  # not super(): this runs for every item of a batch
        if self.customId is not None:
            self.customId = short_str(self.customId, "customId") or None


_decode_item = msgspec.msgpack.Decoder(PushItem, ext_hook=ext_hook).decode
_decode_item_list = msgspec.msgpack.Decoder(list[PushItem], ext_hook=ext_hook).decode
_decode_any = msgspec.msgpack.Decoder(ext_hook=ext_hook).decode
_decode_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
# A batch's lists in one C-level pass when they are what they should be (ACKB); anything else
# takes the item-by-item checks, which word the error.
_decode_str_list = msgspec.msgpack.Decoder(list[str]).decode
_decode_token_list = msgspec.msgpack.Decoder(list[str | None]).decode
_decode_payloads = msgspec.msgpack.Decoder().decode  # as `check_payload` decodes one


def decode_items(raw_items: list[msgspec.Raw], first_index: int = 0) -> list[PushItem]:
    """Decode PUSHB items one by one so that an error can name its index (`jobs[i]: ...`)."""
    items = []
    for index, raw in enumerate(raw_items, first_index):
        try:
            items.append(_decode_item(raw))
        except CommandError as exc:
            raise CommandError(f"jobs[{index}]: {exc}") from None
        except msgspec.ValidationError as exc:
            raise CommandError(f"jobs[{index}]: {exc}") from None
    return items


class PushBatch(Command, tag="PUSHB"):
    """Add many jobs to one queue, all or nothing.

    The item array is read raw; up to SLICED_ITEMS items are then decoded and validated at
    once (one C-level loop) into `jobs`. An error there carries no index, so the slow path
    decodes the frame again as `PushBatchItems` to word it `jobs[i]: ...`. A larger batch is
    `large`: `jobs` is empty and `raw_jobs` kept, for the engine to check in slices
    (protocol/bulk.py).
    """

    queue: Checked[str] = ABSENT
    raw_jobs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="jobs")
    large: bool = False  # set here: what a client sends is overwritten
    jobs: Checked[list[PushItem]] = checked_only("jobs")

    def __post_init__(self) -> None:
        # The order of the whole decode: a `jobs` of the wrong type, the queue, no `jobs`.
        count = array_length(self.raw_jobs)
        if count is None and given(self.raw_jobs):
            raise CommandError("jobs must be an array")
        self.queue = queue_name(self.queue)
        if count is None:
            raise CommandError("jobs must be an array")
        self.large = count > SLICED_ITEMS
        self.jobs = [] if self.large else _decode_item_list(self.raw_jobs)


class PushBatchItems(msgspec.Struct):
    """PUSHB with its items kept raw, to find which item is invalid (the slow path)."""

    queue: object = None
    jobs: list[msgspec.Raw] | None = None

    def __post_init__(self) -> None:
        queue_name(self.queue)
        if self.jobs is None:
            raise CommandError("jobs must be an array")
        decode_items(self.jobs)


def positive_count(value: Any, field: str) -> int:
    """Read a whole number of at least 1 (fractions round down)."""
    count = math.floor(finite(value, field))
    if count < 1:
        raise CommandError(f"{field} must be at least 1")
    return count


def group_options(value: Any) -> dict[str, Any] | None:
    """Read PULL's `group: {concurrency?, limit?: {max, duration}}`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CommandError("group must be an object")
    options: dict[str, Any] = {}
    if value.get("concurrency") is not None:
        options["concurrency"] = positive_count(value["concurrency"], "group.concurrency")
    limit = value.get("limit")
    if limit is not None:
        if not isinstance(limit, dict):
            raise CommandError("group.limit must be an object")
        duration = finite(limit.get("duration"), "group.limit.duration")
        if duration <= 0:
            raise CommandError("group.limit.duration must be greater than 0")
        options["limit"] = {
            "max": positive_count(limit.get("max"), "group.limit.max"),
            "duration": duration,
        }
    return options


def poll_timeout(value: Any) -> float | int:
    """Read a long-poll timeout: 0..60000 ms (a missing one, 0, is Pull's own default)."""
    result = finite(value, "timeout")
    at_least(result, 0, "timeout")
    return at_most(result, MAX_POLL_MS, "timeout")


def lock_ttl(value: Any) -> float | int:
    """Read `lockTtl`: any finite number, default 30000 (checked before any claim)."""
    return DEFAULT_LOCK_TTL_MS if value is None else finite(value, "lockTtl")


class Pull(Command, tag="PULL"):
    """Claim the next ready job, optionally waiting and optionally with a lease."""

    queue: Checked[str] = ABSENT
    timeout: Checked[float] = ABSENT
    owner: Checked[str | None] = None
    lockTtl: Checked[float] = ABSENT
    detach: Checked[bool] = ABSENT
    group: Checked[dict[str, Any] | None] = None

    def __post_init__(self) -> None:
        self.queue = queue_name(self.queue)
        if self.timeout is None:  # `poll_timeout`'s default without the call (every PULL)
            self.timeout = 0
        else:
            self.timeout = poll_timeout(self.timeout)
        if self.owner is self.lockTtl is self.detach is self.group is None:
            # The common PULL: no lease, no group; nothing more to check.
            self.lockTtl = DEFAULT_LOCK_TTL_MS
            self.detach = False
            return
        self.owner = optional_str(self.owner, "owner") or None
        self.lockTtl = lock_ttl(self.lockTtl)
        self.detach = flag(self.detach, "detach")
        self.group = group_options(self.group)


class PullBatch(Pull, tag="PULLB"):
    """Claim up to `count` ready jobs."""

    count: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count is None:
            raise CommandError("count is required")
        count = finite(self.count, "count")
        at_least(count, 1, "count")
        self.count = int(at_most(count, MAX_PULL_BATCH, "count"))


class Ack(Command, tag="ACK"):
    """Complete an active job, storing its result."""

    id: Checked[str] = ABSENT
    result: FromRaw[bytes | None] = NO_DATA
    token: Checked[str | None] = None
    removeOnComplete: Checked[bool] = ABSENT

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        # Each check only for a field that was sent: most ACKs carry an id and nothing else.
        result = self.result
        self.result = None if result is NO_DATA else raw_or_none(result, "result")
        if self.token is not None:
            self.token = lease_token(self.token, "token")
        if self.removeOnComplete is not None:
            self.removeOnComplete = flag(self.removeOnComplete, "removeOnComplete")
        else:
            self.removeOnComplete = False


class AckBatch(Command, tag="ACKB"):
    """Complete many active jobs; every token is checked before anything changes. Its lists
    are read raw (`raw_ids`, `raw_results`, `raw_tokens`) and checked into `ids`, `results`
    and `tokens`; more than SLICED_ITEMS ids make it `large`: `ids` is empty and the raw lists
    are kept, for the engine to check in slices (protocol/bulk.py)."""

    raw_ids: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="ids")
    raw_results: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="results")
    raw_tokens: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="tokens")
    large: bool = False  # set here: what a client sends is overwritten
    ids: Checked[list[str]] = checked_only("ids")
    results: Checked[list[bytes | None] | None] = checked_only("results")
    tokens: Checked[list[str | None] | None] = checked_only("tokens")

    def __post_init__(self) -> None:
        count = array_length(self.raw_ids)
        if count is None:
            raise CommandError("ids must be an array of strings")
        self.large = count > SLICED_ITEMS
        if self.large:
            self.ids, self.results, self.tokens = [], None, None
            return
        ids = self.ids = _typed(_decode_str_list, self.raw_ids)
        if ids is None:  # not an array of strings: the check that says why
            ids = self.ids = _decode_any(self.raw_ids)
            if not all(isinstance(i, str) for i in ids):
                raise CommandError("ids must be an array of strings")
        checked: list[bytes | None] | None = None
        if given(self.raw_results):
            try:
                results = _decode_raw_list(self.raw_results)
            except msgspec.ValidationError:
                raise CommandError("results must be an array") from None
            if len(results) != len(ids):
                raise CommandError("ACKB results length must match ids length")
            if _decodes(self.raw_results):  # then so does every item: each kept as its bytes
                checked = list(map(bytes, results))
                if JS_UNDEFINED in checked:  # a JS `undefined` is no result
                    checked = [None if item == JS_UNDEFINED else item for item in checked]
            else:  # one check per item, which words the error (called from here, as it was)
                checked = [raw_or_none(item, "results[]") for item in results]
        self.results = checked
        self.tokens = _checked_tokens(self.raw_tokens, len(ids)) if given(self.raw_tokens) else None


def _typed(decode: Any, raw: msgspec.Raw) -> Any:
    """`decode(raw)` (a typed decoder), or None when `raw` is not of its type or does not
    decode: then the item-by-item checks run, as they did alone, and word the error."""
    try:
        return decode(raw)
    except msgspec.DecodeError:  # (a ValidationError too)
        return None


_DEEPER = b"\x91" * 10  # arrays of one: see `_decodes`


def _decodes(raw: msgspec.Raw) -> bool:
    """Whether `raw` decodes (`check_payload`'s test, of a whole array at once), nested a few
    levels deeper than it is: how deep a value may nest depends on the Python calls under way
    (3.11 counts both against one recursion limit, a call not yet specialised more than one
    that is), and each item's own check runs some calls deeper than this; with the margin, a
    value that passes here passes there too (one that fails here gets the item's check)."""
    try:
        _decode_payloads(b"".join((_DEEPER, raw)))
    except (msgspec.DecodeError, ValueError, RecursionError):
        return False
    return True


def _checked_tokens(raw: msgspec.Raw, count: int) -> list[str | None]:
    """An ACKB's lease tokens (`raw`, given), one per id: strings or nil, an empty one no
    token (`lease_token`)."""
    tokens: Any = _typed(_decode_token_list, raw)
    if tokens is None:  # not an array of strings and nils: the checks that say why
        tokens = _decode_any(raw)
        if not isinstance(tokens, list) or len(tokens) != count:
            raise CommandError("ACKB tokens length must match ids length")
        return [lease_token(token, "tokens[]") for token in tokens]
    if len(tokens) != count:
        raise CommandError("ACKB tokens length must match ids length")
    if "" in tokens:
        tokens = [token or None for token in tokens]
    return tokens


MAX_STACK_LINES = 100  # a FAIL's stack lines read, before the job's stackTraceLimit applies


class Fail(Command, tag="FAIL"):
    """Fail an active job: retry with backoff, or move it to the dead-letter queue."""

    id: Checked[str] = ABSENT
    error: Checked[str | None] = None
    stack: Checked[list[str] | None] = None
    unrecoverable: Checked[bool] = ABSENT
    token: Checked[str | None] = None
    removeOnFail: Checked[bool] = ABSENT

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        if self.error is not None and not isinstance(self.error, str):
            self.error = str(self.error)
        if self.stack is not None:
            if not isinstance(self.stack, list):
                raise CommandError("stack must be an array of strings")
            # The reference's rule: lines that are not strings are left out, at most 100 kept.
            self.stack = [line for line in self.stack if isinstance(line, str)][:MAX_STACK_LINES]
        self.unrecoverable = flag(self.unrecoverable, "unrecoverable")
        self.token = lease_token(self.token, "token")
        self.removeOnFail = flag(self.removeOnFail, "removeOnFail")


class JobQuery(Command):
    """A command that names one job by `id`."""

    id: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")


class GetJob(JobQuery, tag="GetJob"):
    """Read a job with its state, result and failure reason."""


class GetState(JobQuery, tag="GetState"):
    """Read a job's state (`unknown` when not found)."""


class GetResult(JobQuery, tag="GetResult"):
    """Read a completed job's result."""


class QueueQuery(Command):
    """A command that names one queue."""

    queue: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.queue = queue_name(self.queue)


class GetJobCounts(QueueQuery, tag="GetJobCounts"):
    """Count a queue's jobs by state."""


class Count(QueueQuery, tag="Count"):
    """Count a queue's waiting, prioritized and delayed jobs."""


def optional_finite(value: Any, field: str) -> float | int | None:
    """Read an optional finite number."""
    return None if value is None else finite(value, field)


class JobHeartbeat(Command, tag="JobHeartbeat"):
    """A worker says an active job is alive; with its token the lease is renewed."""

    id: Checked[str] = ABSENT
    token: Checked[str | None] = None
    duration: Checked[float | None] = None

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        self.token = lease_token(self.token, "token")
        self.duration = optional_finite(self.duration, "duration")


class JobHeartbeatB(Command, tag="JobHeartbeatB"):
    """JobHeartbeat for many jobs (positional `ids` and `tokens`)."""

    ids: Checked[list[str]] = ABSENT
    tokens: Checked[list[str | None] | None] = None

    def __post_init__(self) -> None:
        if not isinstance(self.ids, list) or not all(isinstance(i, str) for i in self.ids):
            raise CommandError("ids must be an array of strings")
        if self.tokens is not None:
            if not isinstance(self.tokens, list):
                raise CommandError("tokens must be an array")
            self.tokens = [lease_token(token, "tokens[]") for token in self.tokens]


class RegisterWorker(Command, tag="RegisterWorker"):
    """A worker announces itself (an upsert by `workerId`, else by `name`)."""

    name: Checked[str] = ABSENT
    queues: Checked[list[str]] = ABSENT
    concurrency: Checked[float] = ABSENT
    workerId: Checked[str | None] = None
    hostname: Checked[str | None] = None
    pid: Checked[float | None] = None
    startedAt: object = None

    def __post_init__(self) -> None:
        self.name = required_str(self.name, "name")
        self.queues = str_list(self.queues, "queues")
        self.concurrency = optional_finite(self.concurrency, "concurrency") or 1
        self.workerId = optional_str(self.workerId, "workerId") or None
        self.hostname = optional_str(self.hostname, "hostname")
        self.pid = optional_finite(self.pid, "pid")


class UnregisterWorker(Command, tag="UnregisterWorker"):
    """A worker leaves."""

    workerId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.workerId = required_str(self.workerId, "workerId")


class Heartbeat(Command, tag="Heartbeat"):
    """A worker reports it is alive (`id` is the worker id)."""

    id: Checked[str] = ABSENT
    activeJobs: Checked[float | None] = None
    processed: Checked[float | None] = None
    failed: Checked[float | None] = None

    def __post_init__(self) -> None:
        self.id = required_str(self.id, "id")
        for field in ("activeJobs", "processed", "failed"):
            setattr(self, field, optional_finite(getattr(self, field), field))


class ListWorkers(Command, tag="ListWorkers"):
    """List registered workers."""


class SubscribeEvents(Command, tag="SubscribeEvents"):
    """This connection receives the queue's job events as `{type: "event", event}` frames
    (one subscription per connection: a second one replaces the first). With `events` (event
    names or patterns, as the WebSocket's Subscribe takes them) it receives those instead,
    and `queue` may be left out (every queue)."""

    queue: Checked[str | None] = None
    events: Checked[list[str] | None] = None

    def __post_init__(self) -> None:
        if self.events is not None:
            events = self.events
            if not isinstance(events, list) or not events:
                raise CommandError("events must be a non-empty array")
            if not all(isinstance(pattern, str) for pattern in events):
                raise CommandError("events must be a non-empty array")
            if self.queue is None:
                return
        self.queue = queue_name(self.queue)


class UnsubscribeEvents(Command, tag="UnsubscribeEvents"):
    """Stop this connection's job events."""


WIRE_COMMANDS: tuple[type[msgspec.Struct], ...] = (
    Hello,
    Auth,
    Ping,
    Push,
    PushBatch,
    Pull,
    PullBatch,
    Ack,
    AckBatch,
    Fail,
    GetJob,
    GetState,
    GetResult,
    GetJobCounts,
    Count,
    JobHeartbeat,
    JobHeartbeatB,
    RegisterWorker,
    UnregisterWorker,
    Heartbeat,
    ListWorkers,
    SubscribeEvents,
    UnsubscribeEvents,
)
