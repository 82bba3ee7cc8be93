"""PromQL's reads without SQL (shoal/storage/samples.py): the rows SQL returns, decoded once."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.sql.service import QueryService
from shoal.storage.samples import PACK_MIN_ROWS, FileSlices, _decode, _pack, _unpack

from .helpers import BASE_US, HOUR_US, Harness, metric_rows
from .test_compaction import _compact

COLUMNS = ["series_id", "time_unix_nano", "start_time_unix_nano", "flags", "value"]
NAMES = [f"m{i}" for i in range(5)]


def _fill(harness: Harness) -> None:
    """Four hours of 5 metrics: three flushes (one of them two hours in one file set, one
    that adds late points to an hour already flushed) and rows left in the snapshot."""
    harness.ingest("t", "metrics", metric_rows(3000, BASE_US, 2 * HOUR_US, seed=1))
    harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(1500, BASE_US + 2 * HOUR_US, HOUR_US, seed=2))
    harness.ingest("t", "metrics", metric_rows(200, BASE_US + HOUR_US, HOUR_US, seed=3))
    harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(900, BASE_US + 3 * HOUR_US, HOUR_US, seed=4))
    harness.ingest("t", "metrics", metric_rows(50, BASE_US + HOUR_US // 2, HOUR_US, seed=5))


def _read(svc: QueryService, names: Sequence[str], start_ns: int, end_ns: int) -> pa.Table:
    return svc.reader.metric_rows("t", names, COLUMNS, start_ns, end_ns, svc.limits.max_samples)


def _sql(svc: QueryService, names: Sequence[str], start_ns: int, end_ns: int) -> pa.Table:
    listed = ", ".join(f"'{n}'" for n in names)
    return svc.run_sync(
        "t",
        f"SELECT metric_name, {', '.join(COLUMNS)} FROM metrics WHERE metric_name IN ({listed}) "
        f"AND time_unix_nano >= {start_ns} AND time_unix_nano < {end_ns}",
    )


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    names = table.column("metric_name").cast(pa.string())
    plain = table.set_column(table.schema.get_field_index("metric_name"), "metric_name", names)
    return sorted(tuple(r.values()) for r in plain.select(["metric_name", *COLUMNS]).to_pylist())


@pytest.fixture
def filled(harness: Harness) -> Harness:
    _fill(harness)
    return harness


def test_a_read_has_the_rows_sql_has(filled: Harness) -> None:
    svc = filled.service()
    files = filled.store.open("t", "metrics").snapshot().files
    assert len(files) >= 4  # hourly files from three flushes, one hour twice
    everything = (BASE_US * 1000, (BASE_US + 4 * HOUR_US) * 1000)
    for names in (["m0"], ["m1", "m3"], NAMES, ["absent"]):
        for start_ns, end_ns in (
            everything,
            # cut inside files, exactly on a file's first row, a nanosecond after it
            ((BASE_US + HOUR_US // 3) * 1000, (BASE_US + 3 * HOUR_US + 17) * 1000),
            (files[0].min_time_us * 1000, files[0].max_time_us * 1000),
            (files[0].min_time_us * 1000 + 1, files[0].max_time_us * 1000 + 1),
        ):
            ours = _read(svc, names, start_ns, end_ns)
            assert _rows(ours) == _rows(_sql(svc, names, start_ns, end_ns))
    for f in files:  # ranges that end just after a file's first row, start at its last
        for start_ns, end_ns in (
            (everything[0], f.min_time_us * 1000 + 1),
            (f.max_time_us * 1000, everything[1]),
        ):
            ours = _read(svc, NAMES, start_ns, end_ns)
            assert _rows(ours) == _rows(_sql(svc, NAMES, start_ns, end_ns))
    assert _read(svc, NAMES, *everything).num_rows == 3000 + 1500 + 200 + 900 + 50
    svc.shutdown()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
    a=st.integers(-10, 4 * 3600 + 10),
    width=st.integers(0, 4 * 3600),
    nudge=st.integers(-1, 1),
)
def test_any_range_reads_what_sql_reads(
    filled: Harness, names: list[str], a: int, width: int, nudge: int
) -> None:
    svc = filled.service()
    start_ns = (BASE_US + a * 1_000_000) * 1000 + nudge
    end_ns = start_ns + width * 1_000_000_000
    assert _rows(_read(svc, names, start_ns, end_ns)) == _rows(_sql(svc, names, start_ns, end_ns))
    svc.shutdown()


def test_each_file_is_decoded_once(filled: Harness) -> None:
    svc = filled.service()
    span = (BASE_US * 1000, (BASE_US + 4 * HOUR_US) * 1000)
    first = _read(svc, ["m2"], *span)
    files = len(filled.store.open("t", "metrics").snapshot().files)
    pending = len(filled.unflushed.batches("t")["metrics"])  # snapshot batches, kept alike
    assert pending >= 1
    assert svc.reader.slices.misses == files + pending and len(svc.reader.slices) == files + pending
    again = _read(svc, ["m2"], *span)
    assert svc.reader.slices.misses == files + pending and svc.reader.slices.hits == files + pending
    assert _rows(again) == _rows(first)
    # a flush turns the snapshot into files: only they are decoded, the rows are the same
    filled.flush("t", "metrics")
    after = _read(svc, ["m2"], *span)
    added = len(filled.store.open("t", "metrics").snapshot().files) - files
    assert added >= 1 and svc.reader.slices.misses == files + pending + added
    assert _rows(after) == _rows(first)
    svc.shutdown()


def test_compaction_and_vacuum_between_reads(filled: Harness) -> None:
    svc = filled.service()
    span = (BASE_US * 1000, (BASE_US + 4 * HOUR_US) * 1000)
    before = _rows(_read(svc, NAMES, *span))
    old = [f.path for f in filled.store.open("t", "metrics").snapshot().files]
    _compact(filled, "t", "metrics")
    filled.store.open("t", "metrics").vacuum(0.0)
    assert not any(os.path.exists(p) for p in old)
    assert _rows(_read(svc, NAMES, *span)) == before
    svc.shutdown()


def test_the_cache_stays_within_its_bytes(filled: Harness) -> None:
    svc = filled.service(sample_cache_bytes=20_000)
    span = (BASE_US * 1000, (BASE_US + 4 * HOUR_US) * 1000)
    for _ in range(2):
        for name in NAMES:
            assert _rows(_read(svc, [name], *span)) == _rows(_sql(svc, [name], *span))
            assert 0 < svc.reader.slices.bytes <= 20_000
    assert svc.reader.slices.misses > len(svc.reader.slices)  # evicted slices were decoded again
    svc.shutdown()


def test_reading_stops_past_the_sample_cap(filled: Harness) -> None:
    svc = filled.service(max_samples=100)
    span = (BASE_US * 1000, (BASE_US + 4 * HOUR_US) * 1000)
    table = _read(svc, NAMES, *span)
    assert 100 < table.num_rows < 5650
    assert pc.all(pc.less(table.column("time_unix_nano"), span[1])).as_py()
    svc.shutdown()


def test_snapshot_rows_are_picked_once(harness: Harness) -> None:
    """UnflushedRows batches never change (an LSN names them): their rows of a metric are kept
    too, per complete run of LSNs or, for the newest, per batch."""
    for i in range(40):  # LSNs 1-40: runs of 16 (1-15, 16-31), the rest as they are
        harness.ingest(
            "t", "metrics", metric_rows(30, BASE_US + i * 60_000_000, 60_000_000, seed=i)
        )
    svc = harness.service()
    span = (BASE_US * 1000, (BASE_US + HOUR_US) * 1000)
    first = _read(svc, ["m1", "m4"], *span)
    assert _rows(first) == _rows(_sql(svc, ["m1", "m4"], *span))
    kept, misses = len(svc.reader.slices), svc.reader.slices.misses
    # two complete runs, and the 9 newest LSNs' batches one by one
    assert kept == misses == 2 * (2 + 9)  # for each of the two names
    assert _rows(_read(svc, ["m1", "m4"], *span)) == _rows(first)
    assert svc.reader.slices.misses == misses and svc.reader.slices.hits == kept
    harness.ingest("t", "metrics", metric_rows(30, BASE_US + HOUR_US // 2, 60_000_000, seed=99))
    assert _rows(_read(svc, ["m1", "m4"], *span)) == _rows(_sql(svc, ["m1", "m4"], *span))
    svc.shutdown()


def test_a_tenant_never_reads_another_tenants_kept_rows(harness: Harness) -> None:
    """Two tenants with the same metric names, in files and in the snapshot: each read
    (the other tenant's rows already kept) answers what that tenant's SQL answers."""
    for tenant, seed in (("t", 1), ("u", 2)):
        harness.ingest(tenant, "metrics", metric_rows(800, BASE_US, HOUR_US, seed=seed))
        harness.flush(tenant, "metrics")
        harness.ingest(tenant, "metrics", metric_rows(90, BASE_US + HOUR_US, HOUR_US, seed=seed))
    svc = harness.service()
    span = (BASE_US * 1000, (BASE_US + 2 * HOUR_US) * 1000)
    mine = _rows(_read(svc, NAMES, *span))
    theirs = svc.reader.metric_rows("u", NAMES, COLUMNS, *span, svc.limits.max_samples)
    assert svc.reader.slices.hits == 0  # nothing of tenant t was reused for tenant u
    their_sql = svc.run_sync(
        "u",
        f"SELECT metric_name, {', '.join(COLUMNS)} FROM metrics "
        f"WHERE time_unix_nano >= {span[0]} AND time_unix_nano < {span[1]}",
    )
    assert _rows(theirs) == _rows(their_sql) and _rows(theirs) != mine
    assert len(mine) == len(_rows(theirs)) == 890
    svc.shutdown()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=60))
def test_a_file_not_sorted_by_name_reads_the_same_rows(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    # files the flusher writes are sorted by name (one range per name, sliced); an
    # imported file need not be (its rows are filtered): both give each name's rows
    path = tmp_path_factory.mktemp("unsorted") / "f.parquet"
    table = pa.table({"metric_name": names, "value": [float(i) for i in range(len(names))]})
    pq.write_table(table, path, row_group_size=7)
    got = _decode(str(path), ["a", "b", "c"], ("value",))
    for name in ("a", "b", "c"):
        expected = [float(i) for i, n in enumerate(names) if n == name]
        assert got[name].column("value").to_pylist() == expected


@settings(max_examples=80, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 40)), min_size=1, max_size=30),
    scale=st.sampled_from([1, 150]),
    nulls=st.booleans(),
)
def test_kept_slices_are_packed_and_unpacked_to_the_same_rows(
    runs: list[tuple[int, int]], scale: int, nulls: bool
) -> None:
    # series ids and start times repeat over a series' points, flags are mostly 0,
    # every row of a histogram has the same bounds: packed, they take less room
    ids = [v for v, n in runs for _ in range(n * scale)]
    rows = len(ids)
    table = pa.table(
        {
            "series_id": pa.array(ids, pa.int64()),
            "start_time_unix_nano": pa.array(
                [None if nulls and v < 0 else v * 1000 for v in ids], pa.int64()
            ),
            "flags": pa.array([0] * rows, pa.int64()),
            "value": pa.array([float(i) for i in range(rows)]),
            "explicit_bounds": pa.array([[0.1, 1.0, 10.0]] * rows, pa.list_(pa.float64())),
            "timestamp": pa.array(ids, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        }
    )
    packed = _pack(table)
    assert packed.nbytes <= table.nbytes
    if rows >= PACK_MIN_ROWS:
        assert packed.nbytes * 2 <= table.nbytes  # the bounds and flags alone see to it
    assert _unpack(packed).equals(table)
    slices = FileSlices(table.nbytes)  # over half full with it: kept packed
    slices.put(("f", "m", ("x",)), table)
    assert slices.bytes == packed.nbytes
    got = slices.get(("f", "m", ("x",)))
    assert got is not None and got.equals(table)
