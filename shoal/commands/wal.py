"""``shoal wal verify DIR``: check every WAL segment without changing anything."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from shoal.commands import load_config
from shoal.errors import WalError
from shoal.wal.recovery import DAMAGED, TORN, SegmentStatus, inspect_directory
from shoal.wal.segment import BROKEN_SUFFIX, list_segments


def _wal_directory(given: Path) -> Path:
    """Accept the WAL directory itself or a data dir that holds ``wal/``."""
    if not given.is_dir():
        raise WalError(f"not a directory: {given}")
    nested = given / "wal"
    if not list_segments(given) and nested.is_dir():
        return nested
    return given


def _status_text(seg: SegmentStatus) -> str:
    if seg.kind == DAMAGED:
        return f"DAMAGED: {seg.reason}"
    if seg.kind == TORN:
        cut = seg.size - seg.valid_end
        return f"torn tail: {cut} byte(s) at byte {seg.valid_end} ({seg.problem}), cut on open"
    return "ok"


def report(directory: Path, max_record_bytes: int, out: TextIO) -> bool:
    """Print one line per segment and a summary; True if no segment is damaged."""
    statuses = inspect_directory(directory, max_record_bytes)
    out.write(f"WAL {directory}\n")
    if not statuses:
        out.write("no segments\n")
    width = max([len(s.name) for s in statuses] + [7])
    out.write(f"{'segment':<{width}}  {'records':>9}  {'LSN range':<27}  {'bytes':>11}  status\n")
    records = 0
    for seg in statuses:
        records += seg.records
        span = f"{seg.first_lsn}..{seg.last_lsn}" if seg.records else "-"
        out.write(
            f"{seg.name:<{width}}  {seg.records:>9}  {span:<27}  {seg.size:>11}  "
            f"{_status_text(seg)}\n"
        )
    damaged = [s for s in statuses if s.kind == DAMAGED]
    torn = [s for s in statuses if s.kind == TORN]
    broken = sorted(p.name for p in directory.glob("*" + BROKEN_SUFFIX))
    if statuses:
        first = statuses[0].first_lsn
        last = max(s.max_lsn for s in statuses)
        out.write(
            f"{len(statuses)} segment(s), {records} readable record(s), LSN {first}..{last}; "
            f"{len(torn)} torn tail(s), {len(damaged)} damaged segment(s)\n"
        )
    if broken:
        out.write(f"copies of damaged segments kept aside: {', '.join(broken)}\n")
    return not damaged


def verify(args: argparse.Namespace) -> int:
    """Exit 0 when every segment is intact (a torn tail is not damage), 1 otherwise."""
    config = load_config(args)
    if args.directory:
        directory = _wal_directory(Path(args.directory))
    else:
        directory = config.data_path / "wal"
        if not directory.is_dir():
            raise WalError(
                f"no WAL directory at {directory} (data_dir from {config.sources['data_dir']}): "
                "give a WAL or data directory, or --data-dir / SHOAL_DATA_DIR"
            )
    max_record_bytes = config.wal_max_record_bytes
    return 0 if report(directory, max_record_bytes, sys.stdout) else 1
