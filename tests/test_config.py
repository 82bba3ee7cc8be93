"""The settings table: precedence, typing, loud failures, and documentation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shoal import config
from shoal.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_match_the_brief() -> None:
    cfg = config.default()
    assert cfg.data_dir == "./shoal-data"
    assert cfg.http_port == 4318
    assert cfg.grpc_port == 4317
    assert cfg.bind == "127.0.0.1"
    assert cfg.wal_fsync == "always"
    assert cfg.max_body_bytes == 20 * 1024 * 1024


def test_precedence_default_file_env_override(tmp_path: Path) -> None:
    toml = tmp_path / "shoal.toml"
    toml.write_text('http_port = 5000\ngrpc_port = 5001\nwal_fsync = "interval:5"\n')
    env = {"SHOAL_GRPC_PORT": "6001", "SHOAL_WAL_SEGMENT_BYTES": "1MiB"}
    cfg = config.load(toml, env=env, overrides={"wal_fsync": "never"})
    assert cfg.http_port == 5000
    assert cfg.sources["http_port"] == str(toml)
    assert cfg.grpc_port == 6001
    assert cfg.sources["grpc_port"] == "$SHOAL_GRPC_PORT"
    assert cfg.wal_segment_bytes == 1024 * 1024
    assert cfg.wal_fsync == "never"
    assert cfg.sources["wal_fsync"] == "command line"


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SHOAL_HTTP_PORT": "http"}, "http_port"),
        ({"SHOAL_HTTP_PORT": "70000"}, "port must be in"),
        ({"SHOAL_WAL_FSYNC": "sometimes"}, "wal_fsync"),
        ({"SHOAL_WAL_FSYNC": "interval:0"}, "positive"),
        ({"SHOAL_QUEUE_MAX_REQUESTS": "0"}, "queue_max_requests"),
        ({"SHOAL_INSECURE": "maybe"}, "true/false"),
        ({"SHOAL_MAX_BODY_BYTES": "-5"}, "negative"),
        ({"SHOAL_RETENTION_DAYS_LOGS": "x"}, "SHOAL_RETENTION_DAYS_LOGS"),
    ],
)
def test_bad_values_fail_loudly_naming_the_setting(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        config.load(env=env)


def test_unknown_file_keys_and_bad_toml_are_rejected(tmp_path: Path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text("htp_port = 1\n")
    with pytest.raises(ConfigError, match="htp_port"):
        config.load(typo, env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("http_port = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(broken, env={})
    with pytest.raises(ConfigError, match="not found"):
        config.load(tmp_path / "missing.toml", env={})


def test_per_table_retention() -> None:
    cfg = config.load(env={"SHOAL_RETENTION_DAYS_LOGS": "7"})
    assert cfg.retention_days_for("logs") == 7
    assert cfg.retention_days_for("metrics") == cfg.retention_days == 30


def test_sizes_parse_binary_units() -> None:
    cfg = config.load(env={"SHOAL_FLUSH_MAX_BYTES": "1.5KiB", "SHOAL_QUERY_MEMORY_BYTES": "1GiB"})
    assert cfg.flush_max_bytes == 1536
    assert cfg.query_memory_bytes == 1024**3


def test_every_setting_is_a_typed_attribute() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(config.Config)}
    names = [s.name for s in config.SETTINGS]
    assert [n for n in fields if n not in ("retention_days_by_table", "sources")] == names
    cfg = config.default()
    for setting in config.SETTINGS:
        value = getattr(cfg, setting.name)
        assert type(value).__name__ == fields[setting.name], setting.name
        assert value == setting.default or setting.parse(str(setting.default)) == value


def test_every_setting_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert config.markdown_table() in doc, "regenerate with `python -m shoal.config`"
    for setting in config.SETTINGS:
        assert setting.help.strip(), setting.name


def test_vacuum_window_must_outlast_the_query_time_limit() -> None:
    with pytest.raises(ConfigError) as info:
        config.load(env={"SHOAL_VACUUM_RETENTION_HOURS": "0.001", "SHOAL_QUERY_TIMEOUT_S": "30"})
    message = str(info.value)
    assert "vacuum_retention_hours" in message and "query_timeout_s" in message
    assert "$SHOAL_VACUUM_RETENTION_HOURS" in message
    assert config.load(env={"SHOAL_VACUUM_RETENTION_HOURS": "0.01"}).vacuum_retention_hours
