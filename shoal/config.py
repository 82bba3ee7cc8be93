"""Every shoal setting in one table.

Each setting has a name, a type, a default and a help text. It is read, in
increasing order of precedence, from its default, the TOML config file
(``shoal serve --config shoal.toml``, key = setting name), the environment
(``SHOAL_<NAME>``), and explicit overrides (command-line flags). Values are
converted to their type on load and a bad value fails loudly with
:class:`~shoal.errors.ConfigError`, naming the setting and where it came from.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shoal.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


def _parse_size(raw: str) -> int:
    """Parse ``1048576``, ``64MiB``, ``512KiB``, ``1GiB`` (binary units)."""
    text = raw.strip()
    units = {"gib": 1024 * MiB, "mib": MiB, "kib": KiB, "b": 1}
    lowered = text.lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            number = lowered[: -len(suffix)].strip()
            value = int(float(number) * factor)
            break
    else:
        value = int(text)
    if value < 0:
        raise ValueError(f"size must not be negative, got {raw!r}")
    return value


def _int_within(low: int, high: int | None, problem: str) -> Callable[[str], int]:
    """A parser of integers in ``low..high`` (no upper bound when ``high`` is None)."""

    def parse(raw: str) -> int:
        value = int(raw)
        if value < low or (high is not None and value > high):
            raise ValueError(f"{problem}, got {raw!r}")
        return value

    return parse


_parse_positive_int = _int_within(1, None, "must be a positive integer")
_parse_non_negative_int = _int_within(0, None, "must be 0 or more")
_parse_port = _int_within(0, 65535, "port must be in 0..65535")


def _parse_positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError(f"must be a positive number, got {raw!r}")
    return value


def _parse_non_negative_float(raw: str) -> float:
    value = float(raw)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"must be a finite number, 0 or more, got {raw!r}")
    return value


def _parse_fsync(raw: str) -> str:
    text = raw.strip().lower()
    if text in {"always", "never"}:
        return text
    if text.startswith("interval:"):
        ms = int(text.split(":", 1)[1])
        if ms <= 0:
            raise ValueError("interval must be a positive number of milliseconds")
        return f"interval:{ms}"
    raise ValueError(f"expected always, never or interval:<ms>, got {raw!r}")


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        text = raw.strip().lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return text

    return parse


def _parse_storage_url(raw: str) -> str:
    """Empty, ``s3://bucket[/prefix]`` or ``file:///absolute/path``; never credentials."""
    text = raw.strip()
    if not text:
        return ""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in {"s3", "file"}:
        raise ValueError("expected s3://bucket/prefix or file:///path")
    authority = rest.split("/", 1)[0]
    if "@" in authority:
        # the value is not repeated: it holds a secret
        raise ValueError(
            "credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY or a profile"
        )
    if scheme.lower() == "file":
        if not rest.startswith("/"):
            raise ValueError("a file:// URL names an absolute path: file:///path")
        return "file://" + rest.rstrip("/")
    if not authority:
        raise ValueError("an s3:// URL names a bucket: s3://bucket/prefix")
    return "s3://" + rest.rstrip("/")


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[str], Any]
    help: str

    @property
    def env_var(self) -> str:
        return "SHOAL_" + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    # -- process and network
    Setting("data_dir", "./shoal-data", str, "Directory holding the WAL, tables and tokens."),
    Setting("bind", "127.0.0.1", str, "Address the HTTP and gRPC listeners bind to."),
    Setting(
        "http_port",
        4318,
        _parse_port,
        "OTLP/HTTP, remote write, SQL, the Prometheus API and admin port.",
    ),
    Setting("grpc_port", 4317, _parse_port, "OTLP/gRPC port."),
    Setting(
        "pg_enabled",
        "auto",
        _choice("auto", "true", "false"),
        "PostgreSQL-protocol listener: auto (on when `bind` is a loopback address), true, "
        "or false. On a non-loopback bind it needs pg_tls_cert and pg_tls_key.",
    ),
    Setting(
        "pg_port",
        4319,
        _parse_port,
        "PostgreSQL-protocol port (next to the OTLP ports; not 5432, so it never collides "
        "with a local PostgreSQL).",
    ),
    Setting(
        "pg_tls_cert",
        "",
        str,
        "PEM certificate file for TLS on the PostgreSQL port (SSLRequest answered 'S').",
    ),
    Setting("pg_tls_key", "", str, "PEM private key file of pg_tls_cert."),
    Setting(
        "pg_max_connections",
        64,
        _parse_positive_int,
        "PostgreSQL-protocol connections at once; more are refused (SQLSTATE 53300).",
    ),
    Setting(
        "insecure",
        False,
        _parse_bool,
        "Allow binding a non-loopback address with no tokens configured.",
    ),
    Setting("log_level", "info", _choice("debug", "info", "warning", "error"), "Log level."),
    Setting(
        "shutdown_timeout_s",
        30.0,
        _parse_positive_float,
        "Seconds SIGTERM waits for the queue to drain and the final flush.",
    ),
    Setting(
        "memory_limit_bytes",
        0,
        _parse_size,
        "Memory the server may use; 0 takes the cgroup limit (systemd MemoryMax=). At start "
        "the limits below must fit in it (docs/operations.md, Memory); while serving, a query "
        "that one more query_memory_bytes would take over it is refused (503, retryable).",
    ),
    Setting(
        "event_loop",
        "uvloop",
        _choice("uvloop", "asyncio"),
        "Event loop of the server's listeners: uvloop (faster) or the standard asyncio loop.",
    ),
    # -- write-ahead log
    Setting(
        "wal_fsync",
        "always",
        _parse_fsync,
        "WAL fsync policy: always (group commit), interval:<ms>, or never "
        "(never loses recent data on power loss).",
    ),
    Setting("wal_segment_bytes", 64 * MiB, _parse_size, "WAL segment rotation size."),
    Setting(
        "wal_max_record_bytes",
        128 * MiB,
        _parse_size,
        "Largest WAL record accepted; a larger length on disk is corruption.",
    ),
    Setting(
        "wal_corruption_policy",
        "skip-segment",
        _choice("skip-segment", "stop"),
        "What replay does after mid-log corruption: skip-segment keeps the valid prefix "
        "of the damaged segment and continues with the next segment; stop replays nothing "
        "after the damage.",
    ),
    # -- ingest
    Setting(
        "max_body_bytes",
        20 * MiB,
        _parse_size,
        "Largest OTLP/HTTP body, checked before and after decompression.",
    ),
    Setting(
        "http_read_timeout_s",
        30.0,
        _parse_positive_float,
        "Time a client has to send a whole HTTP request (header and body) from its first "
        "byte; after it the server answers 408 and closes the connection.",
    ),
    Setting("grpc_max_message_bytes", 4 * MiB, _parse_size, "Largest OTLP/gRPC message."),
    Setting(
        "decode_processes",
        0,
        _parse_non_negative_int,
        "Worker processes that decode ingest requests (OTLP and remote write) beside the "
        "server process, which keeps the WAL, the unflushed rows and the queries; 0 decodes on a "
        "thread of the server process (one core for all interpreter work).",
    ),
    Setting(
        "queue_max_requests",
        256,
        _parse_positive_int,
        "Ingest queue bound in requests; beyond it ingest answers 429 (remote write 503) / "
        "UNAVAILABLE.",
    ),
    Setting(
        "queue_max_bytes",
        64 * MiB,
        _parse_size,
        "Ingest queue bound in bytes of decoded data (each request counted as the length "
        "of its rows as an Arrow IPC stream).",
    ),
    Setting(
        "series_cache_bytes",
        64 * MiB,
        _parse_size,
        "Memory for each cache of series seen before (remote write's, OTLP metrics'; in the "
        "server and in each decoding process): the columns a series' labels become, kept so "
        "that its next request skips working them out; full, a cache starts over.",
    ),
    Setting("retry_after_s", 1, _parse_positive_int, "Retry-After sent with 429/503."),
    Setting(
        "backlog_wait_s",
        1.0,
        _parse_non_negative_float,
        "Longest an ingest request waits, while the rows not yet flushed are over their "
        "cap (5 x flush_max_bytes), for the flusher to catch up before it is refused with "
        "429 (remote write 503) / UNAVAILABLE; an HTTP request waits before its body is read. "
        "0 refuses at once.",
    ),
    # -- flusher and storage
    Setting(
        "flush_max_bytes",
        64 * MiB,
        _parse_size,
        "Flush the unflushed rows to Parquet when they hold this many bytes (each "
        "request counted as the length of its rows as an Arrow IPC stream).",
    ),
    Setting(
        "flush_max_age_s",
        60.0,
        _parse_positive_float,
        "Flush the unflushed rows when their oldest record is this old.",
    ),
    Setting(
        "coverage_bucket_s",
        60,
        _parse_positive_int,
        "Width in seconds of a coverage bucket (roaring bitmaps of covered time).",
    ),
    Setting(
        "checkpoint_interval",
        100,
        _parse_positive_int,
        "Write a Delta checkpoint every this many commits.",
    ),
    # -- where the tables live
    Setting(
        "storage_url",
        "",
        _parse_storage_url,
        "Where every tenant's tables live: empty for <data_dir>/tenants, s3://bucket/prefix "
        "for an S3-compatible bucket, file:///path for another directory. Credentials and "
        "region come from the standard AWS variables and profiles; the WAL stays in data_dir.",
    ),
    Setting(
        "storage_endpoint",
        "",
        str,
        "Endpoint of an S3-compatible server (MinIO, Ceph, R2, Garage), for example "
        "http://127.0.0.1:9000; empty uses AWS_ENDPOINT_URL, else AWS itself.",
    ),
    Setting(
        "storage_timeout_s",
        30.0,
        _parse_positive_float,
        "Time limit of one request to the object store; a flush that hits it is retried "
        "next round, its rows kept in the WAL.",
    ),
    Setting(
        "storage_cache_bytes",
        1024 * MiB,
        _parse_size,
        "Local disk kept for copies of Parquet files read from object storage "
        "(<data_dir>/cache), shared by SQL, PromQL and the PostgreSQL listener.",
    ),
    Setting(
        "storage_poll_s",
        1.0,
        _parse_non_negative_float,
        "How often a read looks for commits other writers (a Spark job) made to a table on "
        "object storage (in the server the look runs behind the read); the server's own "
        "flushes are seen at once.",
    ),
    # -- query
    Setting(
        "query_memory_bytes",
        256 * MiB,
        _parse_size,
        "Memory pool per query (fair spill pool).",
    ),
    Setting(
        "query_timeout_s",
        30.0,
        _parse_positive_float,
        "Time limit per query, planning included.",
    ),
    Setting(
        "query_max_sql_bytes",
        64 * KiB,
        _parse_size,
        "Largest SQL text accepted.",
    ),
    Setting(
        "query_max_concurrency",
        3,
        _parse_positive_int,
        "Queries executing at once; more wait, then fail with a clear message.",
    ),
    Setting(
        "query_max_rows",
        100_000,
        _parse_positive_int,
        "Most rows one query returns; beyond it the answer says the cap was hit.",
    ),
    Setting(
        "query_max_join_pairs",
        1_000_000_000,
        _parse_positive_int,
        "Most row pairs the joins without an equality key (cross join, ON true, <) of one "
        "query may compare; more is refused before it runs.",
    ),
    Setting(
        "query_max_tenant_share",
        0,
        _parse_non_negative_int,
        "Most queries one tenant runs at once; 0 means query_max_concurrency - 1 (at least "
        "1), so one tenant's stuck queries always leave a slot to the others.",
    ),
    Setting(
        "promql_max_samples",
        5_000_000,
        _parse_positive_int,
        "Most samples one PromQL query, or log entries one LogQL query, reads; beyond it "
        "the query fails with a message.",
    ),
    Setting(
        "traceql_max_spans",
        3_000_000,
        _parse_positive_int,
        "Most spans one TraceQL search reads; beyond it the search fails with a message "
        "asking for a shorter time range.",
    ),
    Setting(
        "promql_cache_bytes",
        128 * MiB,
        _parse_size,
        "Memory for the metric rows PromQL has decoded from Parquet files, kept for the "
        "next query over the same files (a dashboard's refresh); 0 keeps none.",
    ),
    Setting(
        "series_index_bytes",
        128 * MiB,
        _parse_size,
        "Memory for the series indexes (one row per series of each table, what the metric "
        "browser and PromQL look series up in), all tables together; over it, the series "
        "seen longest ago are dropped, and a query reaching back to them reads the files' "
        "series summaries instead (slower, never wrong). 0: no bound.",
    ),
    Setting(
        "promql_promote_resource_attributes",
        "",
        str,
        "Resource attributes (comma-separated keys) that PromQL shows as labels of every series.",
    ),
    Setting(
        "loki_tail_buffer_rows",
        10_000,
        _parse_positive_int,
        "Log entries a live tail (/loki/api/v1/tail) holds for a client slower than the "
        "stream; past it, entries are dropped and listed in the tail's dropped_entries.",
    ),
    # -- maintenance (Spark pipeline)
    Setting(
        "retention_days",
        30,
        _parse_positive_int,
        "Days of data kept per table; override per table with retention_days_<table>.",
    ),
    Setting(
        "vacuum_retention_hours",
        24.0,
        _parse_positive_float,
        "Files removed from a table are deleted this long after removal (longer than "
        "query_timeout_s).",
    ),
    Setting(
        "compact_target_file_bytes",
        128 * MiB,
        _parse_size,
        "File size compaction aims for; files under half of it count as small.",
    ),
    Setting(
        "maintenance_commit_attempts",
        5,
        _parse_positive_int,
        "Times a maintenance job re-reads the table and retries after a commit conflict.",
    ),
    Setting("spark_master", "local[*]", str, "Spark master URL for maintenance jobs."),
    Setting(
        "spark_driver_memory",
        "1g",
        str,
        "Spark driver memory (local mode runs executors inside the driver).",
    ),
    # -- CLI client
    Setting(
        "url",
        "http://127.0.0.1:4318",
        str,
        "Server URL used by `shoal sql` and other client commands.",
    ),
    Setting("token", "", str, "Bearer token used by client commands."),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True)
