"""The broker's configuration: every setting, its default and its help, in one table.

A setting comes from, in rising order of precedence: its default here, the TOML file
(`--config FILE` or TRIOQ_CONFIG; keys are the setting names), the environment
(`TRIOQ_<NAME>`, e.g. TRIOQ_HTTP_PORT), then the command line (`--http-port`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from broker.engine.state.queues import MAX_QUEUES

DB_FILE = "trioq.db"
ENV_PREFIX = "TRIOQ_"


PORT_RANGE = (0, 65_535)


def _setting(
    default: Any,
    help: str,
    bounds: tuple[int, int] | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A setting's field; `bounds` (low, high) limits a number, both ends included;
    `choices` lists the words a text setting may be (in any case)."""
    return attrs.field(
        default=default, metadata={"help": help, "bounds": bounds, "choices": choices}
    )


@attrs.frozen
class Config:
    """What `trioq serve` runs with (field metadata holds each setting's help text)."""

    host: str = _setting("127.0.0.1", "address to bind")
    port: int = _setting(6789, "TCP port (0 picks a free one)", PORT_RANGE)
    http_port: int = _setting(6790, "HTTP and WebSocket port (0 turns it off)", PORT_RANGE)
    data_dir: str = _setting("data", "directory of the SQLite store (created if missing)")
    memory: bool = _setting(False, "keep jobs in memory only (lost when the broker stops)")
    postgres_url: str = _setting(
        "", "store jobs in PostgreSQL at this URL (postgresql://user@host/db) instead of SQLite"
    )
    pg_schema: str = _setting("trioq", "PostgreSQL schema of this cluster (created if missing)")
    lease_ttl_s: float = _setting(10.0, "seconds a PostgreSQL writer's lease lasts unrenewed")
    advertise: str = _setting("", "HOST:PORT other brokers are told to reach this one at")
    pg_commit_thread: bool = _setting(
        False, "commit to PostgreSQL on a worker thread while the next pass runs"
    )
    auth_tokens: frozenset[str] = _setting(
        frozenset(), "require Auth with one of these tokens (env: comma-separated)"
    )
    keep_completed: int = _setting(10_000, "completed jobs kept for queries")
    keep_failed: int = _setting(10_000, "failed (dead-letter) jobs kept")
    keep_completed_s: float = _setting(7 * 86_400, "seconds a completed job is kept")
    keep_failed_s: float = _setting(7 * 86_400, "seconds a failed job is kept")
    max_queues: int = _setting(
        MAX_QUEUES, "queues that may exist at once (a push to one more is refused)", (1, 2**31)
    )
    shutdown_grace_s: float = _setting(5.0, "seconds in-flight replies get at shutdown")
    max_unsent_mib: int = _setting(
        1, "MiB of replies a client may leave unread before it stops being read", (1, 1 << 20)
    )
    max_unsent_total_mib: int = _setting(
        64,
        "MiB of unread replies of all clients together; past it, every client with more than "
        "64 KiB unread stops being read",
        (1, 1 << 20),
    )
    allow_private_webhooks: bool = _setting(
        False, "let webhooks target loopback, private and link-local addresses"
    )
    webhook_retry_s: float = _setting(1.0, "pause before a webhook's first retry (grows)")
    log_level: str = _setting(
        "INFO", "DEBUG, INFO, WARNING or ERROR", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    log_format: str = _setting(
        "text", "text, json or kv (key=value)", choices=("text", "json", "kv")
    )

    @property
    def db_path(self) -> str:
        """The SQLite file inside the data directory."""
        return os.path.join(self.data_dir, DB_FILE)


class ConfigError(Exception):
    """A setting that cannot be read; the text is for the operator."""


def settings() -> list[attrs.Attribute]:  # type: ignore[type-arg]
    """Every setting, in table order."""
    return list(attrs.fields(Config))


def convert(field: attrs.Attribute, value: Any, source: str) -> Any:  # type: ignore[type-arg]
    """Turn a value from TOML, the environment or the command line into the field's type;
    a value that cannot be used is a ConfigError saying what the setting takes."""
    kind = type(field.default)
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(value)
            return text in ("1", "true", "yes", "on")
        if kind is frozenset:
            return _tokens(value, source, field.name)
        converted = kind(value)  # type: ignore[misc]  # str, int or float
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {field.name} cannot be {value!r} ({_takes(field)})") from None
    bounds, choices = field.metadata.get("bounds"), field.metadata.get("choices")
    if choices is not None:  # in any case, given as the table spells it
        spelled = {choice.lower(): choice for choice in choices}.get(converted.lower())
        if spelled is None:
            raise ConfigError(f"{source}: {field.name} cannot be {value!r} ({_takes(field)})")
        return spelled
    if bounds is not None and not bounds[0] <= converted <= bounds[1]:
        # Out of range is refused, never wrapped: the kernel would take port 99999 as 34463.
        raise ConfigError(f"{source}: {field.name} cannot be {value!r} ({_takes(field)})")
    return converted


def _takes(field: attrs.Attribute) -> str:  # type: ignore[type-arg]
    """What a setting takes, as the end of an error line: `it must be ...`."""
    bounds, choices = field.metadata.get("bounds"), field.metadata.get("choices")
    if choices is not None:
        return f"it must be {', '.join(choices[:-1])} or {choices[-1]}"
    if bounds is not None:
        return f"it must be a whole number from {bounds[0]} to {bounds[1]}"
    kind = type(field.default)
    if kind is bool:
        return "it must be true or false"
    return "it must be a whole number" if kind is int else "it must be a number"


def _tokens(value: Any, source: str, name: str) -> frozenset[str]:
    """Auth tokens, trimmed. A blank one never authenticates, and is refused rather than
    dropped where it was given on purpose (`--auth-token ""`, a TOML list entry, a variable
    holding only commas): it would leave the broker open to all. An empty variable and a
    trailing comma are no token."""
    items = value.split(",") if isinstance(value, str) else list(value)
    tokens = frozenset(str(item).strip() for item in items if str(item).strip())
    blank_entry = not isinstance(value, str) and len(tokens) < len(items)
    if blank_entry or (isinstance(value, str) and value.strip() and not tokens):
        raise ConfigError(f"{source}: {name} cannot hold an empty token")
    return tokens


def load(file: str | None, environ: Mapping[str, str], flags: Mapping[str, Any]) -> Config:
    """Build the Config: defaults < TOML file < environment < command-line flags."""
    names = {field.name: field for field in settings()}
    layers = [_from_file(file, names) if file else {}, {}, {}]
    for field in names.values():
        env = environ.get(ENV_PREFIX + field.name.upper())
        if env is not None:
            layers[1][field.name] = convert(field, env, ENV_PREFIX + field.name.upper())
    for name, value in flags.items():
        layers[2][name] = convert(names[name], value, "--" + name.replace("_", "-"))
    for layer, source in zip(layers, (file, "the environment", "the command line"), strict=True):
        _check_storage(layer, source or "")
    return Config(**{name: value for layer in layers for name, value in layer.items()})


def _from_file(file: str, names: Mapping[str, attrs.Attribute]) -> dict[str, Any]:  # type: ignore[type-arg]
    try:
        with open(file, "rb") as handle:
            table = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {file}: {exc}") from None
    values = {}
    for key, value in table.items():
        field = names.get(key.replace("-", "_"))
        if field is None:
            raise ConfigError(f"{file}: unknown setting {key}")
        values[field.name] = convert(field, value, file)
    return values


def _check_storage(layer: Mapping[str, Any], source: str) -> None:
    """Refuse two kinds of storage given together by one source (memory, a data directory,
    PostgreSQL).

    One of the two is a mistake, and guessing which would either lose jobs or keep files.
    (A later source may still override an earlier one: `--memory` over a file's data_dir.)
    """
    if layer.get("memory") and "data_dir" in layer:
        raise ConfigError(f"{source}: --memory keeps no files, so it cannot go with --data-dir")
    if layer.get("postgres_url") and (layer.get("memory") or "data_dir" in layer):
        other = "--memory" if layer.get("memory") else "--data-dir"
        raise ConfigError(f"{source}: --postgres stores jobs in PostgreSQL, so it cannot go "
                          f"with {other}")  # fmt: skip
