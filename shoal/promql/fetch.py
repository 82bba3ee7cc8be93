"""From ``metrics`` rows to Prometheus series: the OTLP view applied column-wise.

Samples arrive without attribute maps; labels come from one row per series. The
rows are turned into series with a loop per series, never per sample. Label
matchers and the metric catalog's name selection live here too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import PatternError, PromQLError
from shoal.promql import mapping
from shoal.promql.model import HIST, NAME, LabelKey, Labels, Series, key
from shoal.regex import Regex, compile_pattern

logger = logging.getLogger(__name__)

STALE_FLAG = 1
"""OTLP's FLAG_NO_RECORDED_VALUE: the point marks the series as gone (a stale marker)."""


@dataclasses.dataclass(frozen=True)
class MetricInfo:
    """One OTLP metric as the catalog query sees it, with its Prometheus base name."""

    otlp_name: str
    metric_type: str
    unit: str
    monotonic: bool | None
    temporality: int | None
    description: str
    verbatim: bool = False
    """Written by Prometheus remote write: the name is already Prometheus'."""

    @property
    def base(self) -> str:
        if self.verbatim:
            return self.otlp_name
        return mapping.metric_name(self.otlp_name, self.unit, self.metric_type, self.monotonic)

    @property
    def names(self) -> list[str]:
        return mapping.exposed_names(self.base, self.metric_type)


def target_keys(table: pa.Table) -> list[tuple[str, str, str]]:
    return list(
        zip(
            table.column("s").to_pylist(),
            table.column("ns").to_pylist(),
            table.column("iid").to_pylist(),
            strict=True,
        )
    )


def target_label_sets(resources: pa.Table) -> list[Labels]:
    """The ``target_info`` label set of each resource that has attributes beyond its identity."""
    out: dict[LabelKey, Labels] = {}
    for raw in resources.column("resource_attributes").to_pylist():
        labels = mapping.target_labels({str(a): str(b) for a, b in raw or []})
        if labels is not None:
            out.setdefault(key(labels), labels)
    return list(out.values())


def target_series(found: tuple[pa.Table, pa.Table]) -> list[Series]:
    """``target_info`` series: value 1 whenever the resource sent a point."""
    resources, times = found
    labels_of: dict[tuple[str, str, str], Labels] = {}
    for k, raw in zip(
        target_keys(resources), resources.column("resource_attributes").to_pylist(), strict=True
    ):
        labels = mapping.target_labels({str(a): str(b) for a, b in raw or []})
        if labels is not None:
            labels_of[k] = labels
    if not labels_of or times.num_rows == 0:
        return []
    t_ms = np.asarray(times.column("time_unix_nano").to_numpy(), dtype=np.int64) // 1_000_000
    keys = target_keys(times)
    by_target: dict[LabelKey, tuple[Labels, list[int]]] = {}
    for k, t in zip(keys, t_ms, strict=True):
        labels = labels_of.get(k)
        if labels is not None:
            by_target.setdefault(key(labels), (labels, []))[1].append(int(t))
    out = []
    for labels, ts in by_target.values():
        t_arr = np.unique(np.asarray(ts, dtype=np.int64))
        out.append(Series(labels, t_arr, np.ones(len(t_arr))))
    return out


# -- matchers ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LabelMatcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str

    def regex(self) -> Regex:
        try:
            return compile_pattern(self.value)
        except PatternError as exc:
            raise PromQLError(str(exc)) from None

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = self.regex().matches(value)
        return hit if self.op == "=~" else not hit


def matches_all(labels: Labels, matchers: Iterable[LabelMatcher]) -> bool:
    return all(m.matches(labels.get(m.name, "")) for m in matchers)


def select_metrics(catalog: Iterable[MetricInfo], matchers: Sequence[LabelMatcher]) -> list[str]:
    """The OTLP metric names whose Prometheus names the ``__name__`` matchers accept."""
    name_matchers = [m for m in matchers if m.name == NAME]
    out = []
    for info in catalog:
        if any(all(m.matches(n) for m in name_matchers) for n in info.names):
            out.append(info.otlp_name)
    return out


