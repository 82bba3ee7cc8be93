"""Series seen before: decoding with the cache gives exactly the rows decoding without it
gives, request after request, through hits, misses, refusals and the cache starting over."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest import remote_write
from shoal.errors import DecodeError
from shoal.promwrite import cached
from shoal.promwrite.decode import V1, V2, decode
from shoal.rows import known as known_module
from shoal.rows.known import KnownSeries, _Known

# a small pool, so that requests share series; some without a name, some with empty values
LABEL_SETS: list[dict[str, str]] = [
    {"__name__": "up", "job": "node", "instance": "h1:9100"},
    {"__name__": "up", "job": "node", "instance": "h2:9100"},
    {"__name__": "up", "job": "shop/api", "instance": "h1:9100"},
    {"__name__": "cpu_seconds_total", "job": "node", "instance": "h1:9100", "mode": "idle"},
    {"__name__": "cpu_seconds_total", "job": "node", "instance": "h1:9100", "mode": "user"},
    {"__name__": "temp", "room": "lab", "empty": ""},
    {"__name__": "temp", "room": "hall"},
    {"room": "lab"},
    {"__name__": "a_b", "c": "d", "e": "f", "g": "h"},
]
V2_META: list[dict[str, object]] = [
    {},
    {"type": 1, "help": "CPU time.", "unit": "seconds"},
    {"type": 2, "help": "Temperature."},
    {"type": 1, "created": 1_000},
]

requests = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, len(LABEL_SETS) - 1),
            st.lists(st.integers(1, 10**6), min_size=1, max_size=3),
            st.integers(0, len(V2_META) - 1),
        ),
        min_size=1,
        max_size=8,
    ),
    min_size=1,
    max_size=6,
)


def _body(series: list[tuple[int, list[int], int]], v2: bool) -> bytes:
    if v2:
        return remote_write.encode_v2(
            [
                (LABEL_SETS[s], [(t, float(t % 97)) for t in times], V2_META[m])
                for s, times, m in series
            ]
        )
    return remote_write.encode(
        [(LABEL_SETS[s], [(t, float(t % 97)) for t in times]) for s, times, _ in series]
    )


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema
    assert a.to_pylist() == b.to_pylist()


@contextlib.contextmanager
def _scanner(on: bool) -> Iterator[None]:
    """The C scanner in use (as built) or not (ptars reads cached series instead)."""
    built = cached.SCAN_V1
    cached.SCAN_V1 = built if on else None
    try:
        yield
    finally:
        cached.SCAN_V1 = built


@pytest.mark.parametrize("scan", [True, False], ids=["C scanner", "ptars"])
@settings(max_examples=150, deadline=None)
@given(sequence=requests, v2=st.booleans(), max_series=st.sampled_from([2, 4, 1000]))
def test_cached_rows_equal_rows_worked_out_afresh(
    scan: bool, sequence: list[list[tuple[int, list[int], int]]], v2: bool, max_series: int
) -> None:
    """Through the C scanner or ptars, a request of cached series gets the rows the full
    decoder gives."""
    with _scanner(scan):
        _check_cached_rows(sequence, v2, max_series)


def _check_cached_rows(
    sequence: list[list[tuple[int, list[int], int]]], v2: bool, max_series: int
) -> None:
    known = KnownSeries(max_series=max_series, max_bytes=1 << 30)
    message = V2 if v2 else V1
    for series in sequence:
        body = _body(series, v2)
        cached = decode(body, message, known)
        fresh = decode(body, message, None)
        _same(cached.result.table, fresh.result.table)
        assert cached.result.rejected == fresh.result.rejected
        assert cached.result.errors == fresh.result.errors
        assert (cached.samples, cached.exemplars) == (fresh.samples, fresh.exemplars)
        assert len(known) <= max(max_series, len({s for s, _, _ in series}) * len(V2_META))


def test_a_series_seen_before_is_not_worked_out_again() -> None:
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    first = _body([(0, [1], 0), (1, [1], 0), (3, [1], 0)], False)
    decode(first, V1, known)
    assert len(known) == 3
    # same series, other samples and order: nothing new
    decode(_body([(3, [2, 3], 0), (0, [2], 0)], False), V1, known)
    assert len(known) == 3 and known.restarts == 0
    # a new one is added beside them
    decode(_body([(0, [4], 0), (6, [4], 0)], False), V1, known)
    assert len(known) == 4
    # in 2.0 the metadata is part of what a series is
    decode(_body([(3, [5], 1), (3, [6], 0)], True), V2, known)
    assert len(known) == 6


def test_the_byte_bound_starts_the_cache_over() -> None:
    body = _body([(i, [1], 0) for i in range(len(LABEL_SETS))], False)
    one = KnownSeries(max_series=1000, max_bytes=1 << 30)
    decode(body, V1, one)
    size = one._known.nbytes if one._known is not None else 0
    known = KnownSeries(max_series=1000, max_bytes=size + 1, restart_every_s=0)
    decode(body, V1, known)
    other = _body([(2, [1], 0), (5, [2], 0)], True)  # 2.0 keys differ: more bytes
    _same(decode(other, V2, known).result.table, decode(other, V2, None).result.table)
    assert known.restarts == 1 and len(known) == 2


def test_a_refused_request_caches_nothing() -> None:
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    good = _body([(0, [1], 0)], False)
    decode(good, V1, known)
    twice = remote_write.field(  # one series holding the label "a" twice
        1,
        remote_write.field(1, remote_write.label("__name__", "m"))
        + remote_write.field(1, remote_write.label("a", "1"))
        + remote_write.field(1, remote_write.label("a", "2"))
        + remote_write.field(2, remote_write.sample(1, 1.0)),
    )
    for _ in range(2):  # refused the second time too: the first left nothing behind
        with pytest.raises(DecodeError, match="appears twice"):
            decode(good + twice, V1, known)
    assert len(known) == 1
    _same(decode(good, V1, known).result.table, decode(good, V1, None).result.table)


def test_label_bytes_that_run_together_alike_are_other_series() -> None:
    """The cache key of a 1.0 series is its label bytes; where each label ends is part
    of it. Here two series' labels are the same bytes end to end, cut apart elsewhere:
    ``x=v, y=w`` against ``x=""`` and a label that sets value ``v``, name ``y``, then
    value ``w`` (the last value counts, and an empty value is no label)."""
    f, name = remote_write.field, remote_write.field(1, remote_write.label("__name__", "m"))
    cut_one = [f(1, b"x") + f(2, b"v"), f(1, b"y") + f(2, b"w")]
    cut_two = [f(1, b"x"), f(2, b"v") + f(1, b"y") + f(2, b"w")]
    assert b"".join(cut_one) == b"".join(cut_two)
    one, two = (
        f(1, name + b"".join(f(1, label) for label in cut) + f(2, remote_write.sample(5, 1.0)))
        for cut in (cut_one, cut_two)
    )
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    for body, attributes in ((one, [("x", "v"), ("y", "w")]), (two, [("y", "w")])):
        rows = decode(body, V1, known).result.table
        _same(rows, decode(body, V1, None).result.table)
        assert rows.column("attributes").to_pylist() == [attributes]
    assert len(known) == 2


def test_requests_in_the_same_order_share_the_cached_rows() -> None:
    """A request that repeats an earlier one's series in the same order gets rows that
    are a slice of the cache: one chunk per column, as every decoded table has, equal to
    the rows worked out afresh."""
    series = [(i, [1], 0) for i in (0, 1, 3, 4)]
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    decode(_body(series, False), V1, known)
    assert known._known is not None
    cache = known._known.table
    again = _body([(s, [2], m) for s, _, m in series], False)
    rows = decode(again, V1, known).result.table
    _same(rows, decode(again, V1, None).result.table)
    assert all(column.num_chunks == 1 for column in rows.columns)
    shared = rows.column("attributes").chunk(0).buffers()[1]
    assert (
        shared is not None
        and shared.address == cache.column("attributes").chunk(0).buffers()[1].address
    )


def test_requests_cut_elsewhere_copy_the_cached_runs() -> None:
    """A request that holds the tail of an earlier order and then its head (a sender that
    cuts the same series into requests at shifting points) gets the two runs copied into
    one chunk per column."""
    series = [(i, [1], 0) for i in range(len(LABEL_SETS))]
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    decode(_body(series, False), V1, known)
    shifted = _body([(s, [2], m) for s, _, m in series[5:] + series[:3]], False)
    rows = decode(shifted, V1, known).result.table
    _same(rows, decode(shifted, V1, None).result.table)
    assert all(column.num_chunks == 1 for column in rows.columns)


def test_a_cache_of_chunks_taken_row_by_row_becomes_one_chunk() -> None:
    """Series that arrived in several requests leave the cache in chunks; requests whose
    rows are scattered over them, with no series added in between, copy them into one
    after a few, and get the same rows all along."""
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    for i in range(3):  # three requests of new series: three chunks
        decode(_body([(s, [1], 0) for s in range(3 * i, 3 * i + 3)], False), V1, known)
    generation = known._known
    assert generation is not None and generation.table.column(0).num_chunks == 3
    scattered = _body([(s, [2], 0) for s in range(8, -1, -1)], False)  # every row apart
    for taken in range(1, known_module._COMBINE_AFTER_TAKES + 1):
        assert generation.table.column(0).num_chunks == 3
        rows = decode(scattered, V1, known).result.table
        _same(rows, decode(scattered, V1, None).result.table)
        assert generation.takes_since_add == taken
    assert generation.table.column(0).num_chunks == 1
    in_order = _body([(s, [3], 0) for s in range(9)], False)
    _same(decode(in_order, V1, known).result.table, decode(in_order, V1, None).result.table)


def _generation(count: int) -> _Known:
    keys = [b"k%d" % i for i in range(count)]
    return _Known(pa.table({"metric_name": [f"m{i}" for i in range(count)]}), pa.array(keys))


# a request's keys: runs of rows (start, length) of a 300-row generation, and new keys
runs = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 299), st.integers(1, 120)),
        st.just((-1, 1)),  # a key the generation does not hold
    ),
    max_size=14,
)


@settings(max_examples=200, deadline=None)
@given(pieces=runs, added=st.integers(0, 3))
def test_runs_of_rows_are_found_as_looking_each_key_up_finds_them(
    pieces: list[tuple[int, int]], added: int
) -> None:
    """Following runs of consecutive rows (the lookup a sender that keeps its order gets)
    finds for every key the row a lookup key by key finds, wherever the runs break, end
    at the last row, or hold keys not yet known; also over a generation grown by chunks."""
    known = _generation(300 - 20 * added)
    for i in range(added):  # the last rows arrive in chunks, as later requests add them
        base = 300 - 20 * (added - i)
        keys = [b"k%d" % k for k in range(base, base + 20)]
        known.add(keys, pa.table({"metric_name": [f"m{k}" for k in range(base, base + 20)]}))
    wanted: list[bytes] = []
    for start, length in pieces:
        if start < 0:
            wanted.append(b"new%d" % len(wanted))
        else:
            wanted.extend(b"k%d" % k for k in range(start, min(start + length, 300)))
    by_key = {b"k%d" % row: row for row in range(300)}  # every row holds k<row>
    expected = [by_key.get(k, -1) for k in wanted]
    assert known.rows(pa.array(wanted, pa.binary())).tolist() == expected


def test_a_run_that_turns_to_other_rows_is_not_followed_past_the_turn() -> None:
    """Keys 0..49 then 100..149: the second half is not rows 50..99, which a run
    followed by position alone would give; nor is a key that only shares a prefix."""
    known = _generation(200)
    wanted = [b"k%d" % i for i in range(50)] + [b"k%d" % i for i in range(100, 150)]
    assert known.rows(pa.array(wanted)).tolist() == [*range(50), *range(100, 150)]
    assert known.rows(pa.array([b"k1", b"k2", b"k3x"])).tolist() == [1, 2, -1]


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("v2", [False, True])
def test_rows_keep_none_of_the_decoded_request_alive(
    v2: bool, scan: bool, decoder_output: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows share no buffer with the protobuf decoder's output. Those buffers are
    imported through Arrow's C interface, where one buffer still referenced keeps the whole
    decoded request alive: rows waiting in the snapshot for their flush would hold every
    request's labels and samples (the peers benchmark's peak RSS went from ~440 to
    ~590 MB when the value column was a view). A 1.0 request of cached series read by
    the C scanner meets no protobuf decoder at all."""
    if not scan:
        monkeypatch.setattr(cached, "SCAN_V1", None)
    known = KnownSeries(max_series=100, max_bytes=1 << 30)
    for times in ([1], [2, 3]):  # new series, then all of them cached
        decoder_output.clear()
        body = _body([(i, times, i % len(V2_META)) for i in (0, 1, 3, 4)], v2)
        rows = decode(body, V2 if v2 else V1, known).result.table
        assert rows.num_rows == 4 * len(times)
        scanned = scan and not v2 and times == [2, 3]
        assert bool(decoder_output.batches) != scanned
        assert decoder_output.shared(rows) == set()


