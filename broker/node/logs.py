"""Structured logs: plain text, JSON lines, or key=value lines, at a chosen level.

Levels, for every log call in broker/ and store/:
- INFO: what is normal, including the end of a trouble (start-up steps, taking the lease and
  serving, a signal, a database reachable again, a client closed for misbehaving, a webhook
  delivery that will be retried).
- WARNING: what an operator must act on or look at (the database unreachable, commits withheld,
  stepping down to standby, a lease not released, a checkpoint that failed, accept failing,
  stored settings dropped, a webhook target refused).
- ERROR: a bug, with its traceback (it closed one connection or dropped one timer).
"""

from __future__ import annotations

import json
import logging
import time

_STANDARD = set(vars(logging.makeLogRecord({})))


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
    if record.exc_info:
        fields["error"] = logging.Formatter().formatException(record.exc_info)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object."""
        return json.dumps(_fields(record), default=str)


class KeyValueFormatter(logging.Formatter):
    """`key=value` pairs a line (values quoted when they hold spaces)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as key=value pairs."""
        parts = []
        for key, value in _fields(record).items():
            text = str(value)
            parts.append(f"{key}={json.dumps(text) if ' ' in text or '=' in text else text}")
        return " ".join(parts)


FORMATTERS = {
    "text": logging.Formatter("%(levelname)s %(name)s: %(message)s"),
    "json": JsonFormatter(),
    "kv": KeyValueFormatter(),
}


def configure(level: str, fmt: str) -> None:
    """Send the broker's logs to stderr in format `fmt` from `level` up."""
    if fmt not in FORMATTERS:
        raise ValueError(f"log format must be one of {', '.join(FORMATTERS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(FORMATTERS[fmt])
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
