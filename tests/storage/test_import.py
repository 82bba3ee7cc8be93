from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from shoal.cli import main
from shoal.errors import CoverageOverlapError, SchemaMismatchError, StorageError
from shoal.storage import layout
from shoal.storage.importer import import_files
from shoal.storage.store import TableStore

from .helpers import BASE, BASE_US, logs_table, random_logs

MIN = 60_000_000


def _write(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


def test_overlap_is_rejected_with_the_ranges_named(store: TableStore, tmp_path: Path) -> None:
    table = store.open("acme", "logs")
    table.flush(logs_table([BASE_US + i * MIN for i in range(10)], ["api"] * 10), 1)
    # minutes 5..6 overlap for "api"; the "web" rows at minutes 0..2 are another series
    clash = logs_table(
        [BASE_US + 5 * MIN + 1, BASE_US + 6 * MIN + 2, *[BASE_US + i * MIN for i in range(3)]],
        ["api", "api", "web", "web", "web"],
        first_id=100,
    )
    path = _write(tmp_path / "clash.parquet", clash)
    with pytest.raises(CoverageOverlapError) as info:
        import_files(table, [path])
    assert info.value.ranges == [
        ((BASE + dt.timedelta(minutes=5)).isoformat(), (BASE + dt.timedelta(minutes=7)).isoformat())
    ]
    assert "2026-03-01T00:05:00+00:00 .. 2026-03-01T00:07:00+00:00" in str(info.value)
    assert table.snapshot().rows == 10
    assert not list(table.path.glob("imported/*")) and len(table.snapshot().files) == 1

    result = import_files(table, [path], allow_overlap=True)
    assert result.rows_added == 5
    assert table.snapshot().rows == 15


def test_non_overlapping_import_is_accepted(store: TableStore, tmp_path: Path) -> None:
    table = store.open("acme", "logs")
    table.flush(logs_table([BASE_US + i * MIN for i in range(10)], ["api"] * 10), 1)
    later = random_logs(random.Random(2), 500, first_id=1000, hours=3)
    later = later.set_column(
        0,
        later.schema.field(0),
        pa.array(
            [t + 5 * layout.HOUR_US for t in layout.time_as_us(later.column(0)).tolist()],
            pa.int64(),
        ).cast(later.schema.field(0).type),
    )
    one_hour = logs_table([BASE_US + 20 * MIN], ["web"], first_id=5000)
    paths = [_write(tmp_path / "a.parquet", later), _write(tmp_path / "b.parquet", one_hour)]
    seen: list[tuple[int, int]] = []
    result = import_files(table, paths, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)]
    assert result.rows_added == 501 and result.files_added == 2
    assert table.history(1)[0].operation == "import"
    back = DeltaTable(str(table.path)).to_pyarrow_table()
    assert back.num_rows == 511
    # adopted as is: the multi-hour file under imported/, the one-hour file in its hour
    rels = sorted(str(Path(f.path).relative_to(table.path)) for f in table.snapshot().files)
    assert sum(r.startswith("imported/") for r in rels) == 1
    assert sum(r.startswith("hour=2026-03-01T00/") for r in rels) == 2
    cov = table.coverage(BASE, BASE + dt.timedelta(hours=1), series="web")
    assert cov.covered == ((BASE + dt.timedelta(minutes=20), BASE + dt.timedelta(minutes=21)),)


def test_a_flush_committed_during_the_import_makes_it_fail_cleanly(
    store: TableStore, tmp_path: Path
) -> None:
    """Overlap is checked again on the version the import commits on: here another
    writer (its own store, as the server's flusher is another process) commits the
    same minutes after the import's first check and before its commit."""
    table = store.open("acme", "logs")
    path = _write(
        tmp_path / "backfill.parquet",
        logs_table([BASE_US + i * MIN for i in range(10)], ["api"] * 10, first_id=100),
    )
    server = TableStore(store.data_dir).open("acme", "logs")

    def flush_meanwhile(done: int, total: int) -> None:
        server.flush(logs_table([BASE_US + 3 * MIN + 7], ["api"], first_id=900), 1)

    with pytest.raises(CoverageOverlapError) as info:
        import_files(table, [path], progress=flush_meanwhile)
    assert info.value.ranges == [
        ((BASE + dt.timedelta(minutes=3)).isoformat(), (BASE + dt.timedelta(minutes=4)).isoformat())
    ]
    # the flushed row is there, the import's rows are not, and its files are gone
    back = DeltaTable(str(table.path)).to_pyarrow_table()
    assert back.num_rows == 1
    assert table.snapshot().rows == 1
    assert not list(table.path.glob("imported/*"))
    # data files only: the indexes beside them live in directories named `_...`, which
    # Delta's readers skip as they skip `_delta_log`
    on_disk = {
        str(p)
        for p in table.path.rglob("*.parquet")
        if not any(part.startswith("_") for part in p.relative_to(table.path).parts)
    }
    assert on_disk == {f.path for f in table.snapshot().files}


