"""The snapshot: LSN order, atomic take, drop after commit, stats."""

from __future__ import annotations

import pyarrow as pa

from shoal.storage.unflushed import UnflushedRows


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + n), pa.int64())})


def test_add_take_drop() -> None:
    snap = UnflushedRows()
    snap.add_many([(1, ("a", "metrics", _rows(3))), (2, ("a", "logs", _rows(2)))])
    snap.add("b", "metrics", 3, _rows(4))
    assert snap.last_lsn() == 3
    assert snap.rows == 9 and snap.bytes > 0
    assert {t: [b.lsn for b in bs] for t, bs in snap.batches("a").items()} == {
        "metrics": [1],
        "logs": [2],
    }
    lsn, parts = snap.take()
    assert lsn == 3 and set(parts) == {("a", "metrics"), ("a", "logs"), ("b", "metrics")}
    snap.add("a", "metrics", 4, _rows(5, 100))  # arrives while the flush runs
    assert snap.drop_through("a", "metrics", lsn) == 3
    assert [b.lsn for b in snap.batches("a")["metrics"]] == [4]
    assert snap.drop_through("a", "logs", lsn) == 2
    assert snap.drop_through("b", "metrics", lsn) == 4
    assert snap.rows == 5
    assert snap.tenants() == ["a"]
    stats = snap.stats()
    assert stats.rows == 5 and stats.batches == 1 and stats.last_lsn == 4
    assert stats.oldest_age_s >= 0


def test_note_lsn_and_empty_stats() -> None:
    snap = UnflushedRows()
    snap.note_lsn(7)
    assert snap.last_lsn() == 7
    assert snap.take() == (7, {})
    assert snap.oldest_age_s() == 0.0
    assert snap.batches("nobody") == {}


def test_given_sizes_count_instead_of_buffer_sizes() -> None:
    """A record's size, when given, is what it counts, shared out over its batches by rows
    and given back whole when it is dropped."""
    snap = UnflushedRows()
    two_batches = pa.Table.from_batches(_rows(6).to_batches() + _rows(2).to_batches())
    snap.add_many(
        [(1, ("a", "metrics", two_batches)), (2, ("a", "metrics", _rows(3)))], [800, None]
    )
    assert snap.bytes == 800 + _rows(3).get_total_buffer_size()
    snap.drop_through("a", "metrics", 1)
    assert snap.bytes == _rows(3).get_total_buffer_size() and snap.rows == 3


def test_a_take_up_to_a_size_cuts_at_the_lsn_that_reaches_it() -> None:
    """Sizes count over every table in LSN order, and a record is never split: its rows
    in every table go with it."""
    snap = UnflushedRows()
    snap.add_many(
        [
            (1, ("a", "metrics", _rows(3))),
            (2, ("a", "logs", _rows(2))),
            (2, ("b", "metrics", _rows(2))),  # one LSN, two tables
            (3, ("a", "metrics", _rows(1))),
            (4, ("a", "logs", _rows(1))),
        ],
        [100, 50, 60, 100, 100],
    )
    assert snap.take(1000) == snap.take()  # holds less: everything
    lsn, parts = snap.take(100)  # reached by the first record
    assert lsn == 1 and {k: [b.lsn for b in v] for k, v in parts.items()} == {("a", "metrics"): [1]}
    lsn, parts = snap.take(150)  # 100 + 110 at LSN 2: both of its tables
    assert lsn == 2 and {k: [b.lsn for b in v] for k, v in parts.items()} == {
        ("a", "metrics"): [1],
        ("a", "logs"): [2],
        ("b", "metrics"): [2],
    }
    lsn, parts = snap.take(211)
    assert lsn == 3 and [b.lsn for b in parts[("a", "metrics")]] == [1, 3]
    assert [b.lsn for b in parts[("a", "logs")]] == [2]
    assert snap.rows == 9  # taking drops nothing