def test_the_setting_bounds_the_bytes_a_cache_holds() -> None:
    """``series_cache_bytes`` (:meth:`KnownSeries.limit`): filled with ever new series,
    the cache never holds more than it, counting the index's Python objects too, and what
    it decodes stays what the full decoder gives."""
    known = KnownSeries(max_series=1_000_000, max_bytes=1 << 30)
    bound = 64 << 10
    known.limit(bound)
    for r in range(40):
        labels = [{"__name__": f"m{r}", "instance": f"host-{i}", "job": "j"} for i in range(50)]
        body = remote_write.encode([(ls, [(1_000 + r, 1.0)]) for ls in labels])
        _same(decode(body, V1, known).result.table, decode(body, V1, None).result.table)
        assert 0 < known.nbytes <= bound
        held = known._known
        assert held is not None
        arrow = held.table.get_total_buffer_size() + held.keys.nbytes
        assert known.nbytes >= arrow + len(held.index) * known_module.ENTRY_BYTES
        assert len(held.index) == held.table.num_rows
    assert known.unkept > 0  # it was full


def test_a_lower_bound_drops_a_cache_over_it() -> None:
    known = KnownSeries(max_series=1000, max_bytes=1 << 30)
    decode(_body([(i, [1], 0) for i in range(len(LABEL_SETS))], False), V1, known)
    held = known.nbytes
    known.limit(held)
    assert known.nbytes == held  # fits: kept
    known.limit(held - 1)
    assert known.nbytes == 0 and len(known) == 0