def test_files_overlapping_each_other_are_rejected(store: TableStore, tmp_path: Path) -> None:
    table = store.open("acme", "logs")
    a = _write(tmp_path / "a.parquet", logs_table([BASE_US], ["api"]))
    b = _write(tmp_path / "b.parquet", logs_table([BASE_US + 5], ["api"], first_id=9))
    with pytest.raises(CoverageOverlapError):
        import_files(table, [a, b])
    assert table.snapshot().rows == 0


def test_castable_files_are_rewritten_and_mismatches_refused(
    store: TableStore, tmp_path: Path
) -> None:
    table = store.open("acme", "logs")
    data = random_logs(random.Random(3), 200, hours=2)
    ns = data.set_column(
        0,
        pa.field("timestamp", pa.timestamp("ns", tz="UTC"), nullable=False),
        data.column(0).cast(pa.timestamp("ns", tz="UTC")),
    )
    path = _write(tmp_path / "ns.parquet", ns)
    result = import_files(table, [path])
    assert result.files_added == 2  # split by hour, written with shoal's rules
    for f in table.snapshot().files:
        assert pq.ParquetFile(f.path).schema_arrow.equals(table.spec.schema)
    bad = _write(tmp_path / "bad.parquet", data.drop_columns(["severity_number"]))
    with pytest.raises(SchemaMismatchError, match="missing column 'severity_number'"):
        import_files(table, [bad], allow_overlap=True)
    with pytest.raises(StorageError, match="not a readable Parquet file"):
        import_files(table, [tmp_path / "bad.parquet", _write_text(tmp_path / "x.parquet")])


def _write_text(path: Path) -> Path:
    path.write_text("hello")
    return path


def _trips(day: int, rows: int) -> pa.Table:
    start = BASE_US + day * 24 * layout.HOUR_US
    times = [start + i * (24 * layout.HOUR_US // rows) for i in range(rows)]
    return pa.table(
        {
            "pickup": pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "fare": pa.array([float(i) for i in range(rows)]),
            "zone": pa.array([f"z{i % 5}" for i in range(rows)]),
        }
    )


def test_cli_import_user_table_history_and_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    day0 = _write(tmp_path / "d0.parquet", _trips(0, 2880))
    day1 = _write(tmp_path / "d1.parquet", _trips(1, 2880))
    common = ["--data-dir", str(data_dir), "--tenant", "acme", "--table", "trips"]
    assert main(["import", str(day0), *common, "--time-column", "pickup"]) == 0
    assert main(["import", str(day1), *common]) == 0
    out = capsys.readouterr().out
    assert "version 2: 1 files, 2880 rows imported" in out
    assert main(["import", str(day0), *common]) == 2
    err = capsys.readouterr().err
    assert "overlaps existing data in 2026-03-01T00:00:00+00:00 .. 2026-03-02T00:00:00+00:00" in err

    assert main(["table", "history", *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["version", "timestamp", "operation"]
    assert [ln.split()[2] for ln in lines[1:]] == ["import", "import", "CREATE"]
    assert [ln.split()[3] for ln in lines[1:3]] == ["2880", "2880"]

    args = ["table", "coverage", *common]
    args += ["--start", "2026-02-28T12:00:00Z", "--end", "2026-03-03T00:00:00Z"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "acme/trips (table): 2880/3600 buckets of 60s covered"
    assert out[1:] == [
        "gap      2026-02-28T12:00:00+00:00 .. 2026-03-01T00:00:00+00:00",
        "covered  2026-03-01T00:00:00+00:00 .. 2026-03-03T00:00:00+00:00",
    ]
    table = TableStore(data_dir).open("acme", "trips", create=False)
    assert table.spec.time_column == "pickup"
    assert DeltaTable(str(table.path)).to_pyarrow_table().num_rows == 5760
