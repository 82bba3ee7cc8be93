"""The snapshot batch coalescer keeps every row, in order, with few batches."""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.sql.sessions import SMALL_LOOSE_ROWS, few_batches
from shoal.storage.runs import MAX_BATCH_ROWS, BatchCoalescer


def _batch(lsn: int, rows: int) -> pa.RecordBatch:
    schema = pa.schema([("lsn", pa.int64()), ("i", pa.int64())])
    return pa.RecordBatch.from_pydict({"lsn": [lsn] * rows, "i": list(range(rows))}, schema)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=40), min_size=0, max_size=300),
    rows=st.integers(min_value=0, max_value=3),
    drop=st.integers(min_value=0, max_value=100),
)
def test_coalesced_rows_equal_the_input_across_queries(
    gaps: list[int], rows: int, drop: int
) -> None:
    coalescer = BatchCoalescer()
    lsns, lsn = [], 0
    for gap in gaps:
        lsn += gap
        lsns.append(lsn)
    batches = [_batch(x, rows + x % 2) for x in lsns]

    def rows_of(items: list[pa.RecordBatch]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for b in items:
            out.extend(zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True))
        return out

    # the same rows (a query reads them as a set: the order is not kept)
    for _ in range(2):  # the second call is served from the cache
        assert sorted(rows_of(coalescer.coalesce("t", "m", lsns, batches))) == sorted(
            rows_of(batches)
        )
    # the flusher drops a prefix; the remainder is still exact
    kept = [(x, b) for x, b in zip(lsns, batches, strict=True) if x > drop]
    out = coalescer.coalesce("t", "m", [x for x, _ in kept], [b for _, b in kept])
    assert sorted(rows_of(out)) == sorted(rows_of([b for _, b in kept]))


def test_many_batches_become_few() -> None:
    coalescer = BatchCoalescer()
    lsns = list(range(1, 5001))
    batches = [_batch(x, 1) for x in lsns]
    out = coalescer.coalesce("t", "m", lsns, batches)
    assert len(out) < 60
    assert sum(b.num_rows for b in out) == 5000
    before = coalescer.combined
    coalescer.coalesce("t", "m", lsns, batches)
    assert coalescer.combined == before  # nothing recombined for an unchanged snapshot


def test_runs_become_compact_batches_of_bounded_size() -> None:
    """Huge batches and slices of one table are what DataFusion's map lookups handle
    worst; combined runs are copies of at most MAX_BATCH_ROWS rows."""
    per = 1000
    schema = pa.schema([("m", pa.map_(pa.string(), pa.string()))])
    whole = pa.Table.from_pydict({"m": [[("host", f"h{i % 7}")] for i in range(300 * per)]}, schema)
    batches = whole.to_batches(max_chunksize=per)  # slices sharing whole's buffers
    lsns = list(range(1, len(batches) + 1))
    out = BatchCoalescer().coalesce("t", "m", lsns, batches)
    assert sum(b.num_rows for b in out) == whole.num_rows
    assert sorted(pa.Table.from_batches(out).column("m").to_pylist(), key=str) == sorted(
        whole.column("m").to_pylist(), key=str
    )
    combined = [b for b in out if b.num_rows > per]
    assert combined, "complete runs were combined"
    for b in combined:
        assert b.num_rows <= MAX_BATCH_ROWS
        # its own buffers: about its share of the data, not the whole table's
        assert b.get_total_buffer_size() < 2 * whole.nbytes * b.num_rows / whole.num_rows


def test_levels_are_reused_while_the_batches_stay_and_forgotten_after_a_flush() -> None:
    coalescer = BatchCoalescer()
    lsns = list(range(1, 300))
    batches = [_batch(x, 2) for x in lsns]
    levels, loose = coalescer.levels("t", "m", lsns, batches)
    again, loose_again = coalescer.levels("t", "m", lsns, batches)
    assert loose_again is loose
    assert all(a is b for a, b in zip(again, levels, strict=True))
    rows = sum(b.num_rows for level in levels for b in level.batches)
    assert rows + sum(b.num_rows for b in loose.batches) == 2 * len(lsns)

    grown = [*lsns, 300]
    _, loose_grown = coalescer.levels("t", "m", grown, [*batches, _batch(300, 2)])
    assert loose_grown is not loose
    assert sum(b.num_rows for b in loose_grown.batches) > sum(b.num_rows for b in loose.batches)

    coalescer.forget("t", "m")
    _, after = coalescer.levels("t", "m", lsns[:1], batches[:1])
    assert after is not loose and after.batches == batches[:1]


def test_small_loose_batches_are_joined_into_one_and_large_ones_left_alone() -> None:
    small = [_batch(x, 3) for x in range(1, 16)]
    joined = few_batches(small)
    assert len(joined) == 1
    assert joined[0].to_pydict() == pa.Table.from_batches(small).to_pydict()
    assert few_batches(small[:1]) == small[:1]
    large = [_batch(1, SMALL_LOOSE_ROWS), _batch(2, 1)]
    assert few_batches(large) == large
    # batches whose schemas differ are imported as they are
    other = pa.RecordBatch.from_pydict({"lsn": [9], "j": [1]})
    assert few_batches([small[0], other]) == [small[0], other]


def test_a_query_over_many_small_snapshot_batches_sees_every_row() -> None:
    ctx = SessionContext()
    batches = [_batch(x, x % 3) for x in range(1, 40)]
    ctx.register_view("t", ctx.read_batches(few_batches(batches)))
    got = ctx.sql("SELECT count(*) AS n, sum(lsn) AS s FROM t").to_pydict()
    assert got == {
        "n": [sum(x % 3 for x in range(1, 40))],
        "s": [sum(x * (x % 3) for x in range(1, 40))],
    }
