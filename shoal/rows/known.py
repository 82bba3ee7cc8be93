"""The columns of series seen before, so that a sender's next request skips working them out.

A remote-write sender repeats the same series request after request, each time with
its full label set; an OTLP exporter its resource, scope, metrics and point attributes.
What a series becomes in the ``metrics`` table (metric name, attribute maps, resource
attributes, series id, the metadata's columns) depends on those bytes alone (the key:
see :mod:`shoal.promwrite.decode` and :mod:`shoal.otlp.scanned`), so it is worked out
once and kept as one row of an Arrow table; a request then looks its series up by key
and gathers their rows. A sender that keeps its series in the same order finds them as
runs of consecutive rows, found a run at a time (see :meth:`_Known.rows`).

The index from key to row is two numpy arrays, the keys' hashes sorted and each one's
row (:class:`_Index`): 16 bytes a series. It was a dict of the keys as ``bytes``, whose
Python objects held the key a second time and about 130 bytes beside it, nearly half of
what a series cost (209 of 472 bytes for a remote-write series of four labels), so that
the default 64 MiB held about 140,000 remote-write series. A hash found is checked
against the key in its row: two keys may share a hash.

Reads take no lock: rows are only appended, and a key is added to the index after its
row is in the table, so a key found always has its row. When the cache would go over
its bounds it starts over empty, at most once a :data:`RESTART_EVERY_S`; until then the
new series of a request are worked out and handed back without being kept. Its
bytes count the Arrow rows and keys and the index (:data:`ENTRY_BYTES` per key).

What a cache holds outlives it: the rows it hands out are slices of its buffers (see
:func:`gather`), which the unflushed rows keep until their flush. So the cache never
copies itself (chunks are appended as they come, and combined into one only once series
stop coming, :data:`_COMBINE_AFTER_TAKES`), and it starts over no more often than a flush
round lets go of the generation before: the rows waiting for a flush pin at most about
two generations. Copying at each add pinned every intermediate copy: 584 MB of Arrow
buffers for the first round of 160,000 remote-write series whose cache held 43 MB.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.rows.columns import distinct

_MAX_RUN_LOOKUPS = 8
"""Runs of consecutive rows a request's keys are followed through before the rest is
looked up key by key (a shuffled request gives up after this many short runs)."""
_SHORT_RUN = 16
"""A run shorter than this ends the following of runs: the keys are not in row order."""
RESTART_EVERY_S = 60.0
"""A full cache starts over at most this often: the default ``flush_max_age_s``, so that
the rows sliced from a generation are flushed, and the generation let go, before the
next one is full."""
_COMBINE_AFTER_TAKES = 8
"""Requests that took rows one by one from a table of several chunks, with no series added
in between, before it is copied into one chunk (a take over four chunks of OTLP series
cost twice one over one chunk, 1.1 against 0.5 ms per 1,000 rows): a sender whose series
keep changing adds chunks between its takes, and copying the whole table for each would
cost more, and pin each copy."""


_KEY_CHUNKS = 4
"""The keys' column is copied into one chunk when it has more than this many (one per
request that added series): finding rows by key reads each chunk it names."""
ENTRY_BYTES = 16
"""What the index holds per key: its hash and its row, 8 bytes each."""

I64 = np.ndarray[Any, np.dtype[np.int64]]


def _key_bytes(keys: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(keys)).as_py() or 0)


def _hashes(keys: list[bytes]) -> I64:
    return np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys))


def _gathered(held: pa.Array | pa.ChunkedArray, rows: I64) -> pa.Array:
    """``held.take(rows)``, taken from each chunk that holds some of them: a take over
    many chunks concatenates them all first (2.7 ms a request over the keys of 160,000
    series in 160 chunks)."""
    if isinstance(held, pa.Array) or held.num_chunks == 1:
        array = held if isinstance(held, pa.Array) else held.chunk(0)
        return array.take(pa.array(rows))
    if not len(rows):
        return pa.array([], held.type)
    bounds = np.cumsum([0, *(len(chunk) for chunk in held.chunks)])
    which = np.searchsorted(bounds, rows, side="right") - 1
    order = np.argsort(which, kind="stable")
    parts = [
        held.chunk(int(chunk)).take(pa.array(rows[which == chunk] - bounds[chunk]))
        for chunk in np.unique(which[order]).tolist()
    ]
    back = np.empty(len(rows), dtype=np.int64)
    back[order] = np.arange(len(rows))
    return pa.concat_arrays(parts).take(pa.array(back))


class _Index:
    """Key -> row: the keys' hashes, sorted, each beside its row. Immutable; adding
    makes a new one."""

    def __init__(self, hashes: I64, rows: I64) -> None:
        self.hashes = hashes
        self.rows = rows

    @classmethod
    def of(cls, keys: list[bytes], first_row: int = 0) -> _Index:
        hashes = _hashes(keys)
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], order.astype(np.int64) + first_row)

    def __len__(self) -> int:
        return len(self.hashes)

    def plus(self, keys: list[bytes], first_row: int) -> _Index:
        """This index with ``keys`` at rows ``first_row`` onwards."""
        more = _Index.of(keys, first_row)
        at = np.searchsorted(self.hashes, more.hashes)
        return _Index(np.insert(self.hashes, at, more.hashes), np.insert(self.rows, at, more.rows))

    def find(
        self, keys: list[bytes], held: pa.Array | pa.ChunkedArray, arrow: pa.Array | None = None
    ) -> I64:
        """Per key, its row (-1 when it has none); ``held`` the keys by row (read after
        this index, so that it holds every row the index names); ``arrow`` the keys as
        an Arrow array, where the caller has them so."""
        out = np.full(len(keys), -1, dtype=np.int64)
        if not len(self.hashes) or not keys:
            return out
        wanted = _hashes(keys)
        at = np.searchsorted(self.hashes, wanted).clip(max=len(self.hashes) - 1)
        hit = np.flatnonzero(self.hashes[at] == wanted)
        if not len(hit):
            return out
        rows = self.rows[at[hit]]
        if arrow is not None:
            asked = arrow.take(pa.array(hit))
        else:
            asked = pa.array([keys[i] for i in hit.tolist()], pa.binary())
        same = np.asarray(pc.equal(asked, _gathered(held, rows)), dtype=np.bool_)
        out[hit[same]] = rows[same]
        for i in hit[~same].tolist():  # another key with the same hash came first
            out[i] = self._among_equal(keys[i], int(at[i]), held)
        return out

    def find_one(self, key: bytes, held: pa.Array | pa.ChunkedArray) -> int:
        """:meth:`find` for one key, without making arrays (a run's first key)."""
        wanted = hash(key)
        at = int(np.searchsorted(self.hashes, wanted))
        if at == len(self.hashes) or self.hashes[at] != wanted:
            return -1
        return self._among_equal(key, at, held)

    def _among_equal(self, key: bytes, at: int, held: pa.Array | pa.ChunkedArray) -> int:
        wanted = self.hashes[at]
        while at < len(self.hashes) and self.hashes[at] == wanted:
            row = int(self.rows[at])
            if held[row].as_py() == key:
                return row
            at += 1
        return -1


class _Known:
    """One generation of the cache: key -> row of ``table``; the keys in row order as
    Arrow (``keys``); ``named`` per row."""

    def __init__(self, table: pa.Table, keys: pa.Array) -> None:
        self.table = table
        self.keys: pa.Array | pa.ChunkedArray = keys
        self.named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
        self.index = _Index.of(keys.to_pylist())
        self.nbytes = table.get_total_buffer_size() + keys.nbytes + ENTRY_BYTES * len(keys)
        self.takes_since_add = 0
        """Requests that took rows one by one from several chunks since the last add."""

    def rows(self, keys: pa.Array) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Per key, its row (-1 when it has none).

        A sender that repeats its series in the same order brings keys that are runs
        of consecutive rows: each run is found by looking its first key up and then
        comparing the keys after it with the rows after that one, all at once. After
        :data:`_MAX_RUN_LOOKUPS` runs, or after a run shorter than :data:`_SHORT_RUN`,
        the rest is looked up key by key."""
        n = len(keys)
        out = np.full(n, -1, dtype=np.int64)
        index = self.index
        known = self.keys  # read after the index, once: rows only ever grow
        total = len(known)
        position = 0
        for _ in range(_MAX_RUN_LOOKUPS):
            if position >= n:
                return out
            row = index.find_one(keys[position].as_py(), known)
            if row < 0:
                position += 1  # a new series
                continue
            span = min(n - position, total - row)
            same = pc.equal(keys.slice(position, span), known.slice(row, span))
            differ = np.flatnonzero(~np.asarray(same, dtype=np.bool_))
            run = int(differ[0]) if len(differ) else span
            out[position : position + run] = np.arange(row, row + run)
            position += run
            if run < _SHORT_RUN:
                break  # not a sender that keeps its order
        if position < n:
            rest = keys.slice(position)
            out[position:] = index.find(rest.to_pylist(), known, rest)
        return out

    def add(self, keys: list[bytes], table: pa.Table) -> None:
        """Append the rows of ``keys`` not yet present (the caller holds the lock)."""
        fresh = np.flatnonzero(self.index.find(keys, self.keys) < 0).tolist()
        if not fresh:
            return
        if len(fresh) < len(keys):
            table = table.take(pa.array(fresh, pa.int64()))
            keys = [keys[i] for i in fresh]
        grown = pa.concat_tables([self.table, table])  # no copy: chunks side by side
        added = pa.array(keys, pa.binary())
        all_keys = pa.chunked_array([*_chunks(self.keys), added])
        if all_keys.num_chunks > _KEY_CHUNKS:  # the keys are not handed out: copied freely
            all_keys = pa.chunked_array([all_keys.combine_chunks()])
        named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
        base = len(self.index)
        self.takes_since_add = 0
        # rows first, then keys, then the index: a reader that finds a key finds its row
        self.named = np.concatenate([self.named, named])
        self.table = grown
        self.keys = all_keys
        self.nbytes += table.get_total_buffer_size() + added.nbytes + ENTRY_BYTES * len(keys)
        self.index = self.index.plus(keys, base)


def _beside(
    known: _Known,
    rows: np.ndarray[Any, Any],
    missing: np.ndarray[Any, Any],
    fresh: np.ndarray[Any, Any],
    built: pa.Table,
) -> tuple[pa.Table, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """What :meth:`KnownSeries.rows` answers when the new series of a request are not kept:
    the cached rows (``rows``, found before; -1 at ``missing``) from the generation, the
    new ones (row ``fresh[i]`` of ``built`` for ``missing[i]``) after them (the caller
    holds the lock: the two agree). A request that found none of its series in the
    generation gets ``built`` alone."""
    built_named = np.asarray(built.column("metric_name").is_valid(), dtype=np.bool_)
    if len(missing) == len(rows):
        return built, fresh, built_named[fresh]
    table = pa.concat_tables([known.table, built])
    out = rows.copy()
    found = out >= 0
    out[missing] = known.table.num_rows + fresh
    named = np.empty(len(out), dtype=np.bool_)
    named[found] = known.named[out[found]]
    named[missing] = built_named[fresh]
    return table, out, named


def _chunks(array: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return array.chunks if isinstance(array, pa.ChunkedArray) else [array]


class KnownSeries:
    """Per-series columns by label-set key, bounded by series count and bytes."""

    def __init__(
        self,
        max_series: int,
        max_bytes: int,
        restart_every_s: float = RESTART_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_series = max_series
        self.max_bytes = max_bytes
        self.restart_every_s = restart_every_s
        self._clock = clock
        self._started = -float("inf")
        """When the generation was made."""
        self.restarts = 0
        self.unkept = 0
        """Series worked out and not kept: the cache was full and not due to start over."""
        self._lock = threading.Lock()
        self._known: _Known | None = None

    def __len__(self) -> int:
        known = self._known
        return len(known.index) if known is not None else 0

    @property
    def nbytes(self) -> int:
        """What the cache holds now (at most ``max_bytes``)."""
        known = self._known
        return known.nbytes if known is not None else 0

    def limit(self, max_bytes: int) -> None:
        """Bound the cache to ``max_bytes`` (the ``series_cache_bytes`` setting) from now
        on; what it holds is dropped when it is over the new bound (0 keeps nothing)."""
        with self._lock:
            self.max_bytes = max_bytes
            if self._known is not None and self._known.nbytes > max_bytes:
                self._known = None

    def rows(
        self, keys: pa.Array, build: Callable[[np.ndarray[Any, Any]], pa.Table]
    ) -> tuple[pa.Table, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """``(table, rows, named)``: row ``rows[i]`` of ``table`` holds the columns of
        the series of key ``keys[i]`` (a binary array), ``named[i]`` whether it has a
        metric name.

        ``build(positions)`` works out the columns of the series at ``positions`` (one per
        distinct key, ascending); what it raises reaches the caller with nothing cached.
        """
        known = looked = self._known
        rows = np.full(len(keys), -1, dtype=np.int64)
        if known is not None:
            rows = known.rows(keys)
            missing = np.flatnonzero(rows < 0)
            if not len(missing):
                if known.table.column(0).num_chunks > 1 and _scattered(rows):
                    known.takes_since_add += 1
                    if known.takes_since_add >= _COMBINE_AFTER_TAKES:
                        with self._lock:  # taken row by row: from one chunk from now on
                            known.table = known.table.combine_chunks()
                return known.table, rows, known.named[rows]
        else:
            missing = np.arange(len(keys))
        missing_keys = keys.take(pa.array(missing))
        fresh, first = distinct(missing_keys)  # per missing key, its new series
        new_keys = missing_keys.take(pa.array(first))
        built = build(missing[first])
        with self._lock:
            known = self._known
            due = self._clock() - self._started >= self.restart_every_s
            if known is not None and self._fits(known, new_keys, built):
                known.add(new_keys.to_pylist(), built)
            elif known is not None and not due:
                # full, and started over too recently: these series are not kept
                if known is looked:
                    self.unkept += len(new_keys)
                    return _beside(known, rows, missing, fresh, built)
                known = None  # another request started a generation: look again
            elif known is None or len(missing) == len(keys):
                # empty, or full and this request needs nothing of it: a new generation
                self.restarts += known is not None
                self._started = self._clock()
                known = _Known(built, new_keys)
                self._known = known if self._fits(None, new_keys, built) else None
            else:
                # full, and this request has series of the old generation too
                self._known = known = None
                self.restarts += 1
        if known is None:
            return self.rows(keys, build)  # now every series misses, and there is room
        rows = known.rows(keys)
        return known.table, rows, known.named[rows]

    def _fits(self, known: _Known | None, keys: pa.Array, table: pa.Table) -> bool:
        series = len(keys) + (len(known.index) if known is not None else 0)
        nbytes = table.get_total_buffer_size() + (known.nbytes if known is not None else 0)
        nbytes += ENTRY_BYTES * len(keys) + _key_bytes(keys) + 4 * len(keys)  # index, keys
        return series <= self.max_series and nbytes <= self.max_bytes


_MAX_RUNS = 8
"""Runs of consecutive cached rows a request's rows may form and still be copied run by
run: a copy of a few runs costs about half of gathering row by row."""


def _breaks(positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Where a run of consecutive rows ends and the next starts."""
    return np.flatnonzero(np.diff(positions) != 1) + 1


def _scattered(positions: np.ndarray[Any, Any]) -> bool:
    """Whether :func:`gather` takes these rows row by row."""
    return len(_breaks(positions)) >= _MAX_RUNS


def gather(table: pa.Table, positions: np.ndarray[Any, Any]) -> pa.Table:
    """Rows ``positions`` of ``table``, in one chunk per column: a slice, not a copy, when
    they are consecutive rows of one chunk; copied run by run when they form a few runs of
    consecutive rows; else gathered row by row.

    The cache keeps new series in the order a request brought them, so a sender that sends
    the same series in the same order (a Prometheus shard does, scrape after scrape, cut
    into requests at the same or at shifting points) finds them in one run or a few. A
    slice shares the cache's buffers, so what the rows hold is counted by their WAL
    payload, not their buffer sizes."""
    n = len(positions)
    breaks = _breaks(positions)
    if not n or len(breaks) >= _MAX_RUNS:
        return table.take(pa.array(positions))
    bounds = [0, *breaks.tolist(), n]
    runs = [table.slice(int(positions[lo]), hi - lo) for lo, hi in itertools.pairwise(bounds)]
    if len(runs) == 1 and runs[0].column(0).num_chunks == 1:
        return runs[0]
    columns = [
        pa.concat_arrays([chunk for run in runs for chunk in run.column(i).chunks])
        for i in range(table.num_columns)
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)
