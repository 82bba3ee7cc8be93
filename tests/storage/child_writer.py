"""Run in a child process by the crash and concurrency tests (not collected by pytest).

usage: child_writer.py DATA_DIR APP_ID CRASH_POINT INPUT.parquet[:LSN] ...

Flushes each input file to tenant ``t`` table ``logs`` with its LSN, as
``APP_ID``; SIGKILLs itself when the commit path reaches CRASH_POINT
(``none`` for no crash). Waits for ``DATA_DIR/go`` before starting, if
``DATA_DIR/wait`` exists, so two children start together. The tables are where
``SHOAL_STORAGE_URL`` says (under DATA_DIR when it is not set).

With APP_ID ``compact:N``, it instead compacts N times: each time it merges the two
oldest files of the newest version into one (a maintenance job's remove + add),
retrying on a conflict, as a writer racing the flusher.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shoal.errors import CommitConflictError
from shoal.storage import faults
from shoal.storage.commit import Commit
from shoal.storage.location import StorageLocation
from shoal.storage.store import TableStore
from shoal.storage.table import Table


def main(argv: list[str]) -> int:
    data_dir, app_id, crash_point, *inputs = argv
    root = Path(data_dir)
    if crash_point != "none":
        faults.install(
            lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == crash_point else None
        )
    if (root / "wait").exists():
        deadline = time.monotonic() + 60
        while not (root / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    location = StorageLocation.parse(os.environ.get("SHOAL_STORAGE_URL", ""), root)
    table = TableStore(root, location=location).open("t", "logs")
    if app_id.startswith("compact:"):
        for _ in range(int(app_id.split(":")[1])):
            _compact_once(table)
        return 0
    for item in inputs:
        path, lsn = item.rsplit(":", 1)
        table.flush(pq.read_table(path), int(lsn), app_id=app_id)
    return 0


def _compact_once(table: Table) -> None:
    for _attempt in range(50):
        files = sorted(table.snapshot().files, key=lambda f: f.path)[:2]
        if len(files) < 2:
            time.sleep(0.05)
            continue
        rels = [table.place.rel(f.path) for f in files]
        merged = pa.concat_tables([table.place.read_table(r) for r in rels])
        prepared = table.files.write(table.conform(merged))
        try:
            table.commit(
                Commit("compact", adds=tuple(prepared), removes=tuple(rels), data_change=False)
            )
            return
        except CommitConflictError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
