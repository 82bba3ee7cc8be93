"""The ``shoal`` command line.

This module only parses arguments; each command lives in ``shoal.commands``
and is imported when it runs, so ``shoal wal verify`` never loads the server
or Spark.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from shoal.errors import ShoalError

# command path -> (module in shoal.commands, function)
_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "run"),
    "sql": ("sql", "run"),
    "token create": ("token", "create"),
    "token list": ("token", "list_tokens"),
    "token revoke": ("token", "revoke"),
    "import": ("import_", "run"),
    "wal verify": ("wal", "verify"),
    "storage migrate": ("storage", "run_migrate"),
    "table history": ("table", "history"),
    "table coverage": ("table", "coverage"),
    "compact": ("maintenance", "compact"),
    "retention": ("maintenance", "retention"),
    "rollup": ("maintenance", "rollup"),
    "vacuum": ("maintenance", "vacuum"),
}


QUIET_LOGGERS = ("httpx", "httpcore", "py4j")
"""Loggers held at WARNING unless ``--verbose``."""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config file (settings as keys)")
    p.add_argument("--data-dir", dest="data_dir", help="data directory (SHOAL_DATA_DIR)")


def _add_spark(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", help="Spark master URL (default: spark_master, local[*])")


def _command(
    parent: argparse._SubParsersAction[argparse.ArgumentParser], path: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """The parser of the command ``path`` (``"token create"``: ``create`` in ``token``'s
    actions), with the options every command takes."""
    p: argparse.ArgumentParser = parent.add_parser(path.rsplit(" ", 1)[-1], **kwargs)
    _add_common(p)
    p.set_defaults(command_path=path)
    return p


def _actions(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, helptext: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The actions of the command ``name`` (``shoal name ACTION``), one of which is required."""
    return sub.add_parser(name, help=helptext).add_subparsers(
        dest=f"{name}_command", required=True, metavar="ACTION"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoal",
        description="Single-process observability backend: OTLP in, SQL out.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(sub, "serve", help="run the server (OTLP/HTTP 4318, OTLP/gRPC 4317, SQL)")
    p.add_argument("--bind", help="listen address (SHOAL_BIND)")
    p.add_argument("--http-port", dest="http_port", type=int, help="SHOAL_HTTP_PORT")
    p.add_argument("--grpc-port", dest="grpc_port", type=int, help="SHOAL_GRPC_PORT")
    p.add_argument(
        "--pg-port", dest="pg_port", type=int, help="PostgreSQL protocol (SHOAL_PG_PORT)"
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a non-loopback bind with no tokens configured",
    )

    p = _command(sub, "sql", help="run a SQL query and print the result")
    p.add_argument("query", help="SQL text, or - to read it from standard input")
    p.add_argument("--url", help="server URL (SHOAL_URL); ignored with --local")
    p.add_argument("--token", help="bearer token (SHOAL_TOKEN)")
    p.add_argument(
        "--local",
        action="store_true",
        help="read the data dir directly (read-only, committed Parquet only)",
    )
    p.add_argument("--tenant", default="default", help="tenant for --local")
    p.add_argument(
        "--format",
        choices=["table", "json", "csv", "ndjson", "arrow"],
        default="table",
        help="output format (arrow: an Arrow IPC stream, binary; redirect it to a file)",
    )

    token = _actions(sub, "token", "manage bearer tokens")
    p = _command(token, "token create", help="create a token and print it once")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--role",
        default="ingest,query",
        help="comma-separated roles: ingest (send OTLP), query (SQL), metrics (scrape "
        "/metrics), admin (manage every tenant's tokens over HTTP, and /metrics); "
        "default ingest,query",
    )
    p.add_argument("--name", default="", help="a label to recognise the token by")
    _command(token, "token list", help="list tokens (never their secrets)")
    p = _command(token, "token revoke", help="revoke a token by id")
    p.add_argument("token_id")

    p = _command(
        sub,
        "import",
        help="append Parquet files to a table (backfill)",
        description="Append Parquet files to a tenant's table in one commit. Files whose "
        "time buckets the table already holds are refused unless --allow-overlap.",
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="Parquet files with the table's columns"
    )
    p.add_argument("--tenant", required=True, help="the tenant whose table receives the rows")
    p.add_argument(
        "--table",
        required=True,
        help="metrics, logs, spans, or a new table's name (created from the first file)",
    )
    p.add_argument(
        "--time-column",
        dest="time_column",
        default=None,
        help="required for a new table: its timestamp column (hourly partitions, "
        "coverage); metrics, logs and spans use their own",
    )
    p.add_argument(
        "--allow-overlap",
        dest="allow_overlap",
        action="store_true",
        help="accept files whose time buckets the table already covers",
    )
    p.add_argument(
        "--engine",
        choices=["local", "spark"],
        default="local",
        help="local: this process (default); spark: a Spark job (large backfills)",
    )
    p.add_argument("--master", help="Spark master URL with --engine spark (default: spark_master)")

    wal = _actions(sub, "wal", "write-ahead log tools")
    p = _command(wal, "wal verify", help="check every WAL segment; exit 1 if any is damaged")
    p.add_argument(
        "directory",
        nargs="?",
        default=None,
        help="a WAL directory (shoal-data/wal) or a data dir (default: the data_dir "
        "setting's wal/)",
    )

    storage = _actions(sub, "storage", "where the tables live")
    p = _command(
        storage,
        "storage migrate",
        help="copy every table to another storage_url (a bucket, or back to local disk), "
        "resumably, and verify each by version and row count",
    )
    p.add_argument("--to", required=True, help="s3://bucket/prefix, file:///path, or '' (local)")
    p.add_argument(
        "--remove-old",
        action="store_true",
        help="delete the old copy once every table verified",
    )
    table = _actions(sub, "table", "table tools")
    p = _command(table, "table history", help="list a table's versions")
    p.add_argument("--tenant", default="default")
    p.add_argument("--table", required=True)
    p.add_argument("--limit", type=int, default=50)
    p = _command(table, "table coverage", help="covered time buckets and gaps, from metadata")
    p.add_argument("--tenant", default="default")
    p.add_argument("--table", required=True)
    p.add_argument("--start", required=True, help="ISO 8601 time")
    p.add_argument("--end", required=True, help="ISO 8601 time")
    p.add_argument("--series", default=None)

    for name, helptext, spark in (
        ("compact", "merge small files per hour (Spark)", True),
        ("retention", "drop hours past the retention (metadata only, no Spark)", False),
        ("rollup", "downsample metrics into metrics_1m and metrics_1h (Spark)", True),
        ("vacuum", "delete files removed from tables longer ago than the vacuum window", False),
    ):
        p = _command(sub, name, help=helptext)
        if spark:
            _add_spark(p)
        p.add_argument("--tenant", default=None, help="one tenant (default: all)")
        p.add_argument("--table", default=None, help="one table (default: all that apply)")
        if name == "compact":
            p.add_argument("--since", default=None, help="ISO 8601; first hour to compact")
            p.add_argument("--until", default=None, help="ISO 8601; hour to stop before")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module_name, func_name = _COMMANDS[args.command_path]
    module = importlib.import_module(f"shoal.commands.{module_name}")
    prepare = getattr(module, "prepare", None)
    if prepare is not None:  # what must come before anything else loads (serve's allocators)
        prepare()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from shoal.storage.location import RedactingFilter  # credentials never logged

    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())
    if not args.verbose:
        # client libraries log every request and connection at INFO
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        result: int = getattr(module, func_name)(args)
    except ShoalError as exc:
        print(f"shoal: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
