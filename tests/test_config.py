"""Configuration: defaults < TOML file < environment < flags; structured logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from broker import __version__
from broker.node.app import App
from broker.node.cli import build_parser, config_from_args
from broker.node.config import Config, ConfigError, load
from broker.node.logs import JsonFormatter, KeyValueFormatter


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


def test_an_empty_auth_token_is_refused_not_dropped(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--auth-tokens: auth_tokens cannot hold an empty token"):
        config_for(["--auth-token", " "], {})
    with pytest.raises(ConfigError, match="TRIOQ_AUTH_TOKENS: auth_tokens cannot hold an empty"):
        config_for([], {"TRIOQ_AUTH_TOKENS": " , "})
    file = tmp_path / "trioq.toml"
    file.write_text('auth_tokens = ["a", ""]\n')
    with pytest.raises(ConfigError, match="auth_tokens cannot hold an empty token"):
        config_for(["--config", str(file)], {})
    assert config_for([], {"TRIOQ_AUTH_TOKENS": ""}).auth_tokens == frozenset()  # unset


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


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            {"TRIOQ_PORT": "99999"},
            "TRIOQ_PORT: port cannot be '99999' (it must be a whole number from 0 to 65535)",
        ),
        ({"TRIOQ_HTTP_PORT": "70000"}, "TRIOQ_HTTP_PORT: http_port cannot be '70000'"),
        ({"TRIOQ_PORT": "-1"}, "TRIOQ_PORT: port cannot be '-1'"),
    ],
)
def test_ports_out_of_range_are_refused_not_wrapped(source: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(None, source, {})
    assert load(None, {"TRIOQ_PORT": "65535"}, {}).port == 65535


def test_memory_and_a_data_dir_from_one_source_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--memory keeps no files, so it cannot go with"):
        config_for(["--memory", "--data-dir", "/srv/q"], {})
    with pytest.raises(ConfigError, match="the environment: --memory keeps no files"):
        config_for([], {"TRIOQ_MEMORY": "1", "TRIOQ_DATA_DIR": "/srv/q"})
    file = tmp_path / "trioq.toml"
    file.write_text('data_dir = "/srv/q"\n')
    assert config_for(["--config", str(file), "--memory"], {}).memory  # a later source wins


def test_postgres_settings_from_flags_environment_and_file(tmp_path: Path) -> None:
    url = "postgresql://q@db/jobs"
    config = config_for(["--postgres", url, "--pg-schema", "blue", "--lease-ttl-s", "3"], {})
    assert (config.postgres_url, config.pg_schema, config.lease_ttl_s) == (url, "blue", 3.0)
    environ = {"TRIOQ_POSTGRES_URL": url, "TRIOQ_ADVERTISE": "10.0.0.5:6789"}
    assert config_for([], environ).postgres_url == url
    assert config_for([], environ).advertise == "10.0.0.5:6789"
    file = tmp_path / "trioq.toml"
    file.write_text(f'postgres_url = "{url}"\n')
    assert config_for(["--config", str(file)], {}).postgres_url == url
    assert (Config().pg_schema, Config().lease_ttl_s) == ("trioq", 10.0)


def test_postgres_with_memory_or_a_data_dir_from_one_source_is_refused() -> None:
    with pytest.raises(ConfigError, match="--postgres stores jobs in PostgreSQL, so it cannot go "
                       "with --memory"):  # fmt: skip
        config_for(["--postgres", "postgresql://db/q", "--memory"], {})
    with pytest.raises(ConfigError, match=r"the environment: --postgres .* with --data-dir"):
        config_for([], {"TRIOQ_POSTGRES_URL": "postgresql://db/q", "TRIOQ_DATA_DIR": "/srv"})


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"trioq {__version__}"


def test_a_bad_value_says_what_the_setting_takes() -> None:
    with pytest.raises(ConfigError) as boolean:
        load(None, {"TRIOQ_MEMORY": "maybe"}, {})
    assert str(boolean.value) == "TRIOQ_MEMORY: memory cannot be 'maybe' (it must be true or false)"
    with pytest.raises(ConfigError) as word:
        load(None, {"TRIOQ_LOG_FORMAT": "xml"}, {})
    assert str(word.value) == (
        "TRIOQ_LOG_FORMAT: log_format cannot be 'xml' (it must be text, json or kv)"
    )


def test_log_level_and_format_in_any_case_are_spelled_as_the_table_spells_them() -> None:
    config = load(None, {"TRIOQ_LOG_LEVEL": "debug", "TRIOQ_LOG_FORMAT": "JSON"}, {})
    assert (config.log_level, config.log_format) == ("DEBUG", "json")


def test_reply_budgets_are_settings_in_mib_and_bounded() -> None:
    config = config_for(["--max-unsent-mib", "8"], {"TRIOQ_MAX_UNSENT_TOTAL_MIB": "256"})
    assert (config.max_unsent_mib, config.max_unsent_total_mib) == (8, 256)
    budgets = App(config).unsent
    assert (budgets.per_connection, budgets.limit) == (8 << 20, 256 << 20)
    with pytest.raises(ConfigError, match="max_unsent_mib cannot be '0'"):
        load(None, {"TRIOQ_MAX_UNSENT_MIB": "0"}, {})
