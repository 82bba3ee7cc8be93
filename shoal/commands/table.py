"""``shoal table history`` and ``shoal table coverage``: read a table's metadata, print it."""

from __future__ import annotations

import argparse
import datetime as dt

from shoal.cli import load_config
from shoal.commands import open_store
from shoal.errors import ConfigError
from shoal.storage.table import Table


def _open(args: argparse.Namespace) -> Table:
    cfg = load_config(args)
    store = open_store(cfg)
    return store.open(args.tenant, args.table, create=False)


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def history(args: argparse.Namespace) -> int:
    """List a table's versions, newest first."""
    table = _open(args)
    header = ("version", "timestamp", "operation", "rows+", "rows-", "files+", "files-", "wal_lsn")
    rows = [
        (
            str(h.version),
            h.timestamp.isoformat(timespec="seconds"),
            h.operation,
            _num(h.rows_added),
            _num(h.rows_removed),
            _num(h.files_added),
            _num(h.files_removed),
            _num(h.wal_lsn),
        )
        for h in table.history(args.limit)
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def parse_time(text: str, flag: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag}: not an ISO 8601 time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def coverage(args: argparse.Namespace) -> int:
    """Print covered ranges and gaps of a time range, from coverage metadata only."""
    table = _open(args)
    start = parse_time(args.start, "--start")
    end = parse_time(args.end, "--end")
    if end <= start:
        raise ConfigError("--end must be after --start")
    bucket = getattr(args, "bucket", None)
    result = table.coverage(start, end, series=args.series, bucket_s=bucket)
    what = f"series {result.series!r}" if result.series is not None else "table"
    print(
        f"{table.label} ({what}): {result.covered_buckets}/{result.total_buckets} "
        f"buckets of {result.bucket_s}s covered"
    )
    spans = sorted(
        [(a, b, "covered") for a, b in result.covered] + [(a, b, "gap") for a, b in result.gaps]
    )
    for a, b, kind in spans:
        print(f"{kind:8} {a.isoformat()} .. {b.isoformat()}")
    return 0
