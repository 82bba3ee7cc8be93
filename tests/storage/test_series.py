"""The series index: one row per series of a table's files and unflushed batches.

Checked against the same rows grouped independently (pyarrow's group_by), across
flushes, snapshot batches, lost summaries, a restart from the checkpoint, and
files leaving the table.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal import arrays
from shoal.schema import METRICS
from shoal.storage import layout, series_rows
from shoal.storage import series as series_mod
from shoal.storage.commit import Commit
from shoal.storage.reader import TenantReader
from shoal.storage.store import TableStore
from shoal.storage.table import Table
from shoal.storage.unflushed import LsnBatch

from .helpers import BASE_US, metrics_table

HOUR_US = 3_600_000_000


def _rows(rng: random.Random, n: int, start_us: int, span_us: int, n_series: int) -> pa.Table:
    sids = [rng.randrange(n_series) for _ in range(n)]
    times = [start_us + rng.randrange(span_us) for _ in range(n)]
    table = metrics_table(times, sids, [f"m{s % 3}" for s in sids])
    # each row carries its own time as a label, so "the earliest row's labels" is checkable
    attrs = pa.array(
        [[("t", str(t)), ("s", str(s))] for t, s in zip(times, sids, strict=True)],
        pa.map_(pa.string(), pa.string()),
    )
    return table.set_column(table.schema.get_field_index("attributes"), "attributes", attrs)


def _flushed(
    store: TableStore, seed: int, files: int, rows: int, tenant: str = "t"
) -> tuple[Table, list[pa.Table]]:
    """``files`` flushes of ``rows`` rows over 30 series, an hour apart, into a new table."""
    rng = random.Random(seed)
    table = store.open(tenant, "metrics", METRICS)
    parts = [_rows(rng, rows, BASE_US + i * HOUR_US, HOUR_US, 30) for i in range(files)]
    for lsn, part in enumerate(parts, start=1):
        table.flush(part, lsn)
    return table, parts


def _expected(rows: pa.Table) -> dict[int, tuple[int, int, str]]:
    """series -> (first ns, last ns, the earliest row's "t" label), grouped independently."""
    grouped = rows.group_by("series_id").aggregate(
        [("time_unix_nano", "min"), ("time_unix_nano", "max")]
    )
    out = {}
    for sid, lo, hi in zip(*(grouped.column(i).to_pylist() for i in range(3)), strict=True):
        out[sid] = (lo, hi, str(lo // 1000))
    return out


def _actual(index: pa.Table) -> dict[int, tuple[int, int, str]]:
    out = {}
    for row in index.to_pylist():
        assert row["series_id"] not in out, "a series listed twice"
        labels = dict(row["attributes"])
        assert labels["s"] == str(row["series_id"])
        out[row["series_id"]] = (row["first_ns"], row["last_ns"], labels["t"])
    return out


@pytest.mark.parametrize("group_rows", [1, 100_000])
def test_the_index_matches_the_rows_over_flushes_and_batches(
    store: TableStore, group_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether new files' summaries join the index one by one or all together."""
    monkeypatch.setattr(series_mod, "_GROUP_ROWS", group_rows)
    rng = random.Random(7)
    table = store.open("t", "metrics", METRICS)
    parts = [_rows(rng, 400, BASE_US + i * HOUR_US // 2, HOUR_US, 60) for i in range(4)]
    for lsn, part in enumerate(parts[:3], start=1):
        table.flush(part, lsn)
    # unflushed rows, in two batches above the committed LSN (one earlier than any file)
    early = _rows(rng, 50, BASE_US - HOUR_US, HOUR_US // 4, 80)
    batches = [
        LsnBatch(4, parts[3].combine_chunks().to_batches()[0]),
        LsnBatch(5, early.to_batches()[0]),
    ]
    index = table.series(table.snapshot(), batches)
    assert _actual(index) == _expected(pa.concat_tables([*parts, early]))
    files = list((table.path / layout.SERIES_DIR).glob("hour=*.parquet"))
    assert len(files) == len(table.snapshot().files) >= 3

    # a time range keeps the series seen in it (both ends included)
    lo, hi = BASE_US * 1000 + HOUR_US * 250, BASE_US * 1000 + HOUR_US * 500
    ranged = _actual(table.series(table.snapshot(), batches, lo, hi))
    assert ranged == {s: v for s, v in _actual(index).items() if v[0] <= hi and v[1] >= lo}
    assert 0 < len(ranged) < len(index)  # the early-only series are outside


def test_summaries_and_checkpoints_carry_no_statistics_and_dictionaries_only_for_text(
    tmp_path: Path,
) -> None:
    """They are always read whole: statistics would be written for nothing, and
    dictionaries of numbers cost time without making the file smaller."""
    rng = random.Random(10)
    table = TableStore(tmp_path / "data").open("t", "metrics", METRICS)
    for lsn in range(1, series_mod.CHECKPOINT_EVERY + 1):
        table.flush(_rows(rng, 100, BASE_US + lsn * HOUR_US, HOUR_US, 30), lsn)
    table.series(table.snapshot())
    table.settle()  # the checkpoint is written beside the read
    written = [*(table.path / layout.SERIES_DIR).glob("hour=*.parquet")]
    written.append(table.path / series_mod.CHECKPOINT)
    for path in written:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_rows > 0
        for i in range(meta.num_columns):
            column = meta.row_group(0).column(i)
            assert not column.is_stats_set, (path.name, column.path_in_schema)
            text = column.physical_type == "BYTE_ARRAY"
            assert column.has_dictionary_page == text, (path.name, column.path_in_schema)


def test_summaries_and_a_checkpoint_written_with_statistics_are_read_as_they_are(
    tmp_path: Path,
) -> None:
    """Files written before statistics were left out (pyarrow's defaults) still serve."""
    rng = random.Random(11)
    table = TableStore(tmp_path / "data").open("t", "metrics", METRICS)
    n = series_mod.CHECKPOINT_EVERY
    parts = [_rows(rng, 100, BASE_US + i * HOUR_US, HOUR_US, 30) for i in range(n + 2)]
    for lsn, part in enumerate(parts[:n], start=1):
        table.flush(part, lsn)
    table.series(table.snapshot())
    table.settle()
    for lsn, part in enumerate(parts[n:], start=n + 1):  # beyond the checkpoint
        table.flush(part, lsn)
    table.series(table.snapshot())
    old_style = [*(table.path / layout.SERIES_DIR).glob("hour=*.parquet")]
    old_style.append(table.path / series_mod.CHECKPOINT)
    for path in old_style:
        pq.write_table(pq.read_table(path), path, compression="zstd")
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).is_stats_set
    written = {path: path.stat().st_mtime_ns for path in old_style}

    fresh = TableStore(tmp_path / "data").open("t", "metrics", create=False)
    assert _actual(fresh.series(fresh.snapshot())) == _expected(pa.concat_tables(parts))
    assert {path: path.stat().st_mtime_ns for path in old_style} == written  # none rebuilt


def test_lost_or_damaged_summaries_are_rebuilt_from_the_data(tmp_path: Path) -> None:
    rng = random.Random(8)
    store = TableStore(tmp_path / "data")
    table = store.open("t", "metrics", METRICS)
    parts = [_rows(rng, 300, BASE_US + i * HOUR_US, HOUR_US, 40) for i in range(3)]
    for lsn, part in enumerate(parts, start=1):
        table.flush(part, lsn)
    summaries = sorted((table.path / layout.SERIES_DIR).glob("hour=*.parquet"))
    summaries[0].unlink()
    summaries[1].write_bytes(b"not parquet")
    fresh = TableStore(tmp_path / "data").open("t", "metrics", create=False)
    assert _actual(fresh.series(fresh.snapshot())) == _expected(pa.concat_tables(parts))
    assert summaries[0].exists()  # written again
    assert summaries[1].read_bytes()[:4] == b"PAR1"


def test_a_restart_reads_the_checkpoint_not_every_summary(tmp_path: Path) -> None:
    table, parts = _flushed(TableStore(tmp_path / "data"), 9, series_mod.CHECKPOINT_EVERY, 100)
    table.series(table.snapshot())
    table.settle()
    assert (table.path / series_mod.CHECKPOINT).exists()
    for summary in (table.path / layout.SERIES_DIR).glob("hour=*.parquet"):
        summary.unlink()  # the checkpoint covers every file: none is read again
    fresh = TableStore(tmp_path / "data").open("t", "metrics", create=False)
    assert _actual(fresh.series(fresh.snapshot())) == _expected(pa.concat_tables(parts))
    assert not list((table.path / layout.SERIES_DIR).glob("hour=*.parquet"))


def test_a_checkpoint_keeps_the_index_encoded_and_one_written_plain_still_reads(
    tmp_path: Path,
) -> None:
    """The checkpoint holds the strings as the index does (dictionaries, read back without
    decoding); one an earlier version wrote with plain strings reads the same."""
    table, parts = _flushed(TableStore(tmp_path / "data"), 13, series_mod.CHECKPOINT_EVERY, 100)
    table.series(table.snapshot())
    table.settle()
    path = table.path / series_mod.CHECKPOINT
    written = pq.read_table(path)
    assert pa.types.is_dictionary(written.schema.field("metric_name").type)
    assert pa.types.is_dictionary(written.schema.field("attributes").type.key_type)
    for data in table.path.glob("hour=*/*.parquet"):
        data.unlink()  # neither summaries nor data files: the checkpoint alone answers
    for summary in (table.path / layout.SERIES_DIR).glob("hour=*.parquet"):
        summary.unlink()
    expected = _expected(pa.concat_tables(parts))
    for check in ("as written", "plain"):
        if check == "plain":
            schema = series_rows.index_schema(METRICS).with_metadata(written.schema.metadata)
            pq.write_table(written.cast(schema), path)
        fresh = TableStore(tmp_path / "data").open("t", "metrics", create=False)
        assert _actual(fresh.series(fresh.snapshot())) == expected, check


def test_series_whose_rows_left_the_table_leave_the_index(store: TableStore) -> None:
    rng = random.Random(10)
    table = store.open("t", "metrics", METRICS)
    old = _rows(rng, 200, BASE_US, HOUR_US, 20)
    new = _rows(rng, 200, BASE_US + 5 * HOUR_US, HOUR_US, 20)
    new = new.set_column(  # other series than the old ones
        new.schema.get_field_index("series_id"), "series_id", pc.add(new.column("series_id"), 100)
    )
    new = new.set_column(
        new.schema.get_field_index("attributes"),
        "attributes",
        pa.array(
            [
                [("t", str(t // 1000)), ("s", str(s))]
                for t, s in zip(
                    new.column("time_unix_nano").to_pylist(),
                    new.column("series_id").to_pylist(),
                    strict=True,
                )
            ],
            pa.map_(pa.string(), pa.string()),
        ),
    )
    table.flush(old, 1)
    table.flush(new, 2)
    assert len(table.series(table.snapshot())) == 40
    gone = [
        os.path.relpath(f.path, table.path)
        for f in table.snapshot().files
        if f.max_time_us < BASE_US + 5 * HOUR_US
    ]
    table.commit(Commit(operation="DELETE", removes=tuple(gone)))
    assert _actual(table.series(table.snapshot())) == _expected(new)
    # vacuum deletes the summaries of the removed files, not the others
    series_dir = table.path / layout.SERIES_DIR
    kept = [layout.series_path(os.path.relpath(f.path, table.path)) for f in table.snapshot().files]
    deleted = table.vacuum(0)
    assert sorted(r for r in deleted if r.startswith(layout.SERIES_DIR)) == sorted(
        layout.series_path(rel) for rel in gone
    )
    assert all((table.path / rel).exists() for rel in kept)
    assert not any((table.path / layout.series_path(rel)).exists() for rel in gone)
    assert len(list(series_dir.glob("hour=*.parquet"))) == len(kept)


def test_tables_without_an_index_say_so(store: TableStore) -> None:
    from shoal.errors import StorageError
    from shoal.schema import LOGS

    logs = store.open("t", "logs", LOGS)
    with pytest.raises(StorageError, match="no series index"):
        logs.series(logs.snapshot())


_ENTRIES = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=40
)


@given(entries=_ENTRIES, grouped=st.booleans())
def test_reduce_keeps_the_earliest_row_and_the_latest_time_per_key(
    entries: list[tuple[int, int, int]], grouped: bool
) -> None:
    """One row per key, in key order: the columns of its earliest row (the first of
    equals), the earliest first time and the latest last time; the same whether the
    rows come grouped by key and time (as a flushed file's do) or in any order."""
    if grouped:
        entries = sorted(entries, key=lambda e: (e[0], e[1]))
    key, first, last = (list(column) for column in zip(*entries, strict=True))
    table = pa.table(
        {
            "series_id": pa.array(key, pa.int64()),
            "row": pa.array(range(len(entries)), pa.int64()),
            series_rows.FIRST: pa.array(first, pa.int64()),
            series_rows.LAST: pa.array(last, pa.int64()),
        }
    )
    expected: dict[int, dict[str, int]] = {}
    for row, (k, f, la) in enumerate(entries):
        seen = expected.get(k)
        if seen is None or f < seen[series_rows.FIRST]:
            expected[k] = {
                "series_id": k,
                "row": row,
                series_rows.FIRST: f,
                series_rows.LAST: max(la, seen[series_rows.LAST] if seen else la),
            }
        else:
            seen[series_rows.LAST] = max(seen[series_rows.LAST], la)
    out = series_rows.reduce(table, "series_id")
    assert out.schema == table.schema
    assert out.to_pylist() == [expected[k] for k in sorted(expected)]


def test_a_server_table_merges_its_flushes_into_the_index_before_a_query_asks(
    tmp_path: Path,
) -> None:
    """In the server (a table opened for background work) each flush's series join the
    index in a thread of their own: the next read finds them merged."""
    table, parts = _flushed(TableStore(tmp_path / "data", background=True), 12, 3, 200)
    table.settle()
    for summary in (table.path / layout.SERIES_DIR).glob("hour=*.parquet"):
        summary.unlink()  # merged already: none is read again
    assert _actual(table.series(table.snapshot())) == _expected(pa.concat_tables(parts))
    assert not list((table.path / layout.SERIES_DIR).glob("hour=*.parquet"))


def test_warm_reads_every_tenants_index_so_no_query_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``warm`` (a start), the index answers without reading a file: every data
    file, summary and checkpoint deleted, the series are still there. A tenant whose
    index cannot be read is logged and the others are warmed."""
    store = TableStore(tmp_path / "data")
    parts = {tenant: _flushed(store, 12, 3, 100, tenant)[1] for tenant in ("a", "b", "c")}
    fresh = TableStore(tmp_path / "data")
    reader = TenantReader(fresh, None)
    broken = fresh.open("c", "metrics", create=False)
    for data in broken.path.rglob("*.parquet"):
        data.unlink()  # tenant c's index cannot be read
    with caplog.at_level(logging.INFO, logger="shoal.storage.reader"):
        TenantReader(TableStore(tmp_path / "data"), None).warm(stopping=lambda: True)
        assert "series index" not in caplog.text  # a stopping server reads none
        reader.warm()
    assert "could not read the series index of c/metrics" in caplog.text
    assert "series index of a/metrics read: 30 series" in caplog.text
    for data in (tmp_path / "data").rglob("*.parquet"):
        data.unlink()
    for tenant in ("a", "b"):
        found = reader.series(tenant, "metrics", 0, 2**63 - 1)
        assert _actual(found) == _expected(pa.concat_tables(parts[tenant]))
    with pytest.raises(FileNotFoundError):  # not warmed: the files were needed
        reader.series("c", "metrics", 0, 2**63 - 1)


@given(
    seed=st.integers(0, 10_000),
    known=st.integers(1, 40),
    new_rows=st.integers(1, 60),
    spread=st.sampled_from([0, HOUR_US // 4, HOUR_US]),
    held=st.booleans(),
    by_search=st.booleans(),
)
def test_summarizing_rows_onto_the_index_equals_merging_their_summary(
    seed: int, known: int, new_rows: int, spread: int, held: bool, by_search: bool
) -> None:
    """Rows of series the index has, later than their first time (only last times move),
    and rows that bring a new series or an earlier row of a known one (their labels come
    in): the same index either way, as the index holds it or plain, and with the rows'
    keys found by a binary search each or as many rows' keys are (``arrays.find``)."""
    rng = random.Random(seed)
    spec, schema = METRICS, series_rows.index_schema(METRICS)
    base = series_rows.summarize(_rows(rng, 80, BASE_US, HOUR_US, known), spec, schema)
    if held:
        base = series_rows.hold(base)
    # from a little before the base's rows (an earlier row, sometimes) to well after it
    rows = _rows(rng, new_rows, BASE_US + HOUR_US - spread, HOUR_US, known + rng.randrange(3))
    expected = series_rows.overlay(base, series_rows.summarize(rows, spec, schema), "series_id")
    with mock.patch.object(arrays, "_FEW", 1 << 30 if by_search else 0):
        found = series_rows.summarize_onto(base, rows, spec, schema)
    assert found.to_pylist() == expected.to_pylist()
    assert found.schema == expected.schema


@given(
    seed=st.integers(0, 10_000),
    known=st.integers(1, 40),
    summaries=st.lists(
        st.tuples(
            st.integers(1, 40), st.sampled_from([0, HOUR_US // 4, HOUR_US]), st.integers(0, 3)
        ),
        max_size=5,
    ),
    held=st.booleans(),
)
def test_summaries_merged_together_or_one_by_one_make_the_same_index(
    seed: int, known: int, summaries: list[tuple[int, int, int]], held: bool
) -> None:
    """Summaries that only move last times (merged one at a time) among summaries that
    bring series or earlier rows (reduced together): as if all were reduced at once."""
    rng = random.Random(seed)
    spec, schema = METRICS, series_rows.index_schema(METRICS)
    base = series_rows.summarize(_rows(rng, 80, BASE_US, HOUR_US, known), spec, schema)
    if held:
        base = series_rows.hold(base)
    parts = [
        series_rows.summarize(
            _rows(rng, rows, BASE_US + HOUR_US - spread, HOUR_US, known + more), spec, schema
        )
        for rows, spread, more in summaries
    ]
    found = series_rows.overlay_all(base, parts, "series_id")
    everything = pa.concat_tables([base.cast(schema), *parts])
    expected = series_rows.reduce(everything, "series_id")
    assert series_rows.hold(found).to_pylist() == series_rows.hold(expected).to_pylist()


@pytest.mark.parametrize("by_search", [False, True])
def test_an_earlier_row_among_keys_out_of_order_is_told(by_search: bool) -> None:
    """Each key found keeps its own first and last times, however the keys are found:
    series 2 has a row before its first time (the index must take its labels, so no
    quick merge), series 1 only moves on."""
    first, last = series_rows.FIRST, series_rows.LAST
    base = pa.table({"series_id": [1, 2], first: [10, 100], last: [20, 110]})
    limit = 1 << 30 if by_search else 0
    with mock.patch.object(arrays, "_FEW", limit):
        earlier = pa.table({"series_id": [2, 1], first: [50, 150], last: [50, 150]})
        assert series_rows.later_only(base, earlier, "series_id") is None
        later = pa.table({"series_id": [2, 1, 2], first: [300, 150, 120], last: [300, 150, 120]})
        moved = series_rows.later_only(base, later, "series_id")
    assert moved is not None
    assert moved.column(last).to_pylist() == [150, 300]
    assert moved.column(first).to_pylist() == [10, 100]