def test_the_server_bounds_both_codecs_caches() -> None:
    from shoal.ingest.decoding import limit_series_caches
    from shoal.otlp import scanned
    from shoal.promwrite import decode as promwrite

    before = promwrite.KNOWN.max_bytes, scanned.KNOWN.max_bytes
    try:
        limit_series_caches(12345)
        assert promwrite.KNOWN.max_bytes == scanned.KNOWN.max_bytes == 12345
    finally:
        promwrite.KNOWN.limit(before[0])
        scanned.KNOWN.limit(before[1])


def _distinct(start: int, count: int, t: int) -> bytes:
    labels = [
        {"__name__": "m", "instance": f"host-{i}", "job": "j"} for i in range(start, start + count)
    ]
    return remote_write.encode([(ls, [(t, 1.0)]) for ls in labels])


def test_a_full_cache_starts_over_no_more_often_than_its_interval() -> None:
    """Full, the cache hands new series back without keeping them until its interval has
    passed since it started (a generation let go too soon stays pinned by the rows sliced
    from it until their flush), then starts over; the rows are right all along."""
    now = [0.0]
    one = KnownSeries(max_series=1000, max_bytes=1 << 30)
    decode(_distinct(0, 20, 1), V1, one)
    bound = one.nbytes + 200  # room for no 21st series, and for 20 of longer names
    known = KnownSeries(max_series=1000, max_bytes=bound, restart_every_s=60, clock=lambda: now[0])
    decode(_distinct(0, 20, 1), V1, known)  # full now
    for body in (_distinct(20, 20, 2), _distinct(10, 20, 3), _distinct(0, 20, 4)):
        _same(decode(body, V1, known).result.table, decode(body, V1, None).result.table)
        assert known.restarts == 0 and len(known) == 20 and known.nbytes <= bound
    assert known.unkept == 30
    now[0] = 60.0
    body = _distinct(40, 20, 5)
    _same(decode(body, V1, known).result.table, decode(body, V1, None).result.table)
    assert known.restarts == 1 and len(known) == 20


