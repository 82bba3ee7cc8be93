"""Run in a child process by the crash and concurrency tests (not collected by pytest).

usage: child_writer.py DATA_DIR APP_ID CRASH_POINT INPUT.parquet[:LSN] ...

Flushes each input file to tenant ``t`` table ``logs`` with its LSN, as
``APP_ID``; SIGKILLs itself when the commit path reaches CRASH_POINT
(``none`` for no crash). Waits for ``DATA_DIR/go`` before starting, if
``DATA_DIR/wait`` exists, so two children start together.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from shoal.storage import faults
from shoal.storage.store import TableStore


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
    table = TableStore(root).open("t", "logs")
    for item in inputs:
        path, lsn = item.rsplit(":", 1)
        table.flush(pq.read_table(path), int(lsn), app_id=app_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
