"""Histogram and summary rows as Prometheus series.

Explicit-bucket histograms become ``_count``, ``_sum`` and cumulative ``_bucket``
series by ``le``; exponential histograms become native histogram components
(:mod:`shoal.promql.native`); summaries ``_count``, ``_sum`` and a series per quantile.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shoal.promql import mapping
from shoal.promql.emit import Emitter, FlatLists, Floats
from shoal.promql.model import HIST


def _layouts(
    bounds: FlatLists, counts: FlatLists, rows: np.ndarray
) -> list[tuple[tuple[float, ...], np.ndarray]]:
    """The rows (positions in ``rows``) of each bucket layout; one layout is the usual case."""
    valid = np.flatnonzero(counts.lengths[rows] > 0)
    if not len(valid):
        return []
    width = int(counts.lengths[rows[valid[0]]])
    same = (counts.lengths[rows[valid]] == width).all() and (
        bounds.lengths[rows[valid]] == width - 1
    ).all()
    if same:
        mat = bounds.matrix(rows[valid], width - 1)
        if (mat == mat[0]).all():
            return [(tuple(mat[0].tolist()), valid)]
    groups: dict[tuple[float, ...], list[int]] = {}
    for i in valid:
        key_ = bounds.row(int(rows[i]))
        if len(key_) + 1 == counts.lengths[rows[i]]:
            groups.setdefault(key_, []).append(int(i))
    return [(k, np.asarray(v)) for k, v in groups.items()]


class Buckets:
    """The bucket lists of a table's histogram rows, and, when every row with buckets has
    the same bounds (the usual case), each row's cumulative counts, computed at once."""

    def __init__(self, table: pa.Table) -> None:
        self.bounds = FlatLists(table.column("explicit_bounds"))
        self.counts = FlatLists(table.column("bucket_counts"))
        self.layout: tuple[float, ...] | None = None
        self.cumulative = np.zeros((0, 0))
        self._les: dict[tuple[float, ...], list[str]] = {}
        self._ordered: np.ndarray | None = None
        self._all_valid: bool | None = None
        valid = np.flatnonzero(self.counts.lengths > 0)
        if not len(valid):
            return
        width = int(self.counts.lengths[valid[0]])
        if (self.counts.lengths[valid] != width).any() or (
            self.bounds.lengths[valid] != width - 1
        ).any():
            return
        bounds, counts = self.bounds.values, self.counts.values
        if len(bounds) == len(valid) * (width - 1) and len(counts) == len(valid) * width:
            # only these rows have lists: their values lie end to end, a row after a row
            bounds = bounds.reshape(len(valid), width - 1)
            counts = counts.reshape(len(valid), width)
        else:
            bounds = self.bounds.matrix(valid, width - 1)
            counts = self.counts.matrix(valid, width)
        if not (bounds == bounds[0]).all():
            return
        self.layout = tuple(bounds[0].tolist())
        self.cumulative = np.full((table.num_rows, width), np.nan)
        running = np.array(counts, dtype=np.float64)  # a column at a time: 3-4x numpy's
        for j in range(1, width):  # cumsum along rows of a few buckets each
            running[:, j] += running[:, j - 1]
        self.cumulative[valid] = running

    def les(self, layout: tuple[float, ...]) -> list[str]:
        """The ``le`` labels of a layout's buckets, ``+Inf`` last (formatted once)."""
        found = self._les.get(layout)
        if found is None:
            found = self._les[layout] = [mapping.format_float(b) for b in layout] + ["+Inf"]
        return found

    def in_order(self, order: np.ndarray, a: int, b: int) -> np.ndarray | None:
        """The cumulative counts of rows ``order[a:b]``, a bucket per row of the result
        (each a contiguous view), when every row of the table has the one layout; else
        None. The whole table is put in ``order`` once, at the first call."""
        if self.layout is None or self._all_valid is False:
            return None
        if self._ordered is None:
            self._all_valid = bool((self.counts.lengths > 0).all())
            if not self._all_valid:
                return None
            self._ordered = np.ascontiguousarray(self.cumulative[order].T)
        return self._ordered[:, a:b]

    def layouts(self, rows: np.ndarray) -> list[tuple[tuple[float, ...], np.ndarray, np.ndarray]]:
        """Each bucket layout among ``rows``: its bounds, which of ``rows`` have it (their
        positions), and their cumulative counts (a row per position, a column per bucket)."""
        if self.layout is not None:
            have = self.counts.lengths[rows] > 0
            if have.all():
                return [(self.layout, np.arange(len(rows)), self.cumulative[rows])]
            sel = np.flatnonzero(have)
            return [(self.layout, sel, self.cumulative[rows[sel]])] if len(sel) else []
        out = []
        for layout, sel in _layouts(self.bounds, self.counts, rows):
            cum = np.cumsum(self.counts.matrix(rows[sel], len(layout) + 1), axis=1)
            out.append((layout, sel, cum))
        return out


