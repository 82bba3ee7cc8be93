"""The series indexes' memory bound (``series_index_bytes``): filled past it, the indexes
hold no more than it, and every range still gets exactly the series seen in it, from the
index where it is exact and from the files' summaries where the bound dropped series."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from shoal.schema import METRICS
from shoal.storage.series_budget import SeriesBudget, evict
from shoal.storage.store import TableStore
from shoal.storage.unflushed import LsnBatch

from .helpers import BASE_US
from .test_series import HOUR_US, _actual, _expected, _rows

PARTS = 6
SERIES_PER_PART = 40


def _part(rng: random.Random, i: int) -> pa.Table:
    """Rows of part ``i``: its own series (the later a part, the later its series were
    seen), over one hour of its own."""
    rows = _rows(rng, 300, BASE_US + i * HOUR_US, HOUR_US, SERIES_PER_PART)
    sids = pa.array([s + i * SERIES_PER_PART for s in rows.column("series_id").to_pylist()])
    times = rows.column("time_unix_nano").to_pylist()
    attrs = pa.array(
        [
            [("t", str(t // 1000)), ("s", str(s))]
            for t, s in zip(times, sids.to_pylist(), strict=True)
        ],
        pa.map_(pa.string(), pa.string()),
    )
    rows = rows.set_column(rows.schema.get_field_index("series_id"), "series_id", sids)
    return rows.set_column(rows.schema.get_field_index("attributes"), "attributes", attrs)


def _full_size(tmp_path: Path, parts: list[pa.Table]) -> int:
    store = TableStore(tmp_path / "unbounded")
    table = store.open("t", "metrics", METRICS)
    for lsn, part in enumerate(parts, start=1):
        table.flush(part, lsn)
    table.series(table.snapshot())
    return store.series_budget.stats()[0]


def _in_range(expected: dict[int, tuple[int, int, str]], lo: int | None, hi: int | None) -> dict:
    return {
        s: v
        for s, v in expected.items()
        if (hi is None or v[0] <= hi) and (lo is None or v[1] >= lo)
    }


def test_the_indexes_stay_under_the_bound_and_answer_every_range_exactly(
    tmp_path: Path,
) -> None:
    rng = random.Random(5)
    parts = [_part(rng, i) for i in range(PARTS + 1)]
    full = _full_size(tmp_path, parts[:PARTS])
    assert full > 0
    bound = full // 2
    store = TableStore(tmp_path / "data", series_index_bytes=bound)
    table = store.open("t", "metrics", METRICS)
    for lsn, part in enumerate(parts[:PARTS], start=1):
        table.flush(part, lsn)
        table.series(table.snapshot())  # read after every flush: the index grows past the bound
        held, _ = store.series_budget.stats()
        assert held <= bound
    # the last part unflushed, as batches above the committed LSN
    batches = [LsnBatch(PARTS + 1, parts[PARTS].combine_chunks().to_batches()[0])]
    everything = _actual(table.series(table.snapshot(), batches))
    held, evicted = store.series_budget.stats()
    assert evicted > 0 and held <= bound
    expected = _expected(pa.concat_tables(parts))
    assert everything == expected
    base = BASE_US * 1000
    for lo_h, hi_h in ((0, 1), (1, 3), (2.5, 4), (5, 8), (6, 7)):
        lo, hi = base + int(lo_h * HOUR_US * 1000), base + int(hi_h * HOUR_US * 1000)
        ranged = _actual(table.series(table.snapshot(), batches, lo, hi))
        assert ranged == _in_range(expected, lo, hi), (lo_h, hi_h)
        assert store.series_budget.stats()[0] <= bound

    # a restart from the checkpoint keeps the floor: old ranges still find their series
    fresh = TableStore(tmp_path / "data", series_index_bytes=bound)
    reopened = fresh.open("t", "metrics", create=False)
    lo, hi = base, base + HOUR_US * 1000
    assert _actual(reopened.series(reopened.snapshot(), batches, lo, hi)) == _in_range(
        expected, lo, hi
    )
    assert fresh.series_budget.stats()[0] <= bound


def test_tables_share_one_budget(tmp_path: Path) -> None:
    rng = random.Random(6)
    parts = [_part(rng, i) for i in range(3)]
    full = _full_size(tmp_path, parts)
    store = TableStore(tmp_path / "data", series_index_bytes=full)  # room for one tenant's
    for tenant in ("a", "b"):
        table = store.open(tenant, "metrics", METRICS)
        for lsn, part in enumerate(parts, start=1):
            table.flush(part, lsn)
        assert _actual(table.series(table.snapshot())) == _expected(pa.concat_tables(parts))
    held, evicted = store.series_budget.stats()
    assert held <= full and evicted > 0


def test_evict_keeps_the_series_seen_last_in_key_order() -> None:
    last = [50, 10, 40, 20, 30, 60]
    table = pa.table(
        {"series_id": pa.array(range(6), pa.int64()), "last_ns": pa.array(last, pa.int64())}
    )
    kept, floor = evict(table, table.get_total_buffer_size() // 2)
    ids = kept.column("series_id").to_pylist()
    assert ids == sorted(ids) and 0 < len(ids) < 6
    assert min(last[i] for i in ids) > floor == max(v for i, v in enumerate(last) if i not in ids)
    assert kept.get_total_buffer_size() <= table.get_total_buffer_size() // 2
    assert evict(table, table.get_total_buffer_size()) == (table, None)


@pytest.mark.parametrize("max_bytes", [0, 100])
def test_a_budget_gives_each_index_what_the_others_leave(max_bytes: int) -> None:
    budget = SeriesBudget(max_bytes)
    budget.hold("a", 30)
    assert budget.room("b") == (None if max_bytes == 0 else 70)
    assert budget.room("a") == (None if max_bytes == 0 else 100)
