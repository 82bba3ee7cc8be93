"""Moving every table from one location to another (local disk <-> a bucket), resumably.

A table's files are copied as they are (its Delta log names files by relative paths,
so the copy is the same table): data, coverage and series files first, then the log,
so that a copy interrupted half way is not yet a table a reader would open. A file
already at the target with the same size is not copied again: running it again
resumes. Afterwards each table is verified, by delta-rs on both sides: the same
latest version and the same number of rows. Only then may the old copy be removed.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyarrow import fs as pafs

from shoal.errors import StorageError
from shoal.storage.location import StorageLocation, redact

logger = logging.getLogger(__name__)

_LOG_DIR = "_delta_log"


@dataclasses.dataclass
class TableCopy:
    """What the copy of one table did, and what its verification found."""

    tenant: str
    table: str
    files: int = 0
    copied: int = 0
    bytes_copied: int = 0
    version: int | None = None
    rows: int | None = None
    problem: str | None = None

    @property
    def verified(self) -> bool:
        return self.problem is None and self.version is not None


Progress = Callable[[TableCopy, str], None]


def _files(location: StorageLocation, rel: str) -> Iterator[tuple[str, int]]:
    """``(path relative to rel, size)`` of every file under ``rel``."""
    base = location.join(rel)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    for info in location.filesystem.get_file_info(selector):
        if info.type == pafs.FileType.File:
            yield info.path[len(base) + 1 :], int(info.size)


def _tables(location: StorageLocation) -> list[tuple[str, str]]:
    fs = location.filesystem
    found = []
    top = fs.get_file_info(pafs.FileSelector(location.root, allow_not_found=True))
    for tenant in sorted(i.base_name for i in top if i.type == pafs.FileType.Directory):
        inner = fs.get_file_info(pafs.FileSelector(location.join(tenant), allow_not_found=True))
        for table in sorted(i.base_name for i in inner if i.type == pafs.FileType.Directory):
            log = fs.get_file_info(location.join(tenant, table, _LOG_DIR))
            if log.type == pafs.FileType.Directory:
                found.append((tenant, table))
    return found


def _copy(source: StorageLocation, target: StorageLocation, rel: str) -> None:
    src, dst = source.join(rel), target.join(rel)
    parent = dst.rsplit("/", 1)[0]
    if target.is_local:
        target.filesystem.create_dir(parent, recursive=True)
    tmp = f"{dst}.migrating" if target.is_local else dst
    with (
        source.filesystem.open_input_stream(src) as i,
        target.filesystem.open_output_stream(tmp) as o,
    ):
        shutil.copyfileobj(i, o, 8 << 20)
    if target.is_local:
        target.filesystem.move(tmp, dst)


def _snapshot(location: StorageLocation, tenant: str, table: str) -> tuple[int, int]:
    """``(latest version, rows)`` of a table, read by delta-rs."""
    delta = DeltaTable(
        location.uri(tenant, table), storage_options=location.storage_options() or None
    )
    actions = pa.table(delta.get_add_actions(flatten=True))
    rows = pc.sum(actions.column("num_records")).as_py() if actions.num_rows else 0
    return delta.version(), int(rows or 0)


def migrate(
    source: StorageLocation,
    target: StorageLocation,
    progress: Progress | None = None,
) -> list[TableCopy]:
    """Copy every table of ``source`` to ``target`` and verify each (see the module
    docstring); the result says, per table, what was copied and whether it verified."""
    if source.url == target.url:
        raise StorageError("the tables are already there")
    results = []
    for tenant, table in _tables(source):
        copy = TableCopy(tenant, table)
        results.append(copy)
        prefix = f"{tenant}/{table}"
        try:
            there = dict(_files(target, prefix))
            files = sorted(_files(source, prefix), key=lambda f: (f[0].startswith(_LOG_DIR), f[0]))
            copy.files = len(files)
            for rel, size in files:
                if there.get(rel) == size:
                    continue
                _copy(source, target, f"{prefix}/{rel}")
                copy.copied += 1
                copy.bytes_copied += size
                if progress is not None and copy.copied % 50 == 0:
                    progress(copy, f"{copy.copied} of {copy.files} files copied")
            before = _snapshot(source, tenant, table)
            after = _snapshot(target, tenant, table)
            if before != after:
                copy.problem = (
                    f"source has version {before[0]} with {before[1]} rows, the copy version "
                    f"{after[0]} with {after[1]} rows (a writer changed it: run again)"
                )
            else:
                copy.version, copy.rows = after
        except Exception as exc:
            copy.problem = redact(f"{type(exc).__name__}: {exc}")
        if progress is not None:
            progress(copy, "verified" if copy.verified else f"NOT verified: {copy.problem}")
    return results


def remove(location: StorageLocation, copies: list[TableCopy]) -> int:
    """Delete the tables of ``copies`` from ``location``, all of them verified; the count."""
    if not copies or not all(c.verified for c in copies):
        raise StorageError("not every table verified: the old copy stays")
    for c in copies:
        location.filesystem.delete_dir(location.join(c.tenant, c.table))
    return len(copies)
