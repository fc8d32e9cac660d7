"""Configuration: defaults < TOML file < environment < flags; structured logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from broker.cli import build_parser, config_from_args
from broker.config import Config, ConfigError, load
from broker.logs import JsonFormatter, KeyValueFormatter


def config_for(argv: list[str], environ: dict[str, str]) -> Config:
    return config_from_args(build_parser().parse_args(["serve", *argv]), environ)


def test_each_source_overrides_the_one_before(tmp_path: Path) -> None:
    file = tmp_path / "trioq.toml"
    file.write_text('port = 7000\nhttp_port = 7001\ndata_dir = "/srv/q"\nauth_tokens = ["a"]\n')
    environ = {"TRIOQ_HTTP_PORT": "7101", "TRIOQ_MEMORY": "true"}
    config = config_for(["--config", str(file), "--port", "7200"], environ)
    assert (config.port, config.http_port, config.data_dir) == (7200, 7101, "/srv/q")
    assert config.memory is True and config.auth_tokens == frozenset({"a"})
    assert config_for([], {}).port == Config().port


def test_tokens_from_the_environment_and_flags() -> None:
    assert config_for([], {"TRIOQ_AUTH_TOKENS": "x, y,,"}).auth_tokens == frozenset({"x", "y"})
    flags = config_for(["--auth-token", "p", "--auth-token", "q"], {})
    assert flags.auth_tokens == frozenset({"p", "q"})


def test_bad_settings_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TRIOQ_PORT: port cannot be 'many'"):
        load(None, {"TRIOQ_PORT": "many"}, {})
    with pytest.raises(ConfigError, match="TRIOQ_MEMORY: memory cannot be 'maybe'"):
        load(None, {"TRIOQ_MEMORY": "maybe"}, {})
    file = tmp_path / "bad.toml"
    file.write_text("colour = 'blue'\n")
    with pytest.raises(ConfigError, match="unknown setting colour"):
        load(str(file), {}, {})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(str(tmp_path / "missing.toml"), {}, {})


def test_structured_log_lines() -> None:
    record = logging.makeLogRecord(
        {"name": "broker.app", "levelname": "INFO", "msg": "started %s", "args": ("ok",)}
    )
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["logger"], line["msg"]) == ("info", "broker.app", "started ok")
    kv = KeyValueFormatter().format(record)
    assert 'level=info logger=broker.app msg="started ok"' in kv