# -- rows -> series -----------------------------------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.parts: dict[
            LabelKey, tuple[Labels, list[np.ndarray], list[np.ndarray], list[np.ndarray]]
        ]
        self.parts = {}

    def add(
        self, labels: Labels, k: LabelKey, t: np.ndarray, v: np.ndarray, stale: np.ndarray
    ) -> None:
        slot = self.parts.get(k)
        if slot is None:
            self.parts[k] = (labels, [t], [v], [stale])
        else:
            slot[1].append(t)
            slot[2].append(v)
            slot[3].append(stale)

    def series(self) -> list[Series]:
        out = []
        for labels, ts, vs, ss in self.parts.values():
            if len(ts) == 1:  # the usual case: one OTLP series under this label set
                s = ss[0]
                out.append(Series(labels, ts[0], vs[0], s if s.any() else None))
                continue
            t = np.concatenate(ts).astype(np.int64)
            v = np.concatenate(vs).astype(np.float64)
            s = np.concatenate(ss).astype(bool)
            order = np.argsort(t, kind="stable")
            t, v, s = t[order], v[order], s[order]
            # same timestamp twice (two OTLP series mapped onto one): the last wins
            keep = np.ones(len(t), dtype=bool)
            keep[:-1] = t[1:] != t[:-1]
            t, v, s = t[keep], v[keep], s[keep]
            out.append(Series(labels, t, v, s if s.any() else None))
        return out


class _Floats:
    """Numeric columns of one table as float64 arrays (null as NaN), converted once."""

    def __init__(self, table: pa.Table, order: np.ndarray) -> None:
        self.table = table
        self.order = order
        self.columns: dict[str, np.ndarray] = {}
        self.ordered: dict[str, np.ndarray] = {}

    def _column(self, name: str) -> np.ndarray:
        values = self.columns.get(name)
        if values is None:
            column = self.table.column(name)
            if column.type != pa.float64():
                column = pc.cast(column, pa.float64())
            values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            self.columns[name] = values
        return values

    def __call__(self, name: str, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self._column(name)[rows], dtype=np.float64)

    def rows(self, name: str, a: int, b: int) -> np.ndarray:
        """The column at positions ``a:b`` of the row order (a view of one array)."""
        values = self.ordered.get(name)
        if values is None:
            values = self.ordered[name] = self._column(name)[self.order]
        return values[a:b]


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


def _series_index(labels: pa.Table) -> dict[tuple[str, int], int]:
    names = labels.column("metric_name").to_pylist()
    sids = labels.column("series_id").to_pylist()
    return {(str(n), int(i)): row for row, (n, i) in enumerate(zip(names, sids, strict=True))}


