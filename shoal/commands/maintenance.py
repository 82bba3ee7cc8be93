"""``shoal compact``, ``shoal retention``, ``shoal rollup`` and ``shoal vacuum``.

Each runs over every tenant and applicable table unless ``--tenant`` /
``--table`` narrow it, prints one line per table, and exits 0 when every
table succeeded, 1 when a job gave up on a table after repeated commit
conflicts (the others still ran). Spark starts only when there is work for it.

Progress goes to standard error (``[2/5] acme/metrics: compacting...`` before each
table, and how long it took after); results go to standard output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from shoal.commands import load_config, open_store
from shoal.errors import ConfigError, JobConflictError
from shoal.storage.store import TableStore
from shoal.text import parse_utc, utc_micros

if TYPE_CHECKING:
    from shoal.storage.table import Table

logger = logging.getLogger(__name__)


def _tables(store: TableStore, args: argparse.Namespace) -> list[Table]:
    tenants = [args.tenant] if args.tenant else store.tenants()
    found: list[Table] = []
    for tenant in tenants:
        names = [args.table] if args.table else store.tables(tenant)
        found.extend(store.open(tenant, name, create=False) for name in names)
    return found


def _parse_time(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return utc_micros(parse_utc(text))
    except ValueError:
        raise ConfigError(f"{flag}: not an ISO 8601 time: {text!r}") from None


def progress(step: int, total: int, what: str) -> None:
    sys.stderr.write(f"[{step}/{total}] {what}\n")
    sys.stderr.flush()


def _each(tables: list[Table], run: Callable[[Table], str], verb: str) -> int:
    status = 0
    for step, table in enumerate(tables, 1):
        progress(step, len(tables), f"{table.label}: {verb}...")
        started = time.monotonic()
        try:
            print(f"{run(table)} ({time.monotonic() - started:.1f} s)", flush=True)
        except JobConflictError as exc:
            logger.error("%s", exc)
            status = 1
    return status


def compact(args: argparse.Namespace) -> int:
    """Merge small files per hour in the selected tables."""
    from shoal.pipeline.compact import compact_table
    from shoal.pipeline.plan import compaction_groups

    cfg = load_config(args)
    since = _parse_time(args.since, "--since")
    until = _parse_time(args.until, "--until")
    tables = _tables(open_store(cfg), args)
    target = int(cfg.compact_target_file_bytes)
    todo = [
        t
        for t in tables
        if compaction_groups(
            t.snapshot().files, target_file_bytes=target, since_us=since, until_us=until
        )
    ]
    for t in tables:
        if t not in todo:
            print(f"{t.label}: nothing to compact")
    if not todo:
        return 0
    from shoal.pipeline.session import create_session

    spark = create_session(cfg, args.master, app_name="shoal-compact")
    try:

        def run(table: Table) -> str:
            r = compact_table(spark, table, cfg, since_us=since, until_us=until)
            if r.version is None:
                return f"{r.table}: nothing to compact"
            return (
                f"{r.table}: version {r.version}: {r.hours} hours, "
                f"{r.files_removed} files -> {r.files_added}, {r.rows} rows"
            )

        return _each(todo, run, "compacting")
    finally:
        spark.stop()


def retention(args: argparse.Namespace) -> int:
    """Drop hours older than each table's retention (metadata only: Spark is not started)."""
    from shoal.pipeline.retention import apply_retention

    cfg = load_config(args)

    def run(table: Table) -> str:
        r = apply_retention(table, cfg)
        cutoff = dt.datetime.fromtimestamp(r.cutoff_us / 1e6, tz=dt.UTC).isoformat()
        if r.version is None:
            return f"{r.table}: nothing before {cutoff} ({r.retention_days} days)"
        return (
            f"{r.table}: version {r.version}: dropped {r.files_removed} files, "
            f"{r.rows_removed} rows before {cutoff} ({r.retention_days} days)"
        )

    return _each(_tables(open_store(cfg), args), run, "dropping expired hours")


def rollup(args: argparse.Namespace) -> int:
    """Bring metrics_1m and metrics_1h up to date with each tenant's metrics."""
    from shoal.pipeline.rollup import rollup_tenant
    from shoal.pipeline.schema import ROLLUP_SOURCE, ROLLUP_WIDTHS_S

    cfg = load_config(args)
    if args.table not in (None, ROLLUP_SOURCE, *ROLLUP_WIDTHS_S):
        raise ConfigError(
            f"--table: rollups read {ROLLUP_SOURCE} and write "
            f"{', '.join(ROLLUP_WIDTHS_S)}; not {args.table!r}"
        )
    store = open_store(cfg)
    tenants = [args.tenant] if args.tenant else store.tenants()
    tenants = [t for t in tenants if ROLLUP_SOURCE in store.tables(t)]
    if not tenants:
        print("no tenant has a metrics table: nothing to roll up")
        return 0
    only = args.table if args.table in ROLLUP_WIDTHS_S else None
    from shoal.pipeline.session import create_session

    spark = create_session(cfg, args.master, app_name="shoal-rollup")
    status = 0
    try:
        for step, tenant in enumerate(tenants, 1):
            progress(step, len(tenants), f"tenant {tenant}: rolling up metrics...")
            try:
                results = rollup_tenant(spark, store, tenant, cfg, only=only)
            except JobConflictError as exc:
                logger.error("%s", exc)
                status = 1
                continue
            for r in results:
                if r.version is None:
                    print(f"{r.table}: up to date with source version {r.source_version}")
                else:
                    print(
                        f"{r.table}: version {r.version}: {r.hours} hours recomputed, "
                        f"{r.rows} rows (source version {r.source_version})"
                    )
    finally:
        spark.stop()
    return status


def vacuum(args: argparse.Namespace) -> int:
    """Delete files removed from tables longer ago than vacuum_retention_hours."""
    cfg = load_config(args)
    hours = float(cfg.vacuum_retention_hours)

    def run(table: Table) -> str:
        deleted = table.vacuum(hours)
        return f"{table.label}: deleted {len(deleted)} files older than {hours:g} h"

    return _each(_tables(open_store(cfg), args), run, "deleting removed files")
