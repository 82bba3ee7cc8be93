"""``shoal storage migrate --to URL``: move the tables to object storage and back."""

from __future__ import annotations

import argparse
import sys

from shoal.commands import load_config
from shoal.storage.location import StorageLocation
from shoal.storage.migrate import TableCopy, migrate, remove


def _progress(copy: TableCopy, what: str) -> None:
    print(f"{copy.tenant}/{copy.table}: {what}", flush=True)


def run_migrate(args: argparse.Namespace) -> int:
    """Copy every table to ``--to``, verify each; ``--remove-old`` deletes the old copy
    once every table verified. Stop the server first; then set storage_url to the target."""
    cfg = load_config(args)
    timeout = float(cfg.storage_timeout_s)
    source = StorageLocation.parse(cfg.storage_url, cfg.data_path, cfg.storage_endpoint, timeout)
    from shoal.config import SETTINGS_BY_NAME

    target_url = SETTINGS_BY_NAME["storage_url"].parse(args.to)
    target = StorageLocation.parse(target_url, cfg.data_path, cfg.storage_endpoint, timeout)
    print(f"copying the tables of {source} to {target}", flush=True)
    copies = migrate(source, target, _progress)
    copied = sum(c.copied for c in copies)
    size = sum(c.bytes_copied for c in copies)
    verified = sum(c.verified for c in copies)
    print(
        f"{len(copies)} table(s), {copied} file(s) ({size} bytes) copied, "
        f"{verified} verified (same version and rows on both sides)"
    )
    if verified != len(copies):
        print("some tables did not verify: run the command again to resume", file=sys.stderr)
        return 1
    if args.remove_old:
        remove(source, copies)
        print(f"removed the old copy from {source}")
    print(f"now set storage_url = {target_url!r} (SHOAL_STORAGE_URL) and start the server")
    return 0