def histogram(
    floats: Floats,
    order: np.ndarray,
    a: int,
    b: int,
    base: str,
    emit: Emitter,
    delta: bool,
    buckets: Buckets,
) -> None:
    """The series of the histogram whose rows are ``order[a:b]``: ``_count``, ``_sum`` and
    a ``_bucket`` series per bound (only those ``emit`` wants are worked out)."""
    rows = order[a:b]
    for name, column in ((f"{base}_count", "count"), (f"{base}_sum", "sum")):
        if emit.wants(name):
            values = floats.rows(column, a, b)
            emit(name, np.cumsum(np.nan_to_num(values)) if delta else values)
    bucket = f"{base}_bucket"
    if not emit.wants(bucket):
        return
    if not delta:
        ordered = buckets.in_order(order, a, b)
        if ordered is not None:  # the usual case: one layout, every bucket a view
            assert buckets.layout is not None
            for le, values in zip(buckets.les(buckets.layout), ordered, strict=True):
                emit(bucket, values, {"le": le})
            return
    for layout, sel, cum in buckets.layouts(rows):
        if delta:
            cum = np.cumsum(cum, axis=0)
        whole = len(sel) == len(rows)
        keep = None
        if not whole:
            keep = np.zeros(len(rows), dtype=bool)
            keep[sel] = True
        for j, le in enumerate(buckets.les(layout)):
            if whole:
                values = np.ascontiguousarray(cum[:, j])
            else:
                values = np.full(len(rows), np.nan)
                values[sel] = cum[:, j]
            emit(bucket, values, {"le": le}, keep)


class Exponential:
    """Exponential histogram rows as native histogram components (shoal/promql/native.py).

    The rows of one series are brought to the smallest scale among them (bucket
    ``i`` of scale ``s`` is bucket ``i >> (s - t)`` of scale ``t``; an SDK lowers the
    scale as its range grows), so that each component is one counter over time.
    """

    def __init__(self, table: pa.Table) -> None:
        self.positive = FlatLists(table.column("exp_positive_bucket_counts"))
        self.negative = FlatLists(table.column("exp_negative_bucket_counts"))

    def emit(
        self,
        floats: Floats,
        rows: np.ndarray,
        base: str,
        emit: Emitter,
        delta: bool,
    ) -> None:
        scale = floats("exp_scale", rows)
        if np.isnan(scale).all():
            return
        target = int(np.nanmin(scale))

        def running(values: np.ndarray) -> np.ndarray:
            return np.cumsum(np.nan_to_num(values), axis=0) if delta else values

        emit(base, running(floats("count", rows)), {HIST: "count"})
        emit(base, running(floats("sum", rows)), {HIST: "sum"})
        threshold = floats("exp_zero_threshold", rows)
        top = float(np.nanmax(threshold)) if (~np.isnan(threshold)).any() else 0.0
        zero = running(floats("exp_zero_count", rows))
        emit(base, zero, {HIST: f"zero:{mapping.format_float(top)}"})
        for sign, lists, column in (
            ("p", self.positive, "exp_positive_offset"),
            ("n", self.negative, "exp_negative_offset"),
        ):
            lengths = lists.lengths[rows]
            if not lengths.any():
                continue
            owner = np.repeat(np.arange(len(rows)), lengths)
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            position = np.arange(int(lengths.sum())) - first
            flat = lists.values[np.repeat(lists.starts[rows], lengths) + position]
            offset = np.nan_to_num(floats(column, rows)).astype(np.int64)
            shift = (np.nan_to_num(scale).astype(np.int64) - target)[owner]
            index = (offset[owner] + position) >> shift
            union, column_of = np.unique(index, return_inverse=True)
            counts = np.zeros((len(rows), len(union)))
            np.add.at(counts, (owner, column_of), flat)
            counts = running(counts)
            for j, bucket in enumerate(union):
                emit(base, counts[:, j], {HIST: f"{sign}:{target}:{int(bucket)}"})


def summary(table: pa.Table, floats: Floats, rows: np.ndarray, base: str, emit: Emitter) -> None:
    emit(f"{base}_count", floats("count", rows))
    emit(f"{base}_sum", floats("sum", rows))
    quantiles = table.column("quantile_values").take(pa.array(rows)).to_pylist()
    by_q: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    for i, items in enumerate(quantiles):
        for item in items or ():
            q = float(item["quantile"])
            if q not in by_q:
                by_q[q] = (np.full(len(rows), np.nan), np.zeros(len(rows), dtype=bool))
            by_q[q][0][i] = float(item["value"])
            by_q[q][1][i] = True
    for q, (values, keep) in by_q.items():
        emit(base, values, {"quantile": mapping.format_float(q)}, keep)
