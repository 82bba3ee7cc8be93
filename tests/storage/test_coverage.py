from __future__ import annotations

import datetime as dt
import itertools
import json
import unittest.mock
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, FrozenBitMap

from shoal.errors import StorageError
from shoal.storage import coverage as cov
from shoal.storage.store import TableStore

from .helpers import BASE, BASE_US, logs_table

bitmaps = st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=50).map(FrozenBitMap)
coverages = st.builds(
    cov.Coverage,
    bucket_s=st.integers(min_value=1, max_value=86_400),
    buckets=bitmaps,
    series=st.dictionaries(st.text(max_size=20), bitmaps, max_size=8),
)


@given(coverages)
def test_codec_round_trips(c: cov.Coverage) -> None:
    assert cov.decode(cov.encode(c)) == c


@given(coverages)
def test_the_header_made_in_slices_is_the_json_of_the_whole(c: cov.Coverage) -> None:
    """The header, encoded a slice at a time (slices of 3 here, so that most draws have
    several), is one JSON object that any JSON reader reads as the whole header."""
    with unittest.mock.patch.object(cov, "_JSON_SLICE", 3):
        raw = cov.encode(c)
    keys = sorted(c.series)
    blobs = [c.buckets.serialize(), *(c.series[k].serialize() for k in keys)]
    header = {"bucket_s": c.bucket_s, "sizes": [len(b) for b in blobs], "series": keys}
    start = len(cov.MAGIC) + 4
    length = int.from_bytes(raw[len(cov.MAGIC) : start], "little")
    assert json.loads(raw[start : start + length]) == header
    assert raw[start + length : -4] == b"".join(blobs)


@given(coverages, st.data())
def test_codec_rejects_damage(c: cov.Coverage, data: st.DataObject) -> None:
    raw = bytearray(cov.encode(c))
    pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[pos] ^= 0xFF
    with pytest.raises(cov.CoverageFormatError):
        cov.decode(bytes(raw))
    with pytest.raises(cov.CoverageFormatError):
        cov.decode(bytes(raw[: data.draw(st.integers(min_value=0, max_value=len(raw) - 1))]))


@given(st.lists(st.integers(min_value=0, max_value=500), max_size=200))
def test_runs_match_brute_force(values: list[int]) -> None:
    got = cov.runs(BitMap(values))
    expanded = sorted({v for a, b in got for v in range(a, b)})
    assert expanded == sorted(set(values))
    assert all(b < c for (_, b), (c, _) in itertools.pairwise(got))


@settings(deadline=None)  # its first example warms Arrow's kernels up
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**10), st.sampled_from(["a", "b", None])),
        max_size=100,
    ),
    st.integers(min_value=1, max_value=600),
)
def test_compute_matches_brute_force(rows: list[tuple[int, str | None]], bucket_s: int) -> None:
    times = np.array([t for t, _ in rows], dtype=np.int64)
    series = pa.array([s for _, s in rows], pa.string())
    c = cov.compute(times, series, bucket_s)
    width = bucket_s * 1_000_000
    assert set(c.buckets) == {t // width for t, _ in rows}
    expected: dict[str, set[int]] = {}
    for t, s in rows:
        expected.setdefault(s or "", set()).add(t // width)
    assert {k: set(v) for k, v in c.series.items()} == expected


def test_times_before_1970_are_refused() -> None:
    with pytest.raises(StorageError, match="1970"):
        cov.compute(np.array([-1], dtype=np.int64), None, 60)


def _brute_force(
    times: list[int],
    services: list[str | None],
    start_us: int,
    end_us: int,
    width_s: int,
    series: str | None,
) -> list[tuple[int, int]]:
    width = width_s * 1_000_000
    lo, hi = start_us // width, -(-end_us // width)
    hit = {
        t // width
        for t, s in zip(times, services, strict=True)
        if series is None or (s or "") == series
    }
    covered = [b for b in range(lo, hi) if b in hit]
    runs: list[tuple[int, int]] = []
    for b in covered:
        if runs and runs[-1][1] == b:
            runs[-1] = (runs[-1][0], b + 1)
        else:
            runs.append((b, b + 1))
    return [(max(a * width, start_us), min(b * width, end_us)) for a, b in runs]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=4 * 3600 * 10**6),
                st.sampled_from(["api", "web", None]),
            ),
            min_size=1,
            max_size=60,
        ),
        min_size=1,
        max_size=3,
    ),
    window=st.tuples(
        st.integers(min_value=-3600, max_value=5 * 3600),
        st.integers(min_value=1, max_value=6 * 3600),
    ),
    factor=st.sampled_from([1, 5, 60]),
    series=st.sampled_from([None, "api", "", "nope"]),
)
def test_table_coverage_matches_a_scan(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[tuple[int, str | None]]],
    window: tuple[int, int],
    factor: int,
    series: str | None,
) -> None:
    store = TableStore(tmp_path_factory.mktemp("cov"), coverage_bucket_s=60)
    table = store.open("t", "logs")
    all_times: list[int] = []
    all_services: list[str | None] = []
    for lsn, rows in enumerate(batches, start=1):
        times = [BASE_US + t for t, _ in rows]
        services = [s for _, s in rows]
        table.flush(logs_table(times, services), lsn)
        all_times += times
        all_services += services
    start = BASE + dt.timedelta(seconds=window[0])
    end = start + dt.timedelta(seconds=window[1])
    result = table.coverage(start, end, series=series, bucket_s=60 * factor)
    expected = _brute_force(
        all_times, all_services, cov.to_us(start), cov.to_us(end), 60 * factor, series
    )
    assert [(cov.to_us(a), cov.to_us(b)) for a, b in result.covered] == expected
    # gaps and covered ranges tile the window exactly
    edges = sorted([*result.covered, *result.gaps])
    assert edges[0][0] == start and edges[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(edges))


