"""From ``metrics`` rows to Prometheus series: the OTLP view applied column-wise.

Samples arrive without attribute maps; labels come from one row per series
(:mod:`shoal.promql.labels`). The rows are put in series order and turned into series
with a loop per series, never per sample (:mod:`shoal.promql.emit`), histograms and
summaries by :mod:`shoal.promql.histograms`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.promql.emit import Collector, Emitter, Floats
from shoal.promql.histograms import Buckets, Exponential, histogram, summary
from shoal.promql.labels import SeriesRows
from shoal.promql.model import Series

STALE_FLAG = 1
"""OTLP's FLAG_NO_RECORDED_VALUE: the point marks the series as gone (a stale marker)."""


def restarts(
    t_ms: np.ndarray, start_ns: np.ndarray, start_ms: np.ndarray, first: np.ndarray
) -> np.ndarray:
    """Which points are restarts (rows in series order; ``first`` marks each series' first
    row): a point whose start time changed and lies after the previous point. A zero
    sample at its start time makes ``rate`` and ``increase`` see the reset even when the
    new count already exceeds the old one."""
    found = np.zeros(len(t_ms), dtype=bool)
    if len(t_ms) < 2:
        return found
    new = (start_ns[1:] != start_ns[:-1]) & (start_ns[1:] > 0) & ~first[1:]
    new &= (start_ms[1:] > t_ms[:-1]) & (start_ms[1:] < t_ms[1:])
    found[1:] = new
    return found


