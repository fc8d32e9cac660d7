"""The options of a new job, shared by PUSH, the items of PUSHB and (later) PUSHF.

`JobFields.__post_init__` turns the wire values into normalised ones in place, with the seed's
rules and texts: numeric strings count, durations are clamped, `maxAttempts` of 1 or less runs
once, fractions round up, Infinity becomes 2,147,483,647, negative `delay` means ready at once.
`data` stays raw MessagePack bytes (`msgspec.Raw`): the payload is never decoded, only measured
and handed back verbatim, which is both faster and exactly "untouched".
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import msgspec

from .errors import CommandError
from .fields import ABSENT, Checked, FromRaw, checked_only
from .values import (
    MAX_DATA_BYTES,
    MAX_DEPENDENCIES,
    MAX_DURATION_MS,
    MAX_INT32,
    MAX_SAFE_INTEGER,
    MAX_TAGS,
    at_least,
    at_most,
    bounded_str_list,
    duration,
    finite,
    flag,
    integer,
    is_whole,
    number,
    optional_str,
    short_str,
    tidy_number,
)

NO_DATA = msgspec.Raw()
JS_UNDEFINED = b"\xd4\x00\x00"
DEFAULT_MAX_ATTEMPTS = 3
MAX_JOB_NAME = 256  # characters, as the reference counts them
BAD_JOB_NAME = "Job name must be a non-empty string of at most 256 characters"
DEFAULT_BACKOFF_MS = 1000
MAX_BACKOFF_DELAY_MS = 86_400_000
DEFAULT_STACK_TRACE_LIMIT = 10
MAX_GROUP_PRIORITY = 2_097_151

_decode_any = msgspec.msgpack.Decoder().decode
_encode = msgspec.msgpack.Encoder().encode
_astuple = msgspec.structs.astuple


def max_attempts(value: Any) -> int:
    """Apply the seed's maxAttempts rule: ≤1 runs once, fractions round up, Infinity is 2^31-1."""
    if value is None:
        return DEFAULT_MAX_ATTEMPTS
    if value.__class__ is int and 1 <= value <= MAX_INT32:
        return value
    result = number(value, "maxAttempts")
    if result != result:  # NaN
        raise CommandError("maxAttempts must be a finite number")
    if result <= 1:
        return 1
    if result >= MAX_INT32:
        return MAX_INT32
    return math.ceil(result)


def backoff_options(value: Any) -> tuple[float | int, dict[str, Any] | None]:
    """Read `backoff` as a number or `{type, delay?, maxDelay?}`; returns (base, config)."""
    if value is None:
        return DEFAULT_BACKOFF_MS, None
    if not isinstance(value, dict):
        base = duration(value, "backoff", minimum=0)
        return base, None
    kind = "fixed" if value.get("type") == "fixed" else "exponential"
    delay = value.get("delay")
    base = DEFAULT_BACKOFF_MS if delay is None else duration(delay, "backoff.delay", minimum=0)
    config: dict[str, Any] = {"type": kind, "delay": base}
    if value.get("maxDelay") is not None:
        cap = finite(value["maxDelay"], "backoff.maxDelay")
        at_least(cap, 0, "backoff.maxDelay")
        at_most(cap, MAX_BACKOFF_DELAY_MS, "backoff.maxDelay")
        config["maxDelay"] = cap
    return base, config


