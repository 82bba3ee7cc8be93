"""Compaction's task body without Spark: same rows, the flusher's layout, storage's coverage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from loadtest.pipeline_data import metrics_table
from shoal.pipeline import encoded
from shoal.pipeline import merge as merge_mod
from shoal.pipeline.merge import merge_files, merge_runs
from shoal.pipeline.writer import WriteTarget
from shoal.schema import METRICS, METRICS_SCHEMA
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.location import StorageLocation
from shoal.storage.place import Place
from tests.pipeline.conftest import HOUR_US, T0_US, rows_multiset


def _small_files(root: Path, count: int, *, span_s: int = 3000, seed: int = 0) -> list[str]:
    """Files written exactly as the flusher writes them (layout rules), one per batch."""
    paths = []
    for i in range(count):
        data = metrics_table(
            300, start_us=T0_US + i * 60_000_000, span_s=span_s, series=12, seed=seed + i
        )
        for hour, piece in layout.split_by_hour(data, METRICS):
            path = root / layout.hour_file_path(hour)
            path.parent.mkdir(parents=True, exist_ok=True)
            layout.write_parquet(piece, path, METRICS)
            paths.append(str(path))
    return paths


def _place(root: Path) -> Place:
    return Place(StorageLocation.local(root))


def _read(paths: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in paths])


@pytest.mark.parametrize("span_s", [3000, 3 * 3600])
def test_merged_files_look_like_the_flushers(tmp_path: Path, span_s: int) -> None:
    inputs = _small_files(tmp_path / "in", 5, span_s=span_s)
    out = tmp_path / "out"
    target = WriteTarget(_place(out), METRICS, 128 * 1024 * 1024, 60)
    written = merge_runs(target, [inputs])
    paths = [str(out / str(w["path"])) for w in written]
    assert rows_multiset(_read(paths)) == rows_multiset(_read(inputs))
    assert sum(int(str(w["rows"])) for w in written) == _read(inputs).num_rows
    reference = tmp_path / "reference.parquet"
    for w, path in zip(written, paths, strict=True):
        data = pq.read_table(path)
        layout.write_parquet(data.cast(METRICS_SCHEMA), reference, METRICS)
        mine, flusher = pq.ParquetFile(path), pq.ParquetFile(reference)
        # the same stored schema, Parquet columns, encodings and footer as the flusher's
        assert mine.schema_arrow.equals(METRICS_SCHEMA)
        assert mine.metadata.metadata == flusher.metadata.metadata
        assert mine.metadata.metadata == pq.ParquetFile(inputs[0]).metadata.metadata
        assert mine.schema.equals(flusher.schema)
        for g in range(mine.metadata.num_row_groups):
            for c in range(mine.metadata.num_columns):
                a, b = mine.metadata.row_group(g).column(c), flusher.metadata.row_group(g).column(c)
                assert (a.compression, a.encodings) == (b.compression, b.encodings)
                assert a.statistics == b.statistics
                assert (a.has_column_index, a.has_offset_index) == (
                    b.has_column_index,
                    b.has_offset_index,
                )
                # a page index wherever there are statistics (flat columns: nothing prunes
                # by the nested ones)
                assert a.has_offset_index and a.has_column_index == a.is_stats_set
                assert a.is_stats_set == ("." not in a.path_in_schema)  # flat ones have them
        assert mine.metadata.row_group(0).sorting_columns == (
            flusher.metadata.row_group(0).sorting_columns
        )
        keys = ["metric_name", "series_id", "timestamp"]
        order = pc.sort_indices(data.select(keys), sort_keys=[(k, "ascending") for k in keys])
        assert order.to_pylist() == list(range(data.num_rows))
        # Delta stats and coverage as storage computes them for the same rows
        assert w["stats"] == layout.compute_stats(data, METRICS).to_json()
        stored = cov.read(out / layout.coverage_path(str(w["path"])))
        expected = cov.compute(
            layout.time_as_us(data.column("timestamp")), data.column("series_id"), 60
        )
        assert stored == expected
        assert {int(str(w["hour"]))} == {
            t // HOUR_US for t in layout.time_as_us(data.column("timestamp")).tolist()
        }


def test_large_dictionaries_are_written_plain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoded, "DICTIONARY_BYTES_LIMIT", 16)
    inputs = _small_files(tmp_path / "in", 3)
    target = WriteTarget(_place(tmp_path / "out"), METRICS, 128 * 1024 * 1024, 60)
    written = merge_files(target, inputs)
    paths = [str(tmp_path / "out" / str(w["path"])) for w in written]
    assert rows_multiset(_read(paths)) == rows_multiset(_read(inputs))
    assert pq.ParquetFile(paths[0]).schema_arrow.equals(METRICS_SCHEMA)


def test_files_of_several_row_groups_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A flush of more than one row group gives each row group its own dictionaries; the
    # map columns' string leaves must still read as dictionaries. Row groups of 2,048
    # rows instead of 128Ki make several of them from a few thousand rows, in the flushed
    # file and in the merged ones alike.
    monkeypatch.setattr(layout, "ROW_GROUP_ROWS", 2048)
    data = metrics_table(9_000, start_us=T0_US, span_s=3000, series=400, seed=7)
    ((hour, piece),) = layout.split_by_hour(data, METRICS)
    big = tmp_path / "in" / layout.hour_file_path(hour)
    big.parent.mkdir(parents=True)
    layout.write_parquet(piece, big, METRICS)
    assert pq.ParquetFile(big).num_row_groups > 1
    inputs = [str(big), *_small_files(tmp_path / "in", 2, seed=3)]
    out = tmp_path / "out"
    written = merge_runs(WriteTarget(_place(out), METRICS, 128 * 1024 * 1024, 60), [inputs])
    paths = [str(out / str(w["path"])) for w in written]
    assert sum(pq.ParquetFile(p).num_row_groups for p in paths) > 1
    assert rows_multiset(_read(paths)) == rows_multiset(_read(inputs))


def test_the_merged_dictionary_decides_plain_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every file's dictionary of metric_unit is under the limit, the merged one over it:
    # the writer must get plain strings for that column and dictionaries for the others.
    paths = []
    for i in range(4):
        data = metrics_table(200, start_us=T0_US + i * 60_000_000, span_s=50, series=5, seed=i)
        units = pa.array([f"unit-{i}-{'x' * 40}-{r % 3}" for r in range(data.num_rows)])
        data = data.set_column(data.schema.get_field_index("metric_unit"), "metric_unit", units)
        ((_, piece),) = layout.split_by_hour(data, METRICS)
        path = tmp_path / "in" / f"{i}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        layout.write_parquet(piece, path, METRICS)
        paths.append(str(path))
    one_file = pq.read_table(paths[0], read_dictionary=["metric_unit"]).column("metric_unit")
    per_file = max(chunk.dictionary.nbytes for chunk in one_file.chunks)
    monkeypatch.setattr(encoded, "DICTIONARY_BYTES_LIMIT", 2 * per_file)
    seen: list[pa.Schema] = []
    real_write_hour = merge_mod.write_hour

    def spy(target: WriteTarget, hour: int, rows: pa.Table, schema: pa.Schema) -> list[Any]:
        seen.append(schema)
        return real_write_hour(target, hour, rows, schema)

    monkeypatch.setattr(merge_mod, "write_hour", spy)
    out = tmp_path / "out"
    written = merge_files(WriteTarget(_place(out), METRICS, 128 * 1024 * 1024, 60), paths)
    (schema,) = seen
    assert schema.field("metric_unit").type == pa.string()
    assert pa.types.is_dictionary(schema.field("metric_name").type)
    merged = [str(out / str(w["path"])) for w in written]
    assert rows_multiset(_read(merged)) == rows_multiset(_read(paths))
