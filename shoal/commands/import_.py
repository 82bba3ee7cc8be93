"""``shoal import FILE... --tenant T --table NAME``: append Parquet files to a table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shoal.commands import load_config, open_store
from shoal.schema import SIGNAL_TABLES
from shoal.storage.importer import import_files, spec_for_file


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    store = open_store(cfg)
    paths = [Path(p) for p in args.files]
    spec = None
    if not store.exists(args.tenant, args.table) and args.table not in SIGNAL_TABLES:
        spec = spec_for_file(args.table, paths[0], args.time_column)
    table = store.open(args.tenant, args.table, spec)
    if getattr(args, "engine", "local") == "spark":
        from shoal.pipeline.backfill import run_spark_import

        return run_spark_import(table, list(args.files), cfg, args.master, args.allow_overlap)
    interactive = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        end = "\n" if done == total or not interactive else ""
        print(f"\rstaged {done}/{total} files", end=end, file=sys.stderr, flush=True)

    result = import_files(
        table,
        paths,
        time_column=args.time_column,
        allow_overlap=args.allow_overlap,
        progress=progress,
    )
    print(
        f"{table.label}: version {result.version}: "
        f"{result.files_added} files, {result.rows_added} rows imported"
    )
    return 0