def test_coverage_reads_no_parquet(store: TableStore, tmp_path: Path) -> None:
    table = store.open("t", "logs")
    table.flush(logs_table([BASE_US + 90_000_000], ["api"]), 1)
    for f in table.snapshot().files:
        Path(f.path).write_bytes(b"not parquet any more")
    table2 = TableStore(store.data_dir).open("t", "logs")
    result = table2.coverage(BASE, BASE + dt.timedelta(minutes=3))
    assert result.covered == ((BASE + dt.timedelta(minutes=1), BASE + dt.timedelta(minutes=2)),)
    assert result.covered_buckets == 1 and result.total_buckets == 3


def test_bucket_must_be_a_multiple(store: TableStore) -> None:
    table = store.open("t", "logs")
    with pytest.raises(StorageError, match="multiple"):
        table.coverage(BASE, BASE + dt.timedelta(hours=1), bucket_s=90)


_T0_US = 1_772_323_200_000_000  # 2026-03-01T00:00Z


def _grouped(times: np.ndarray, series: pa.Array | None, bucket_s: int) -> cov.Coverage:
    """Reference: (text key, bucket) pairs grouped by Arrow, one bitmap per key."""
    buckets = cov.to_buckets(times, bucket_s)
    per_series: dict[str, FrozenBitMap] = {}
    if series is not None and len(buckets):
        pairs = pa.table({"k": cov.series_keys(series), "b": pa.array(buckets, pa.uint32())})
        unique = pairs.group_by(["k", "b"], use_threads=False).aggregate([])
        for key in set(unique.column("k").to_pylist()):
            mask = pc.equal(unique.column("k"), key)
            per_series[key] = FrozenBitMap(unique.filter(mask).column("b").to_pylist())
    return cov.Coverage(bucket_s, FrozenBitMap(np.unique(buckets)), per_series)


@st.composite
def series_columns(draw: st.DrawFn) -> tuple[np.ndarray, pa.Array]:
    rows = draw(st.integers(0, 300))
    times = draw(
        st.lists(st.integers(0, 4 * 3600 * 10**6), min_size=rows, max_size=rows).map(sorted)
    )
    values = st.one_of(st.none(), st.integers(-3, 5))
    raw = draw(st.lists(values, min_size=rows, max_size=rows))
    kind = draw(st.sampled_from(["int", "string", "dictionary", "empty-string"]))
    if kind == "int":
        column = pa.array(raw, pa.int64())
    else:
        text = [
            None if v is None else ("" if kind == "empty-string" and v < 0 else f"s{v}")
            for v in raw
        ]
        column = pa.array(text, pa.string())
        if kind == "dictionary":
            column = column.dictionary_encode()
    return _T0_US + np.asarray(times, dtype=np.int64), column


@settings(max_examples=150, deadline=None)
@given(series_columns(), st.sampled_from([1, 60, 3600]))
def test_compute_equals_grouping_text_keys(
    columns: tuple[np.ndarray, pa.Array], bucket_s: int
) -> None:
    times, series = columns
    expected = _grouped(times, series, bucket_s)
    assert cov.compute(times, series, bucket_s) == expected
    # past SHARED_CELLS each series gets a bitmap of its own: the same coverage
    with unittest.mock.patch.object(cov, "SHARED_CELLS", 1):
        assert cov.compute(times, series, bucket_s) == expected
    assert cov.compute(times, None, bucket_s) == _grouped(times, None, bucket_s)


def test_null_and_empty_text_are_one_series_over_both_buckets() -> None:
    """Null is named "" as the empty string is: with one bucket each (the flush's usual
    shape, where series share one bitmap per bucket), the series holds both buckets."""
    hour = 3600 * 10**6
    times = np.array([_T0_US, _T0_US + hour, _T0_US + 2 * hour], dtype=np.int64)
    series = pa.array([None, "", "a"], pa.string())
    c = cov.compute(times, series, 3600)
    first = _T0_US // hour
    assert {k: sorted(v) for k, v in c.series.items()} == {
        "": [first, first + 1],
        "a": [first + 2],
    }
    assert c == _grouped(times, series, 3600)


def test_series_over_the_same_buckets_share_one_bitmap() -> None:
    """A flush's series mostly span the same buckets (two here, three for some): one bitmap
    per distinct set of buckets, not one per series."""
    minute = 60 * 10**6
    start = _T0_US - _T0_US % minute + 59 * 10**6  # a second before a bucket ends
    names = [f"s{i:04d}" for i in range(1000)]
    times = [start + t for t in (0, 2 * 10**6) for _ in names]  # each series in 2 buckets
    values = names * 2
    times += [start + 61 * 10**6] * 10  # ten of them in a third bucket
    values += names[:10]
    order = sorted(range(len(values)), key=lambda i: (values[i], times[i]))
    series = pa.array([values[i] for i in order], pa.string())
    c = cov.compute(np.array([times[i] for i in order], dtype=np.int64), series, 60)
    first = start // minute
    assert {k: sorted(v) for k, v in c.series.items()} == {
        name: [first, first + 1, first + 2] if i < 10 else [first, first + 1]
        for i, name in enumerate(names)
    }
    assert len({id(bitmap) for bitmap in c.series.values()}) == 2
    assert cov.decode(cov.encode(c)) == c