def _name_codes(column: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """The distinct names of ``column`` and each row's position among them."""
    chunks = column.chunks
    if (
        pa.types.is_dictionary(column.type)
        and chunks
        and all(c.dictionary.equals(chunks[0].dictionary) for c in chunks)
    ):
        dictionary = chunks[0].dictionary
        codes = np.concatenate(
            [np.asarray(c.indices.to_numpy(zero_copy_only=False), dtype=np.int64) for c in chunks]
        )
    else:
        if pa.types.is_dictionary(column.type):
            column = column.cast(pa.string())
        encoded = column.combine_chunks().dictionary_encode()
        dictionary = encoded.dictionary
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return [str(x) for x in dictionary.to_pylist()], codes


def _series_order(
    code: np.ndarray, sid: np.ndarray, tns: np.ndarray, names: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row order by (name, series id, time), stable; and code, sid and tns in that order.

    Rows come as runs already in that order (each file's rows, the snapshot's), so the
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
    if (by_segment[1:] > by_segment[:-1]).all():
        order = np.arange(n, dtype=np.int64)  # already in order
    else:
        seg_starts, seg_lengths = starts[by_segment], lengths[by_segment]
        placed = np.cumsum(seg_lengths) - seg_lengths
        order = np.arange(n, dtype=np.int64) + np.repeat(seg_starts - placed, seg_lengths)
    c = code[order] if names else code  # one name: every code is the same
    s, t = sid[order], tns[order]
    same = (c[1:] == c[:-1]) & (s[1:] == s[:-1]) if names else s[1:] == s[:-1]
    # a join of two segments of one series must go strictly forward in time (an equal
    # time there could belong in another place among the rows it ties with)
    joins = np.zeros(n, dtype=bool)
    joins[np.cumsum(lengths[by_segment])[:-1]] = True
    back = same & ((t[1:] < t[:-1]) | (joins[1:] & (t[1:] == t[:-1])))
    if not back.any():
        return order, c, s, t
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
    change[1:] = (name_code[1:] != name_code[:-1]) | (sid[1:] != sid[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    flags = np.asarray(table.column("flags").to_numpy(), dtype=np.int64)
    # per series below: views into these, computed once for all rows
    tms = tns // 1_000_000
    stale_all = ((flags & STALE_FLAG) != 0)[order]  # a byte per row to gather, not eight
    # start times matter for counters and histograms only: gathered at the first one
    start_ms = restart = np.zeros(0, dtype=np.int64)
    wanted_set = set(wanted) if wanted is not None else None
    out = _Collector()
    buckets: _Buckets | None = None
    exp: _Exponential | None = None
    floats = _Floats(table, order)
    for a, b in zip(starts, ends, strict=True):
        row = index.get((dictionary[int(name_code[a])], int(sid[a])))
        if row is None:  # written between the two reads: seen by the next query
            continue
        rows = order[a:b]
        info = per_series.info(row)
        t = tms[a:b]
        stale = stale_all[a:b]
        base = per_series.base(info)
        emit = _Emitter(out, wanted_set, per_series, row, t, stale)
        cumulative = info.metric_type == "summary" or (
            info.temporality == 2
            and (
                info.metric_type in ("histogram", "exponential_histogram")
                or (info.metric_type == "sum" and info.monotonic)
            )
        )
        if cumulative and not len(restart):
            start_ns = table.column("start_time_unix_nano").to_numpy()
            start_ns = np.asarray(start_ns, dtype=np.int64)[order]
            start_ms = start_ns // 1_000_000
            restart = restarts(tms, start_ns, start_ms, change)
        if cumulative and restart[a:b].any():
            emit.zeros = start_ms[a:b][restart[a:b]]
        if info.metric_type in ("gauge", "sum"):
            v = floats.rows("value", int(a), int(b))
            if info.metric_type == "sum" and info.temporality == 1:
                # delta sums: the running total of the fetched points (docs/rationale.md)
                v = np.cumsum(np.where(stale | np.isnan(v), 0.0, v))
            emit(base, v)
        elif info.metric_type == "histogram":
            if buckets is None:
                buckets = _Buckets(table)
            _histogram(floats, rows, base, emit, info.temporality == 1, buckets)
        elif info.metric_type == "summary":
            _summary(table, floats, rows, base, emit)
        elif info.metric_type == "exponential_histogram":
            if exp is None:
                exp = _Exponential(table)
            exp.emit(floats, rows, base, emit, info.temporality == 1)
    return out.series()


@dataclasses.dataclass
class _Emitter:
    """Adds the series of one OTLP series under one exposed name (and extra labels)."""

    out: _Collector
    wanted: set[str] | None
    rows: SeriesRows
    row: int
    t: np.ndarray
    stale: np.ndarray
    zeros: np.ndarray | None = None
    """Times of injected zero samples: a counter restarted (a new start time)."""

    def __call__(
        self,
        name: str,
        values: np.ndarray,
        extra: dict[str, str] | None = None,
        keep: np.ndarray | None = None,
    ) -> None:
        if self.wanted is not None and name not in self.wanted:
            return
        labels, k = self.rows.labels(self.row, name, extra)
        t, stale = self.t, self.stale
        if keep is not None:
            t, values, stale = t[keep], values[keep], stale[keep]
        if self.zeros is not None and len(self.zeros):
            t = np.concatenate([t, self.zeros])
            values = np.concatenate([values, np.zeros(len(self.zeros))])
            stale = np.concatenate([stale, np.zeros(len(self.zeros), dtype=bool)])
            order = np.argsort(t, kind="stable")
            t, values, stale = t[order], values[order], stale[order]
        self.out.add(labels, k, t, values, stale)


class FlatLists:
    """A list column as flat values with a start and a length per row, read once per table."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        lengths = pc.list_value_length(arr).fill_null(0)
        self.lengths = np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.values = np.asarray(
            pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.float64
        )

    def matrix(self, rows: np.ndarray, width: int) -> np.ndarray:
        return np.asarray(self.values[self.starts[rows][:, None] + np.arange(width)[None, :]])

    def row(self, i: int) -> tuple[float, ...]:
        a = int(self.starts[i])
        return tuple(self.values[a : a + int(self.lengths[i])].tolist())


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


class _Buckets:
    """The bucket lists of a table's histogram rows, and, when every row with buckets has
    the same bounds (the usual case), each row's cumulative counts, computed at once."""

    def __init__(self, table: pa.Table) -> None:
        self.bounds = FlatLists(table.column("explicit_bounds"))
        self.counts = FlatLists(table.column("bucket_counts"))
        self.layout: tuple[float, ...] | None = None
        self.cumulative = np.zeros((0, 0))
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


def _histogram(
    floats: _Floats,
    rows: np.ndarray,
    base: str,
    emit: _Emitter,
    delta: bool,
    buckets: _Buckets,
) -> None:
    count = floats("count", rows)
    total = floats("sum", rows)
    if delta:
        count = np.cumsum(np.nan_to_num(count))
        total = np.cumsum(np.nan_to_num(total))
    emit(f"{base}_count", count)
    emit(f"{base}_sum", total)
    for layout, sel, cum in buckets.layouts(rows):
        if delta:
            cum = np.cumsum(cum, axis=0)
        whole = len(sel) == len(rows)
        keep = None
        if not whole:
            keep = np.zeros(len(rows), dtype=bool)
            keep[sel] = True
        les = [mapping.format_float(b) for b in layout] + ["+Inf"]
        for j, le in enumerate(les):
            if whole:
                values = np.ascontiguousarray(cum[:, j])
            else:
                values = np.full(len(rows), np.nan)
                values[sel] = cum[:, j]
            emit(f"{base}_bucket", values, {"le": le}, keep)


class _Exponential:
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
        floats: _Floats,
        rows: np.ndarray,
        base: str,
        emit: _Emitter,
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


def _summary(table: pa.Table, floats: _Floats, rows: np.ndarray, base: str, emit: _Emitter) -> None:
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


class SeriesRows:
    """The series rows of :meth:`QuerySource.series`, converted to Python once per call
    (indexing Arrow columns one value at a time costs more than the conversion)."""

    def __init__(self, table: pa.Table, promote: tuple[str, ...] = ()) -> None:
        def column(name: str) -> list[Any]:
            return table.column(name).to_pylist() if name in table.column_names else []

        self.names = column("metric_name")
        self.types = column("metric_type")
        self.units = column("metric_unit")
        self.monotonic = column("is_monotonic")
        self.temporality = column("aggregation_temporality")
        self.verbatim = column("verbatim") or [False] * table.num_rows
        self._attributes = column("attributes")
        self._resource = column("resource_attributes")
        self._infos: dict[tuple[Any, ...], MetricInfo] = {}
        self._bases: dict[MetricInfo, str] = {}
        self.promote = promote
        self.index = _series_index(table) if "series_id" in table.column_names else {}
        self._labels: dict[tuple[Any, ...], tuple[Labels, LabelKey]] = {}

    def info(self, i: int) -> MetricInfo:
        fields = (
            str(self.names[i]),
            str(self.types[i]),
            str(self.units[i] or ""),
            self.monotonic[i],
            self.temporality[i],
            "",
            bool(self.verbatim[i]),
        )
        found = self._infos.get(fields)
        if found is None:
            found = self._infos[fields] = MetricInfo(*fields)
        return found

    def base(self, info: MetricInfo) -> str:
        """``info.base``, worked out once per metric."""
        found = self._bases.get(info)
        if found is None:
            found = self._bases[info] = info.base
        return found

    def attributes(self, i: int) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._attributes[i] or ()}

    def resource(self, i: int) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._resource[i] or ()}

    def labels(
        self, i: int, name: str, extra: dict[str, str] | None = None
    ) -> tuple[Labels, LabelKey]:
        """Row ``i``'s labels under the exposed ``name`` (and ``extra`` labels), and their
        key: worked out once, then shared (label sets are never changed in place), so a
        dashboard's refresh over the same series index rows does none of it again."""
        k = (i, name, tuple(extra.items()) if extra else ())
        found = self._labels.get(k)
        if found is None:
            labels = mapping.series_labels(name, self.attributes(i), self.resource(i), self.promote)
            if extra:
                labels.update(extra)
            found = self._labels[k] = (labels, key(labels))
        return found


def series_label_sets(table: pa.Table, promote: tuple[str, ...] = ()) -> list[Labels]:
    """Every Prometheus label set of the series rows of :meth:`QuerySource.series`."""
    seen: dict[LabelKey, Labels] = {}
    per_series = SeriesRows(table)
    for i in range(table.num_rows):
        info = per_series.info(i)
        attributes = per_series.attributes(i)
        resource = per_series.resource(i)
        base = per_series.base(info)
        extras: list[tuple[str, dict[str, str]]] = []
        if info.metric_type == "histogram":
            bounds = table.column("explicit_bounds")[i].as_py() or []
            extras += [(f"{base}_bucket", {"le": mapping.format_float(b)}) for b in bounds]
            extras += [
                (f"{base}_bucket", {"le": "+Inf"}),
                (f"{base}_sum", {}),
                (f"{base}_count", {}),
            ]
        elif info.metric_type == "summary":
            items = table.column("quantile_values")[i].as_py() or []
            extras += [(base, {"quantile": mapping.format_float(q["quantile"])}) for q in items]
            extras += [(f"{base}_sum", {}), (f"{base}_count", {})]
        else:  # gauges, sums, and exponential histograms (native: the bare name)
            extras.append((base, {}))
        for name, extra in extras:
            labels = mapping.series_labels(name, attributes, resource, promote)
            labels.update(extra)
            seen.setdefault(key(labels), labels)
    return list(seen.values())