def repeat_options(value: Any) -> dict[str, Any] | None:
    """Validate `repeat`; numbers finite, `every` positive; returned normalised."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CommandError("repeat must be an object")
    result: dict[str, Any] = {"count": 0}
    for key in ("limit", "count", "startDate", "endDate"):
        if value.get(key) is not None:
            result[key] = finite(value[key], f"repeat.{key}")
    if value.get("every") is not None:
        every = duration(value["every"], "repeat.every")
        if every <= 0:  # the seed names no text: the reference's
            raise CommandError("repeat.every must be a positive finite number")
        result["every"] = every
    for key in ("pattern", "tz"):
        if value.get(key) is not None:
            result[key] = optional_str(value[key], f"repeat.{key}")
    if value.get("immediately") is not None:
        result["immediately"] = flag(value["immediately"], "repeat.immediately")
    return result


def dedup_options(value: Any) -> tuple[float | int | None, bool, bool]:
    """Read `dedup: {ttl?, extend?, replace?}`."""
    if value is None:
        return None, False, False
    if not isinstance(value, dict):
        raise CommandError("dedup must be an object")
    ttl = value.get("ttl")
    ttl = None if ttl is None else duration(ttl, "dedup.ttl")
    return (
        ttl,
        flag(value.get("extend"), "dedup.extend"),
        flag(value.get("replace"), "dedup.replace"),
    )


def check_group_priority(priority: float) -> None:
    """With a group, priority is an integer from 0 (first) through 2,097,151."""
    if not is_whole(priority):
        raise CommandError("priority must be an integer when groupId is set")
    at_least(priority, 0, "priority")
    at_most(priority, MAX_GROUP_PRIORITY, "priority")


def job_data(value: msgspec.Raw | bytes, default: bytes | None = None) -> bytes:
    """A job's `data`: present (or `default`), at most 10 MB, and decodable by workers."""
    return job_payload(value, default)[0]


def job_payload(value: msgspec.Raw | bytes, default: bytes | None = None) -> tuple[bytes, Any]:
    """`job_data`, with the data decoded: the check has to decode it anyway, and a PUSH
    looks inside it again for an old SDK's `data.name` (`hoist_name`)."""
    raw = bytes(value)
    if not raw or raw == JS_UNDEFINED:
        if default is None:
            raise CommandError("data is required")
        raw = default
    if len(raw) > MAX_DATA_BYTES:
        raise CommandError("Job data too large (max 10MB)")
    return raw, decode_payload(raw, "data")


def check_payload(raw: bytes, field: str) -> None:
    """Refuse a payload that would not decode for the workers (e.g. a string that is not UTF-8).

    Payloads are stored raw and handed back verbatim, so one bad producer could otherwise
    poison every consumer that pulls the job.
    """
    decode_payload(raw, field)


