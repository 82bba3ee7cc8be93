"""``shoal table history`` and ``shoal table coverage``: read a table's metadata, print it."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from shoal.commands import load_config, open_store
from shoal.config import Config
from shoal.errors import ConfigError, TableNotFoundError, WalError
from shoal.storage.table import Table
from shoal.text import parse_utc


def _open(args: argparse.Namespace) -> Table:
    cfg = load_config(args)
    store = open_store(cfg)
    return store.open(args.tenant, args.table, create=False)


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def unflushed_records(wal_dir: Path, tenant: str, table: str, max_record_bytes: int) -> int:
    """WAL records of ``tenant/table``, read without changing anything (a live server's
    WAL included: its unwritten tail simply ends the scan)."""
    from shoal.ingest.records import decode_header
    from shoal.wal.codec import SEGMENT_HEADER_SIZE, FrameScanner
    from shoal.wal.recovery import inspect_directory

    if not wal_dir.is_dir():
        return 0
    count = 0
    for seg in inspect_directory(wal_dir, max_record_bytes):
        try:
            data = seg.path.read_bytes()[: seg.valid_end]
        except FileNotFoundError:  # flushed and removed meanwhile
            continue
        for _lsn, _rtype, start, stop in FrameScanner(
            data, SEGMENT_HEADER_SIZE, seg.first_lsn, max_record_bytes
        ):
            try:
                header = decode_header(memoryview(data)[start:stop])
            except WalError:
                continue
            if header.tenant == tenant and header.table == table:
                count += 1
    return count


def _unflushed_note(cfg: Config, tenant: str, table: str) -> str | None:
    records = unflushed_records(cfg.data_path / "wal", tenant, table, int(cfg.wal_max_record_bytes))
    if not records:
        return None
    return (
        f"{tenant}/{table}: no committed version yet: {records} WAL record(s) hold its "
        f"rows, unflushed (already queryable); the flusher commits them within "
        f"flush_max_age_s ({cfg.flush_max_age_s:g} s) of arriving, or at shutdown"
    )


def history(args: argparse.Namespace) -> int:
    """List a table's versions, newest first."""
    try:
        table = _open(args)
    except TableNotFoundError:
        note = _unflushed_note(load_config(args), args.tenant, args.table)
        if note is None:
            raise
        print(note)
        return 0
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
        return parse_utc(text)
    except ValueError:
        raise ConfigError(f"{flag}: not an ISO 8601 time: {text!r}") from None


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