class Config:
    """Resolved settings, one typed attribute per setting: ``config.http_port``.

    ``tests/test_config.py`` keeps the attributes and :data:`SETTINGS` the same
    list; ``retention_days_by_table`` holds the ``retention_days_<table>``
    overrides, ``sources`` where each value came from.
    """

    data_dir: str
    bind: str
    http_port: int
    grpc_port: int
    pg_enabled: str
    pg_port: int
    pg_tls_cert: str
    pg_tls_key: str
    pg_max_connections: int
    insecure: bool
    log_level: str
    shutdown_timeout_s: float
    memory_limit_bytes: int
    event_loop: str
    wal_fsync: str
    wal_segment_bytes: int
    wal_max_record_bytes: int
    wal_corruption_policy: str
    max_body_bytes: int
    http_read_timeout_s: float
    grpc_max_message_bytes: int
    decode_processes: int
    queue_max_requests: int
    queue_max_bytes: int
    series_cache_bytes: int
    retry_after_s: int
    backlog_wait_s: float
    flush_max_bytes: int
    flush_max_age_s: float
    coverage_bucket_s: int
    checkpoint_interval: int
    storage_url: str
    storage_endpoint: str
    storage_timeout_s: float
    storage_cache_bytes: int
    storage_poll_s: float
    query_memory_bytes: int
    query_timeout_s: float
    query_max_sql_bytes: int
    query_max_concurrency: int
    query_max_rows: int
    query_max_join_pairs: int
    query_max_tenant_share: int
    promql_max_samples: int
    traceql_max_spans: int
    promql_cache_bytes: int
    series_index_bytes: int
    promql_promote_resource_attributes: str
    loki_tail_buffer_rows: int
    retention_days: int
    vacuum_retention_hours: float
    compact_target_file_bytes: int
    maintenance_commit_attempts: int
    spark_master: str
    spark_driver_memory: str
    url: str
    token: str
    retention_days_by_table: Mapping[str, int] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    def value(self, name: str) -> object:
        """A setting's value by name (for code that walks :data:`SETTINGS`)."""
        if name not in SETTINGS_BY_NAME:
            raise ConfigError(f"unknown setting {name!r}")
        return getattr(self, name)

    def retention_days_for(self, table: str) -> int:
        """Days kept for ``table``: ``retention_days_<table>`` if set, else ``retention_days``."""
        return self.retention_days_by_table.get(table, self.retention_days)

    def replace(self, **overrides: Any) -> Config:
        """A copy with settings overridden by already-typed values (used by tests)."""
        unknown = set(overrides) - set(SETTINGS_BY_NAME)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        sources = dict(self.sources)
        sources.update({k: "override" for k in overrides})
        return dataclasses.replace(self, sources=sources, **overrides)