def decode_payload(raw: bytes, field: str) -> Any:
    """The payload decoded, or the error `check_payload` words."""
    try:
        return _decode_any(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        raise CommandError(f"{field} is not valid MessagePack (strings must be UTF-8)") from None


def hoist_name(data: bytes, payload: Any) -> tuple[str | None, bytes]:
    """Older SDKs put the job name in `data.name`; move it out when the job has no name.
    `payload` is `data` decoded (a fresh value: the name is removed from it)."""
    if not isinstance(payload, dict):
        return None, data
    name = payload.get("name")
    if not isinstance(name, str):
        return None, data
    del payload["name"]
    return name, _encode(payload)


def group_max_size(value: Any) -> float:
    """groupMaxSize: a whole number from 1 to 2^53 - 1 (out of range: the reference's text)."""
    size = integer(value, "groupMaxSize")
    if not 0 < size <= MAX_SAFE_INTEGER:
        raise CommandError("group.maxSize must be a positive safe integer")
    return size


class Dedup(TypedDict):
    """A job's `dedup` options, normalised."""

    ttl: float | None
    extend: bool
    replace: bool


class JobFields(msgspec.Struct, kw_only=True):
    """Every option a new job may carry; checked and normalised in place by `__post_init__`.

    Each field is declared with the type it holds after that (protocol/fields.py). Numbers
    and `dedup` have their defaults; absent lists, flags and strings stay None.
    """

    name: Checked[str] = ABSENT
    data: FromRaw[bytes] = NO_DATA
    priority: Checked[float] = 0
    delay: Checked[float] = 0
    maxAttempts: Checked[int] = DEFAULT_MAX_ATTEMPTS
    backoff: Checked[float] = DEFAULT_BACKOFF_MS
    ttl: Checked[float | None] = None
    timeout: Checked[float | None] = None
    uniqueKey: Checked[str | None] = None
    dependsOn: Checked[list[str] | None] = None
    tags: Checked[list[str] | None] = None
    groupId: Checked[str | None] = None
    groupMaxSize: Checked[float | None] = None
    lifo: Checked[bool | None] = None
    removeOnComplete: Checked[bool | None] = None
    removeOnFail: Checked[bool | None] = None
    durable: Checked[bool | None] = None
    repeat: Checked[dict[str, Any] | None] = None
    parentId: Checked[str | None] = None
    childrenIds: Checked[list[str] | None] = None
    failParentOnFailure: Checked[bool | None] = None
    removeDependencyOnFailure: Checked[bool | None] = None
    ignoreDependencyOnFailure: Checked[bool | None] = None
    continueParentOnFailure: Checked[bool | None] = None
    stallTimeout: Checked[float | None] = None
    stackTraceLimit: Checked[float] = DEFAULT_STACK_TRACE_LIMIT
    keepLogs: Checked[float | None] = None
    sizeLimit: Checked[float | None] = None
    dedup: Checked[Dedup] = ABSENT
    debounceId: Checked[str | None] = None
    debounceTtl: Checked[float | None] = None
    timestamp: Checked[float | None] = None

    # Set by normalisation only: a job that sends either (under its `@checked/` wire name,
    # fields.py) is not a plain job, so the checks set both again.
    backoffConfig: Checked[dict[str, Any] | None] = checked_only("backoffConfig")
    optionsGiven: Checked[bool] = checked_only("optionsGiven", False)

    def __post_init__(self) -> None:
        # The data and name checks (`job_payload` and the name rule) written out here: this
        # runs for every job of every batch, and a call costs more than most of them.
        raw = bytes(self.data)
        if not raw or raw == JS_UNDEFINED:
            raise CommandError("data is required")
        if len(raw) > MAX_DATA_BYTES:
            raise CommandError("Job data too large (max 10MB)")
        try:
            payload = _decode_any(raw)
        except (msgspec.DecodeError, ValueError, RecursionError):
            raise CommandError("data is not valid MessagePack (strings must be UTF-8)") from None
        name: Any = self.name
        if name is None:
            name, raw = hoist_name(raw, payload)
            self.name = name = "default" if name is None else name
        # The reference's rule and text, for a given name and one an older SDK put in data.
        if not isinstance(name, str) or not 0 < len(name) <= MAX_JOB_NAME:
            raise CommandError(BAD_JOB_NAME)
        self.data = raw
        options = _option_slices.get(self.__class__) or option_slice(self.__class__)
        if (
            _astuple(self)[options] == _PLAIN_OPTIONS
            # Equal is not enough for the defaulted numbers: 0.0 and False equal 0, and a
            # client's value of another type is normalised or refused (ints are exact).
            and self.priority.__class__ is int
            and self.delay.__class__ is int
            and self.maxAttempts.__class__ is int
            and self.backoff.__class__ is int
            and self.stackTraceLimit.__class__ is int
            # What only the checks set: a client could send them under their wire names
            # (fields.py), and the fast path would otherwise keep what it sent.
            and self.optionsGiven is False
            and self.backoffConfig is None
        ):
            # The common job sets no option at all: its fields are their defaults already.
            self.dedup = NO_DEDUP
            return
        self.optionsGiven = True
        self.backoffConfig = None  # only `backoff` sets it (a job without options ignores it)
        self._check_numbers()
        self._check_strings_and_flags()

    def _check_numbers(self) -> None:
        # Every check is guarded by `is not None`: most jobs set few options, and this runs for
        # every job of every batch.
        if self.groupId is not None:
            self.groupId = short_str(self.groupId, "groupId")
        self.priority = 0 if self.priority is None else self._priority()
        self.delay = 0 if self.delay is None else duration(self.delay, "delay")
        self.maxAttempts = max_attempts(self.maxAttempts)
        if self.backoff is None:
            self.backoff = DEFAULT_BACKOFF_MS
        else:
            self.backoff, self.backoffConfig = backoff_options(self.backoff)
        if self.ttl is not None:
            self.ttl = duration(self.ttl, "ttl", minimum=0)
        if self.timeout is not None:
            self.timeout = duration(self.timeout, "timeout", minimum=0)
        if self.groupMaxSize is not None:
            self.groupMaxSize = group_max_size(self.groupMaxSize)
        if self.stackTraceLimit is None:
            self.stackTraceLimit = DEFAULT_STACK_TRACE_LIMIT
        else:
            self.stackTraceLimit = finite(self.stackTraceLimit, "stackTraceLimit")
        for field in _OPTIONAL_FINITE:
            value = getattr(self, field)
            if value is not None:
                setattr(self, field, finite(value, field))
        if self.debounceTtl is not None:
            self.debounceTtl = duration(self.debounceTtl, "debounceTtl")
        if self.timestamp is not None:
            stamp = finite(self.timestamp, "timestamp")
            if abs(stamp) > MAX_DURATION_MS:
                raise CommandError(
                    "timestamp must be between -4320000000000000 and 4320000000000000"
                )
            self.timestamp = stamp
        if self.repeat is not None:
            self.repeat = repeat_options(self.repeat)

    def _priority(self) -> float | int:
        value = finite(self.priority, "priority")
        if self.groupId is not None:
            check_group_priority(value)
        return value

    def _check_strings_and_flags(self) -> None:
        for field in _OPTIONAL_STRINGS:
            value = getattr(self, field)
            if value is not None:
                short_str(value, field)
        # Absent lists and flags stay None (the domain reads None as empty / false): setting
        # defaults here would cost a setattr per field per job.
        for field, max_items in _STRING_LISTS.items():
            value = getattr(self, field)
            if value is not None:
                setattr(self, field, bounded_str_list(value, field, max_items))
        for field in _FLAGS:
            value = getattr(self, field)
            if value is not None and value is not True and value is not False:
                raise CommandError(f"{field} must be a boolean")
        if self.dedup is None:
            self.dedup = NO_DEDUP
        else:
            ttl, extend, replace = dedup_options(self.dedup)
            self.dedup = {"ttl": ttl, "extend": extend, "replace": replace}


OPTION_FIELDS = tuple(
    name
    for name in JobFields.__struct_fields__
    if name not in ("name", "data", "backoffConfig", "optionsGiven")
)
_OPTION_COUNT = len(OPTION_FIELDS)
_PLAIN_OPTIONS = tuple(
    field.default for field in msgspec.structs.fields(JobFields) if field.name in OPTION_FIELDS
)
"""The options of a job that sets none: what a decoded job's options are compared with."""
_option_slices: dict[type, slice] = {}


def option_slice(cls: type[msgspec.Struct]) -> slice:
    """Where the option fields sit in `astuple` of a JobFields subclass (they are contiguous:
    subclasses put their own fields first), so "no option given" is one C-level count."""
    found = _option_slices.get(cls)
    if found is None:
        fields = cls.__struct_fields__
        start = fields.index(OPTION_FIELDS[0])
        assert fields[start : start + _OPTION_COUNT] == OPTION_FIELDS, "option fields moved"
        found = _option_slices[cls] = slice(start, start + _OPTION_COUNT)
    return found


_OPTIONAL_FINITE = ("stallTimeout", "keepLogs", "sizeLimit")
_OPTIONAL_STRINGS = ("uniqueKey", "parentId", "debounceId")
_STRING_LISTS = {"dependsOn": MAX_DEPENDENCIES, "tags": MAX_TAGS, "childrenIds": MAX_DEPENDENCIES}
_FLAGS = (
    "lifo",
    "removeOnComplete",
    "removeOnFail",
    "durable",
    "failParentOnFailure",
    "removeDependencyOnFailure",
    "ignoreDependencyOnFailure",
    "continueParentOnFailure",
)
NO_DEDUP: Dedup = {"ttl": None, "extend": False, "replace": False}


__all__ = ["JobFields", "tidy_number"]