def test_growing_the_cache_copies_nothing_the_handed_out_rows_pin() -> None:
    """Rows handed out are slices of the cache, kept by the unflushed rows until their
    flush: growing the cache must not copy it, or every copy stays alive beside it."""
    known = KnownSeries(max_series=100_000, max_bytes=1 << 30)
    decode(_distinct(0, 500, 0), V1, known)
    before = pa.total_allocated_bytes()
    handed = [decode(_distinct(500 * i, 500, 1), V1, known).result.table for i in range(1, 40)]
    grown = pa.total_allocated_bytes() - before
    held = known._known
    assert held is not None and len(handed) == 39
    cache = held.table.get_total_buffer_size()
    assert grown < 2 * cache, f"{grown} bytes allocated for a cache of {cache}"


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=6), unique=True, max_size=40),
    asked=st.lists(st.binary(max_size=6), max_size=40),
    cut=st.integers(0, 40),
    buckets=st.sampled_from([1, 3, 1 << 62]),
)
def test_the_index_finds_each_key_whatever_the_hashes_share(
    keys: list[bytes], asked: list[bytes], cut: int, buckets: int
) -> None:
    """Keys added at once and later, looked up with keys it holds and keys it does not,
    where hashes collide (1 or 3 distinct hashes in all) and where they do not."""
    real = known_module._hashes
    cut = min(cut, len(keys))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(known_module, "_hashes", lambda ks: real(ks) % buckets)
        index = known_module._Index.of(keys[:cut]).plus(keys[cut:], cut)
        middle = (cut + len(keys)) // 2  # the keys by row, in three chunks
        held = pa.chunked_array(
            [pa.array(part, pa.binary()) for part in (keys[:cut], keys[cut:middle], keys[middle:])]
        )
        wanted = asked + keys[::-1]
        found = index.find(wanted, held).tolist()
    rows = {key: row for row, key in enumerate(keys)}
    assert found == [rows.get(k, -1) for k in wanted]
    assert len(index) == len(keys)


@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    picks=st.lists(st.integers(0, 10_000), max_size=20),
)
def test_rows_gathered_chunk_by_chunk_are_the_rows_taken(
    sizes: list[int], picks: list[int]
) -> None:
    values = [b"v%d" % i for i in range(sum(sizes))]
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    held = pa.chunked_array(
        [pa.array(values[lo:hi], pa.binary()) for lo, hi in itertools.pairwise(bounds)],
        pa.binary(),
    )
    rows = np.array([p % len(values) for p in picks] if values else [], dtype=np.int64)
    assert known_module._gathered(held, rows).to_pylist() == [values[r] for r in rows.tolist()]