def _name_codes(column: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """The distinct names of ``column`` and each row's position among them."""
    if not pa.types.is_dictionary(column.type):
        encoded = column.combine_chunks().dictionary_encode()
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        return [str(x) for x in encoded.dictionary.to_pylist()], codes
    chunks = column.chunks
    first = chunks[0].dictionary if chunks else None
    if first is not None and len(first) == 1 and all(c.dictionary.equals(first) for c in chunks):
        # one metric, the usual read: every code is 0 (calloc'd, never written)
        return [str(first[0].as_py())], np.zeros(len(column), dtype=np.int64)
    # each chunk's dictionary mapped onto one list of names (a few names per chunk)
    names: dict[str, int] = {}
    parts = []
    for chunk in chunks:
        remap = [names.setdefault(str(x), len(names)) for x in chunk.dictionary.to_pylist()]
        indices = np.asarray(chunk.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        parts.append(np.asarray(remap, dtype=np.int64)[indices] if len(indices) else indices)
    codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return list(names), codes


def _series_order(
    code: np.ndarray, sid: np.ndarray, tns: np.ndarray, names: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row order by (name, series id, time), stable; and code, sid and tns in that order.

    Rows come as runs already in that order (each file's rows, the unflushed rows'), so the
    rows are cut into segments (a series' rows within one run) and only the segments
    are sorted, by (name, series id, first time): a few per series instead of a row
    each. The result is checked, and only rows that came in another order (two runs
    with points of one series over the same time) pay for a full sort of the rows."""
    n = len(sid)
    cut = np.ones(n, dtype=bool)
    cut[1:] = (sid[1:] != sid[:-1]) | (tns[1:] < tns[:-1])
    if names:
        cut[1:] |= code[1:] != code[:-1]
    starts = np.flatnonzero(cut)
    lengths = np.diff(np.append(starts, n))
    keys = (tns[starts], sid[starts], code[starts]) if names else (tns[starts], sid[starts])
    by_segment = np.lexsort(keys)
    seg_starts, seg_lengths = starts[by_segment], lengths[by_segment]
    # Within a segment time never goes back; where two segments of one series meet in
    # this order, the second must start strictly after the first ends (an equal time
    # there could belong in another place among the rows it ties with). Checked per
    # segment, not per row.
    seg_sid = sid[seg_starts]
    same = seg_sid[1:] == seg_sid[:-1]
    if names:
        seg_code = code[seg_starts]
        same &= seg_code[1:] == seg_code[:-1]
    back = same & (tns[seg_starts[1:]] <= tns[seg_starts[:-1] + seg_lengths[:-1] - 1])
    if not back.any():
        if (by_segment[1:] > by_segment[:-1]).all():  # already in order
            return np.arange(n, dtype=np.int64), code, sid, tns
        placed = np.cumsum(seg_lengths) - seg_lengths
        order = np.arange(n, dtype=np.int64) + np.repeat(seg_starts - placed, seg_lengths)
        # a segment is one series: its name and id are repeated, not gathered row by row
        c = np.repeat(seg_code, seg_lengths) if names else code
        return order, c, np.repeat(seg_sid, seg_lengths), tns[order]
    table = pa.table({"c": code, "s": sid, "t": tns})
    full = pc.sort_indices(table, [("c", "ascending"), ("s", "ascending"), ("t", "ascending")])
    order = np.asarray(full.to_numpy(), dtype=np.int64)
    return order, code[order], sid[order], tns[order]


def to_series(
    table: pa.Table,
    labels: pa.Table,
    wanted: Sequence[str] | None = None,
    promote: tuple[str, ...] = (),
    known: SeriesRows | None = None,
) -> list[Series]:
    """Prometheus series of the fetched samples.

    ``labels`` holds one row per OTLP series (:meth:`QuerySource.series`) with its type
    and attribute maps; ``wanted`` limits the exposed names. ``known`` is ``labels`` as
    :class:`SeriesRows`, when a caller keeps it between queries.
    """
    n = table.num_rows
    if n == 0:
        return []
    per_series = known if known is not None else SeriesRows(labels, promote)
    index = per_series.index
    dictionary, name_code = _name_codes(table.column("metric_name"))
    sid = np.asarray(table.column("series_id").to_numpy(), dtype=np.int64)
    tns = np.asarray(table.column("time_unix_nano").to_numpy(), dtype=np.int64)
    order, name_code, sid, tns = _series_order(name_code, sid, tns, len(dictionary) > 1)
    change = np.ones(n, dtype=bool)
    change[1:] = sid[1:] != sid[:-1]
    if len(dictionary) > 1:
        change[1:] |= name_code[1:] != name_code[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    flags = np.asarray(table.column("flags").to_numpy(), dtype=np.int64)
    # per series below: views into these, computed once for all rows
    tms = tns // 1_000_000
    stale_rows = (flags & STALE_FLAG) != 0
    if stale_rows.any():  # stale markers are rare: most reads gather nothing for them
        stale_all = stale_rows[order]  # a byte per row to gather, not eight
        has_stale = np.logical_or.reduceat(stale_all, starts).tolist()
    else:
        stale_all, has_stale = stale_rows, [False] * len(starts)
    # start times matter for counters and histograms only: gathered at the first one
    start_ms = restart = np.zeros(0, dtype=np.int64)
    restarted: list[bool] = []
    wanted_set = set(wanted) if wanted is not None else None
    out = Collector()
    buckets: Buckets | None = None
    exp: Exponential | None = None
    floats = Floats(table, order)
    values: np.ndarray | None = None
    first_names = [dictionary[c] for c in name_code[starts].tolist()]
    found = [index.get(pair) for pair in zip(first_names, sid[starts].tolist(), strict=True)]
    for i, (row, a, b) in enumerate(zip(found, starts.tolist(), ends.tolist(), strict=True)):
        if row is None:  # written between the two reads: seen by the next query
            continue
        info, base, cumulative = per_series.kind(row)
        stale = stale_all[a:b] if has_stale[i] else None
        zeros = None
        if cumulative:
            if not len(restart):
                start_ns = table.column("start_time_unix_nano").to_numpy()
                start_ns = np.asarray(start_ns, dtype=np.int64)[order]
                start_ms = start_ns // 1_000_000
                restart = restarts(tms, start_ns, start_ms, change)
                restarted = np.logical_or.reduceat(restart, starts).tolist()
            if restarted[i]:
                zeros = start_ms[a:b][restart[a:b]]
        if info.metric_type in ("gauge", "sum") and zeros is None:
            # the usual series, one exposed name: added without an Emitter
            if wanted_set is not None and base not in wanted_set:
                continue
            if values is None:
                values = floats.rows("value", 0, n)
            v = values[a:b]
            if info.metric_type == "sum" and info.temporality == 1:
                # delta sums: the running total of the fetched points (docs/rationale.md)
                gone = np.isnan(v) if stale is None else stale | np.isnan(v)
                v = np.cumsum(np.where(gone, 0.0, v))
            labels, k = per_series.labels(row, base)
            out.add(labels, k, tms[a:b], v, stale)
            continue
        rows = order[a:b]
        emit = Emitter(out, wanted_set, per_series, row, tms[a:b], stale, zeros)
        if info.metric_type in ("gauge", "sum"):
            emit(base, floats.rows("value", a, b))
        elif info.metric_type == "histogram":
            if buckets is None:
                buckets = Buckets(table)
            histogram(floats, order, a, b, base, emit, info.temporality == 1, buckets)
        elif info.metric_type == "summary":
            summary(table, floats, rows, base, emit)
        elif info.metric_type == "exponential_histogram":
            if exp is None:
                exp = Exponential(table)
            exp.emit(floats, rows, base, emit, info.temporality == 1)
    return out.series()
