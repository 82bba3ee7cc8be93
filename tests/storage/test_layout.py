from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from shoal.schema import LOGS, METRICS
from shoal.storage import layout

from .helpers import BASE_US, metrics_table, random_logs


def test_hour_dir_and_paths() -> None:
    hour = layout.hour_index(BASE_US + 5 * layout.HOUR_US + 17)
    assert layout.hour_dir(hour) == "hour=2026-03-01T05"
    rel = layout.hour_file_path(hour)
    assert rel.startswith("hour=2026-03-01T05/part-") and rel.endswith(".parquet")
    assert layout.coverage_path(rel).startswith("_coverage/hour=2026-03-01T05__part-")
    assert layout.coverage_path(rel).endswith(".roar")


@given(st.integers(min_value=0, max_value=2**52))
def test_timestamp_stat_text_round_trips(us: int) -> None:
    text = layout.format_timestamp_us(us)
    parsed = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert (parsed - epoch) // dt.timedelta(microseconds=1) == us


def test_split_by_hour_sorts_and_cuts() -> None:
    table = random_logs(random.Random(3), 500, hours=4)
    pieces = layout.split_by_hour(table, LOGS)
    assert sum(p.num_rows for _, p in pieces) == 500
    assert [h for h, _ in pieces] == sorted({h for h, _ in pieces})
    for hour, piece in pieces:
        times = layout.time_as_us(piece.column("timestamp"))
        assert (times // layout.HOUR_US == hour).all()
        keys = list(
            zip(
                [s or "\uffff" for s in piece.column("service_name").to_pylist()],
                times.tolist(),
                strict=True,
            )
        )
        assert keys == sorted(keys)


def test_written_file_follows_the_rules(tmp_path: Path) -> None:
    times = [BASE_US + i * 1_000_000 for i in range(2000)]
    table = metrics_table(times, [i % 7 for i in range(2000)], [f"m{i % 3}" for i in range(2000)])
    ((_, piece),) = layout.split_by_hour(table, METRICS)
    path = tmp_path / "f.parquet"
    layout.write_parquet(piece, path, METRICS)
    pf = pq.ParquetFile(path)
    assert pf.schema_arrow.equals(METRICS.schema)
    md = pf.metadata
    col = md.row_group(0).column(pf.schema_arrow.get_field_index("metric_name"))
    assert col.compression == "ZSTD"
    assert any("DICT" in e for e in col.encodings)
    assert col.statistics is not None and col.statistics.has_min_max
    assert md.row_group(0).column(0).has_offset_index
    assert [c.column_index for c in md.row_group(0).sorting_columns][:2] == [
        METRICS.schema.get_field_index("metric_name"),
        METRICS.schema.get_field_index("series_id"),
    ]
    stats = json.loads(layout.stats_for_file(path, METRICS).to_json())
    assert stats["numRecords"] == 2000
    assert stats["minValues"]["timestamp"] == layout.format_timestamp_us(min(times))
    assert stats["maxValues"]["timestamp"] == layout.format_timestamp_us(max(times))
    assert stats["nullCount"]["timestamp"] == 0
    assert stats["minValues"]["metric_name"] == "m0"
    assert stats["maxValues"]["series_id"] == 6
