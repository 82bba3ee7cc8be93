"""The columns of series seen before, so that a sender's next request skips working them out.

A remote-write sender repeats the same series request after request, each time with
its full label set. What a label set becomes in the ``metrics`` table (metric name,
attribute maps, resource attributes, series id, the metadata's columns) depends on the
label set alone (and, in 2.0, the series' own metadata), so it is worked out once and
kept as one row of an Arrow table; a request then looks its series up by key and
gathers their rows with one ``take``.

Reads take no lock: rows are only appended, and a key is added to the index after its
row is in the table, so a key found always has its row. When the cache would go over
its bounds it starts over empty; a request that saw the old one finishes with it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

_COMBINE_AFTER_CHUNKS = 4
"""Appended chunks kept apart before they are copied into one: a ``take`` over a few
chunks costs little more than over one, and copying the whole table for every request
that brings new series would cost more."""


class _Known:
    """One generation of the cache: key -> row of ``table``; ``named`` per row."""

    def __init__(self, table: pa.Table, keys: list[bytes]) -> None:
        self.table = table
        self.named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
        self.nbytes = table.get_total_buffer_size()
        self.index = {key: row for row, key in enumerate(keys)}

    def rows(self, keys: list[bytes]) -> np.ndarray[Any, np.dtype[np.int64]]:
        # map over the builtin lookup: no Python frame per key
        return np.array(list(map(self.index.get, keys, itertools.repeat(-1))), dtype=np.int64)

    def add(self, keys: list[bytes], table: pa.Table) -> None:
        """Append the rows of ``keys`` not yet present (the caller holds the lock)."""
        fresh = [i for i, k in enumerate(keys) if k not in self.index]
        if not fresh:
            return
        if len(fresh) < len(keys):
            table = table.take(pa.array(fresh, pa.int64()))
        grown = pa.concat_tables([self.table, table])
        if grown.column(0).num_chunks > _COMBINE_AFTER_CHUNKS:
            grown = grown.combine_chunks()
        named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
        base = len(self.index)
        # rows first, then keys: a reader that finds a key finds its row
        self.named = np.concatenate([self.named, named])
        self.table = grown
        self.nbytes += table.get_total_buffer_size()
        for offset, i in enumerate(fresh):
            self.index[keys[i]] = base + offset


class KnownSeries:
    """Per-series columns by label-set key, bounded by series count and bytes."""

    def __init__(self, max_series: int, max_bytes: int) -> None:
        self.max_series = max_series
        self.max_bytes = max_bytes
        self.restarts = 0
        self._lock = threading.Lock()
        self._known: _Known | None = None

    def __len__(self) -> int:
        known = self._known
        return len(known.index) if known is not None else 0

    def rows(
        self, keys: list[bytes], build: Callable[[np.ndarray[Any, Any]], pa.Table]
    ) -> tuple[pa.Table, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """``(table, rows, named)``: row ``rows[i]`` of ``table`` holds series ``i``'s
        columns, ``named[i]`` whether it has a metric name.

        ``build(positions)`` works out the columns of the series at ``positions`` (one per
        distinct key, ascending); what it raises reaches the caller with nothing cached.
        """
        known = self._known
        if known is not None:
            rows = known.rows(keys)
            missing = np.flatnonzero(rows < 0)
            if not len(missing):
                return known.table, rows, known.named[rows]
        else:
            missing = np.arange(len(keys))
        first: dict[bytes, int] = {}
        for position in missing.tolist():
            first.setdefault(keys[position], position)
        new_keys = list(first)
        built = build(np.fromiter(first.values(), np.int64, len(first)))
        with self._lock:
            known = self._known
            if known is not None and self._fits(known, len(new_keys), built):
                known.add(new_keys, built)
            elif known is None or len(missing) == len(keys):
                # empty, or full and this request needs nothing of it: a new generation
                self.restarts += known is not None
                known = _Known(built, new_keys)
                self._known = known if self._fits(None, len(new_keys), built) else None
            else:
                # full, and this request has series of the old generation too
                self._known = known = None
                self.restarts += 1
        if known is None:
            return self.rows(keys, build)  # now every series misses, and there is room
        rows = known.rows(keys)
        return known.table, rows, known.named[rows]

    def _fits(self, known: _Known | None, count: int, table: pa.Table) -> bool:
        series = count + (len(known.index) if known is not None else 0)
        nbytes = table.get_total_buffer_size() + (known.nbytes if known is not None else 0)
        return series <= self.max_series and nbytes <= self.max_bytes
