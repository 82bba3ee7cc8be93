"""Link directories: one listing scan over exactly a table version's committed files."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from shoal.errors import QueryError
from shoal.sql.links import DAY_US, HOUR_US, LinkDirs, chunks
from shoal.sql.sessions import ParquetViewCache
from shoal.storage.types import ScanFile
from shoal.storage.view import TableInput


def _file(tmp_path: Path, name: str, start_us: int, rows: int = 3) -> ScanFile:
    path = tmp_path / name
    pq.write_table(pa.table({"x": list(range(rows))}), path)
    return ScanFile(str(path), path.stat().st_size, rows, start_us, start_us + 1)


def test_chunks_group_by_day_with_the_newest_hour_apart(tmp_path: Path) -> None:
    files = [_file(tmp_path, f"h{h}.parquet", h * HOUR_US + 5) for h in (30, 0, 1, 25, 23, 31)]
    groups = chunks(files)
    hours = [[f.min_time_us // HOUR_US for f in g] for g in groups]
    assert hours == [[0, 1, 23], [25, 30], [31]]
    assert chunks([]) == []
    # a flush into the newest hour changes only the last chunk
    later = [*files, _file(tmp_path, "h31b.parquet", 31 * HOUR_US + 9)]
    assert chunks(later)[:2] == groups[:2]
    assert DAY_US == 24 * HOUR_US


def test_a_directory_lists_exactly_its_files(tmp_path: Path) -> None:
    files = [_file(tmp_path, f"f{i}.parquet", i, rows=i + 1) for i in range(4)]
    _file(tmp_path, "uncommitted.parquet", 9, rows=100)  # beside them, never read
    links = LinkDirs(linger_s=0.0, parent=str(tmp_path))
    first = links.acquire(files[:3])
    assert links.acquire(files[:3]) == first  # the same set, the same directory
    other = links.acquire(files[1:])
    assert other != first
    ctx = SessionContext()
    assert ctx.read_parquet(first).count() == 1 + 2 + 3
    assert ctx.read_parquet(other).count() == 2 + 3 + 4
    assert sorted(os.readlink(Path(first) / n) for n in os.listdir(first)) == sorted(
        f.path for f in files[:3]
    )
    links.close()
    assert not links.root.exists()


def test_released_directories_linger_then_go(tmp_path: Path) -> None:
    files = [_file(tmp_path, "a.parquet", 0)]
    links = LinkDirs(linger_s=60.0, parent=str(tmp_path))
    directory = links.acquire(files)
    links.acquire(files)
    links.release(directory)
    links.release(directory)
    assert Path(directory).is_dir()  # a query planned on it may still be reading
    assert links.acquire(files) == directory  # and it can be taken up again
    links.release(directory)
    links.sweep(now=1e12)
    assert not Path(directory).exists()
    # a set released and swept is built again when asked for
    again = links.acquire(files)
    assert SessionContext().read_parquet(again).count() == 3
    links.close()


def test_a_missing_file_is_an_error_not_an_empty_scan(tmp_path: Path) -> None:
    present = _file(tmp_path, "a.parquet", 0)
    gone = _file(tmp_path, "b.parquet", 1)
    os.unlink(gone.path)
    links = LinkDirs(parent=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"b\.parquet"):
        links.acquire([present, gone])
    assert links.live == 0
    links.close()


def test_a_cached_view_checks_its_files_for_time_travel(tmp_path: Path) -> None:
    files = (_file(tmp_path, "a.parquet", 0), _file(tmp_path, "b.parquet", HOUR_US))
    schema = pa.schema([pa.field("x", pa.int64())])
    table = TableInput("m", schema, 3, 0, files, (), 0)
    cache = ParquetViewCache()
    assert cache.get("t", table) is not None
    os.unlink(files[1].path)  # vacuumed since
    assert cache.get("t", table) is not None  # a current version is not re-checked
    with pytest.raises(QueryError, match="committed file missing"):
        cache.get("t", table, verify=True)
    cache.close()
    with pytest.raises(QueryError, match="committed file missing"):
        ParquetViewCache().get("t", table)


def test_roots_of_killed_processes_are_removed_by_the_next_one(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from shoal.sql.links import LinkDirs\n"
        f"d = LinkDirs(parent={str(tmp_path)!r})\n"
        "print(d.root, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    orphan = Path(child.stdout.readline().strip())
    live = LinkDirs(parent=str(tmp_path))  # the child still runs: its root stays
    assert orphan.is_dir()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert orphan.is_dir()  # no exit handler ran
    other = LinkDirs(parent=str(tmp_path))
    assert not orphan.exists()
    assert live.root.is_dir() and other.root.is_dir()
    other.close()
    live.close()