def _convert(setting: Setting, raw: Any, source: str) -> Any:
    if isinstance(raw, bool) and setting.parse is _parse_bool:
        return raw
    text = str(raw).lower() if isinstance(raw, bool) else str(raw)
    try:
        return setting.parse(text)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"invalid value for {setting.name} (from {source}): {exc}") from None


def load(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Resolve every setting: default < config file < SHOAL_* env < overrides."""
    environ = os.environ if env is None else env
    file_values: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            with path.open("rb") as fh:
                file_values = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    extra_file_keys = {
        k for k in file_values if k not in SETTINGS_BY_NAME and not k.startswith("retention_days_")
    }
    if extra_file_keys:
        raise ConfigError(
            f"unknown setting(s) in {config_file}: {', '.join(sorted(extra_file_keys))}"
        )

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        value, source = setting.default, "default"
        if setting.name in file_values:
            source = f"{config_file}"
            value = _convert(setting, file_values[setting.name], source)
        if setting.env_var in environ:
            source = f"${setting.env_var}"
            value = _convert(setting, environ[setting.env_var], source)
        if overrides and overrides.get(setting.name) is not None:
            source = "command line"
            value = _convert(setting, overrides[setting.name], source)
        values[setting.name] = value
        sources[setting.name] = source

    # Per-table retention overrides: retention_days_<table> from file or env.
    by_table: dict[str, int] = {}
    prefix = "retention_days_"
    for key, raw in file_values.items():
        if key.startswith(prefix):
            days = _convert(SETTINGS_BY_NAME["retention_days"], raw, str(config_file))
            by_table[key.removeprefix(prefix)] = days
            sources[key] = str(config_file)
    for key, raw in environ.items():
        if key.startswith("SHOAL_RETENTION_DAYS_"):
            name = key[len("SHOAL_") :].lower()
            days = _convert(SETTINGS_BY_NAME["retention_days"], raw, f"${key}")
            by_table[name.removeprefix(prefix)] = days
            sources[name] = f"${key}"
    _check_together(values, sources)
    return Config(**values, retention_days_by_table=by_table, sources=sources)


def _check_together(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Rules between settings."""
    # A query reads the file list of the version it started from; vacuum must not
    # delete a removed file while a query may still be reading it.
    vacuum_s = float(values["vacuum_retention_hours"]) * 3600
    if vacuum_s <= float(values["query_timeout_s"]):
        raise ConfigError(
            f"vacuum_retention_hours ({values['vacuum_retention_hours']:g} h, from "
            f"{sources['vacuum_retention_hours']}) must be longer than query_timeout_s "
            f"({values['query_timeout_s']:g} s, from {sources['query_timeout_s']}): "
            "vacuum would delete files that running queries still read"
        )


def default() -> Config:
    """Every setting at its default (ignores the environment)."""
    return load(env={})


def markdown_table() -> str:
    """The settings as a Markdown table (docs/configuration.md embeds it)."""
    lines = [
        "| setting | env var | default | what it does |",
        "|---|---|---|---|",
    ]
    for s in SETTINGS:
        default = "(empty)" if s.default == "" else f"`{s.default}`"
        lines.append(f"| `{s.name}` | `{s.env_var}` | {default} | {s.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
