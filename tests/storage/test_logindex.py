"""The log index: each logs file's streams per minute, written by the flush and by the
Spark jobs' writer, checked against the rows grouped independently, and rebuilt from the
data for a file whose summary is missing."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loadtest.bench_logs import push_bodies
from shoal.lokipush.decode import decode
from shoal.pipeline.merge import merge_files
from shoal.pipeline.writer import WriteTarget
from shoal.promwrite import snappy
from shoal.schema import LOGS
from shoal.storage import logindex
from shoal.storage.location import StorageLocation
from shoal.storage.place import Place
from shoal.storage.store import TableStore

MINUTE = 60_000_000_000


def _rows(n: int, seed: int) -> pa.Table:
    now = time.time_ns() // MINUTE * MINUTE
    span = 3 * 3_600_000_000_000
    tables = [
        decode(snappy.decompress(body, 1 << 30)).table
        for _, body in push_bodies(n, 7, now - span, span, 2000, seed)
    ]
    return pa.concat_tables(tables)


def _expected(rows: pa.Table) -> Counter[tuple[object, ...]]:
    """(stream labels, minute) -> entries, worked out row by row."""
    out: Counter[tuple[object, ...]] = Counter()
    for row in rows.select(["time_unix_nano", "resource_attributes"]).to_pylist():
        minute = -(-row["time_unix_nano"] // MINUTE) - 1
        out[(tuple(row["resource_attributes"]), minute)] += 1
    return out


def _actual(summaries: list[pa.Table]) -> Counter[tuple[object, ...]]:
    out: Counter[tuple[object, ...]] = Counter()
    for summary in summaries:
        for row in summary.to_pylist():
            out[(tuple(row["resource_attributes"]), row["minute"])] += row["entries"]
    return out


def test_the_flush_writes_each_files_summary(tmp_path: Path) -> None:
    store = TableStore(tmp_path / "data")
    table = store.open("acme", "logs", create=True, spec=LOGS)
    rows = _rows(20_000, 1)
    table.flush(rows, 1)
    snapshot = table.snapshot()
    root = store.table_path("acme", "logs")
    assert len(snapshot.files) >= 3  # one per hour
    summaries = []
    for f in snapshot.files:
        rel = str(Path(f.path).relative_to(root))
        sidecar = root / logindex.index_path(rel)
        assert sidecar.is_file(), rel
        summaries.append(pq.read_table(sidecar))
    assert _actual(summaries) == _expected(rows)
    # a lost summary is rebuilt from the file, and written again
    lost = root / logindex.index_path(str(Path(snapshot.files[0].path).relative_to(root)))
    lost.unlink()
    rebuilt = logindex.Summaries().of_file(store.place("acme", "logs"), snapshot.files[0].path)
    assert rebuilt.equals(summaries[0]) and lost.is_file()


def test_the_spark_jobs_writer_writes_the_summary_of_its_files(tmp_path: Path) -> None:
    inputs = []
    for i in range(2):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(_rows(3000, 10 + i).cast(LOGS.schema), path)
        inputs.append(str(path))
    out = tmp_path / "out"
    out.mkdir()
    place = Place(StorageLocation.local(out))
    written = merge_files(WriteTarget(place, LOGS, 128 << 20, 60), inputs)
    summaries = [pq.read_table(out / logindex.index_path(str(w["path"]))) for w in written]
    rows = pa.concat_tables(pq.read_table(p) for p in inputs)
    assert _actual(summaries) == _expected(rows)
