"""Value rules shared by every command: numbers, strings, booleans, queue names.

The seed's rules for numbers are permissive and exact: a numeric string counts as its number,
integers may arrive as floats (msgpackr sends every integer beyond 32 bits as float64), and an
error names the field (`delay must be a finite number`). Each helper here raises CommandError with
that text, so a command's validation reads as a list of one-line rules.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import CommandError

MAX_DURATION_MS = 4_320_000_000_000_000.0
MAX_SAFE_INTEGER = 2**53 - 1
MAX_INT32 = 2_147_483_647
MAX_QUEUE_NAME = 256
MAX_DATA_BYTES = 10 * 1024 * 1024
# Caps on client strings the broker stores (documented in README's limits).
MAX_ID_LENGTH = 1024  # jobId, customId, uniqueKey, groupId, parentId, debounceId, list items
MAX_TAGS = 100
MAX_DEPENDENCIES = 1000  # dependsOn and childrenIds, after removing duplicates
MAX_MESSAGE_LENGTH = 4096  # a progress message
MAX_LOG_LINE_BYTES = 64 * 1024  # an AddLog message, in bytes of UTF-8

_NUMERIC_TEXT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*|\s*[+-]?Infinity\s*")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_\-.:]+")


# Integers MessagePack carries in 32 bits. A larger one goes out in 64 bits, which msgpackr
# (the official JS client) decodes as a BigInt, not a number; such values are kept as floats
# (exact up to 2**53), as JavaScript itself sends them.
JS_INT_MIN = -(2**31)
JS_INT_END = 2**32


def tidy_number(value: float) -> float | int:
    """Return whole floats within 32 bits as ints; other numbers as floats (see above)."""
    if isinstance(value, float):
        if value.is_integer() and JS_INT_MIN <= value < JS_INT_END:
            return int(value)
        return value
    # An int here is beyond 32 bits: `finite` returns the others before the call.
    return float(value) if abs(value) <= MAX_SAFE_INTEGER else value


def number(value: Any, field: str) -> float | int:
    """Read a number (int, float or numeric string); NaN and infinities pass through.

    Raises CommandError(`<field> must be a number`) for anything else, booleans included.
    """
    if isinstance(value, bool):
        raise CommandError(f"{field} must be a number")
    if isinstance(value, int | float):
        return value
    if isinstance(value, str) and _NUMERIC_TEXT.fullmatch(value):
        return float(value.strip())  # float() reads "Infinity" as JavaScript's Number() does
    raise CommandError(f"{field} must be a number")


def finite(value: Any, field: str) -> float | int:
    """Read a finite number; NaN and infinities fail with `<field> must be a finite number`."""
    if value.__class__ is int and JS_INT_MIN <= value < JS_INT_END:
        return value
    result = number(value, field)
    if isinstance(result, float) and not math.isfinite(result):
        raise CommandError(f"{field} must be a finite number")
    return tidy_number(result)


def js_text(value: float) -> str:
    """Print a number as JavaScript does: whole numbers without a decimal point."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def at_least(value: float, minimum: float, field: str) -> float:
    """Check a lower bound with the seed's wording."""
    if value < minimum:
        raise CommandError(f"{field} must be at least {js_text(minimum)}")
    return value


def at_most(value: float, maximum: float, field: str) -> float:
    """Check an upper bound with the seed's wording."""
    if value > maximum:
        raise CommandError(f"{field} must be at most {js_text(maximum)}")
    return value


def clamp_duration(value: float | int) -> float | int:
    """Clamp a duration in ms to ±4.32e15 (about 136,900 years), as the seed says."""
    if value > MAX_DURATION_MS:
        return int(MAX_DURATION_MS)
    if value < -MAX_DURATION_MS:
        return -int(MAX_DURATION_MS)
    return value


def duration(value: Any, field: str, *, minimum: float | None = None) -> float | int:
    """Read a finite duration in ms, optionally bounded below, clamped to ±4.32e15."""
    result = finite(value, field)
    if minimum is not None:
        at_least(result, minimum, field)
    return clamp_duration(result)


def is_whole(value: float) -> bool:
    """Whether a number is whole (beyond 32 bits a whole number is kept as a float)."""
    return isinstance(value, int) or value.is_integer()


def integer(value: Any, field: str) -> float:
    """Read a finite number that must be whole."""
    result = finite(value, field)
    if not is_whole(result):
        raise CommandError(f"{field} must be an integer")
    return result  # whole: an int, or a float beyond 32 bits (see `tidy_number`)


def optional_str(value: Any, field: str) -> str | None:
    """Read an optional string."""
    if value is None or isinstance(value, str):
        return value
    raise CommandError(f"{field} must be a string")


def lease_token(value: Any, field: str) -> str | None:
    """Read an optional lock token; an empty one is no token (a `useLocks: false` worker of
    the official client settles with `token: ""`)."""
    return optional_str(value, field) or None


def required_str(value: Any, field: str) -> str:
    """Read a required, non-empty string (`<field> is required`)."""
    if value is None or value == "":
        raise CommandError(f"{field} is required")
    if not isinstance(value, str):
        raise CommandError(f"{field} must be a string")
    return value


def short_str(value: Any, field: str, maximum: int = MAX_ID_LENGTH) -> str | None:
    """Read an optional string of at most `maximum` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise CommandError(f"{field} must be a string")
    if len(value) > maximum:
        raise CommandError(f"{field} too long (max {maximum} characters)")
    return value


def utf8_size(text: str) -> int:
    """The length of `text` in bytes of UTF-8 (ASCII text is not encoded to count it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def bounded_str_list(value: Any, field: str, max_items: int) -> list[str]:
    """Read an optional array of short strings, duplicates removed (first kept), at most
    `max_items` of them."""
    items = list(dict.fromkeys(str_list(value, field)))
    if len(items) > max_items:
        raise CommandError(f"{field} has too many items (max {max_items})")
    for item in items:
        if len(item) > MAX_ID_LENGTH:
            raise CommandError(f"{field} items too long (max {MAX_ID_LENGTH} characters)")
    return items


def flag(value: Any, field: str) -> bool:
    """Read an optional boolean; absent is False."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise CommandError(f"{field} must be a boolean")


def str_list(value: Any, field: str) -> list[str]:
    """Read an optional array of strings; absent is empty."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CommandError(f"{field} must be an array of strings")
    return value


_KNOWN_QUEUE_NAMES: set[str] = set()
"""Names `queue_name` accepted before: a busy broker sees the same few on every command, and a
set lookup costs less than the checks (bounded: cleared when it reaches MAX_KNOWN_QUEUE_NAMES)."""
MAX_KNOWN_QUEUE_NAMES = 4096


def queue_name(value: Any) -> str:
    """Check a queue name: 1..256 characters of letters, digits, `_`, `-`, `.` and `:`."""
    if value.__class__ is str and value in _KNOWN_QUEUE_NAMES:
        return value
    _check_queue_name(value)
    if len(_KNOWN_QUEUE_NAMES) >= MAX_KNOWN_QUEUE_NAMES:
        _KNOWN_QUEUE_NAMES.clear()
    _KNOWN_QUEUE_NAMES.add(value)
    return value


def _check_queue_name(value: Any) -> None:
    if value is None or value == "":
        raise CommandError("Queue name is required")
    if not isinstance(value, str):
        raise CommandError("Queue name must be a string")
    if len(value) > MAX_QUEUE_NAME:
        raise CommandError(f"Queue name too long (max {MAX_QUEUE_NAME} characters)")
    if not _QUEUE_NAME.fullmatch(value):
        raise CommandError("Queue name contains invalid characters")
