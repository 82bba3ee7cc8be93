"""Reading samples for selectors: SQL over the tenant's ``metrics`` table, then the view.

Each selector becomes one SQL query through :class:`shoal.query.service.QueryService`
(so tenancy, the sandbox and the limits apply) with the time range and the OTLP
metric names pushed down, so file pruning works. The rows are turned into
Prometheus series column-wise: a loop per series, never per sample.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import PromQLError
from shoal.promql import mapping
from shoal.promql.model import NAME, LabelKey, Labels, Series, key
from shoal.query.service import QueryService

logger = logging.getLogger(__name__)

STALE_FLAG = 1
"""OTLP's FLAG_NO_RECORDED_VALUE: the point marks the series as gone (a stale marker)."""

COLUMNS = (
    "metric_name, series_id, time_unix_nano, start_time_unix_nano, flags, value, count, sum, "
    "bucket_counts, explicit_bounds, quantile_values"
)
"""The sample columns; attribute maps are read once per series (:meth:`QuerySource.series`)."""
SERIES_COLUMNS = (
    "metric_name, metric_type, metric_unit, is_monotonic, aggregation_temporality, series_id, "
    "attributes, resource_attributes, explicit_bounds, quantile_values"
)


@dataclasses.dataclass(frozen=True)
class MetricInfo:
    """One OTLP metric as the catalog query sees it, with its Prometheus base name."""

    otlp_name: str
    metric_type: str
    unit: str
    monotonic: bool | None
    temporality: int | None
    description: str

    @property
    def base(self) -> str:
        return mapping.metric_name(self.otlp_name, self.unit, self.metric_type, self.monotonic)

    @property
    def names(self) -> list[str]:
        return mapping.exposed_names(self.base, self.metric_type)


class SampleSource(Protocol):
    async def catalog(self, start_ms: int, end_ms: int) -> list[MetricInfo]: ...

    async def rows(self, otlp_names: Sequence[str], start_ms: int, end_ms: int) -> pa.Table: ...

    async def series(
        self, otlp_names: Sequence[str] | None, start_ms: int, end_ms: int
    ) -> pa.Table: ...

    async def exemplars(
        self, otlp_names: Sequence[str], start_ms: int, end_ms: int
    ) -> pa.Table: ...

    async def targets(
        self, start_ms: int, end_ms: int, times: bool = True
    ) -> tuple[pa.Table, pa.Table]: ...


def _iso(ms: int) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _time_filter(start_ms: int, end_ms: int, alias: str = "") -> str:
    # timestamp is microseconds (floor of the nanoseconds): widen by a millisecond on
    # both ends for the pruning bounds, then cut exactly on time_unix_nano.
    p = f"{alias}." if alias else ""
    return (
        f"{p}timestamp >= '{_iso(start_ms - 1)}' AND {p}timestamp <= '{_iso(end_ms + 1)}' "
        f"AND {p}time_unix_nano >= {start_ms * 1_000_000} "
        f"AND {p}time_unix_nano < {(end_ms + 1) * 1_000_000}"
    )


class QuerySource:
    """Samples of one tenant, read through the query service."""

    def __init__(self, service: QueryService, tenant: str) -> None:
        self.service = service
        self.tenant = tenant

    async def _run(self, sql: str) -> pa.Table:
        cap = self.service.limits.max_samples
        prepared = await self.service.aprepare(self.tenant, sql)
        result = await self.service.execute(prepared, max_rows=cap)
        table = await result.to_table()
        if result.truncated:
            raise PromQLError(
                f"the query reads more than {cap} samples or series (promql_max_samples); "
                "narrow the selector or the time range",
                error_type="execution",
            )
        return table

    async def catalog(self, start_ms: int, end_ms: int) -> list[MetricInfo]:
        sql = (
            "SELECT metric_name, metric_type, metric_unit, is_monotonic, "
            "aggregation_temporality, max(metric_description) AS description FROM metrics "
            f"WHERE {_time_filter(start_ms, end_ms)} GROUP BY 1, 2, 3, 4, 5"
        )
        table = await self._run(sql)
        out = []
        for row in table.to_pylist():
            out.append(
                MetricInfo(
                    str(row["metric_name"]),
                    str(row["metric_type"]),
                    str(row["metric_unit"] or ""),
                    row["is_monotonic"],
                    row["aggregation_temporality"],
                    str(row["description"] or ""),
                )
            )
        return out

    async def rows(self, otlp_names: Sequence[str], start_ms: int, end_ms: int) -> pa.Table:
        names = ", ".join(_quote(n) for n in sorted(set(otlp_names)))
        sql = (
            f"SELECT {COLUMNS} FROM metrics WHERE metric_name IN ({names}) "
            f"AND {_time_filter(start_ms, end_ms)}"
        )
        return await self._run(sql)

    async def series(
        self, otlp_names: Sequence[str] | None, start_ms: int, end_ms: int
    ) -> pa.Table:
        """One row per series (name, type, attribute maps), from its first point in range.

        The first times come from a read without the map columns; the maps are then read
        only between the earliest and the latest first time, usually a sliver of the
        range, and the first row of each series is kept.
        """
        names = ""
        if otlp_names is not None:
            names = ", ".join(_quote(n) for n in sorted(set(otlp_names)))
            names = f"metric_name IN ({names}) AND "
        firsts = await self._run(
            "SELECT min(first_ns) AS lo, max(first_ns) AS hi FROM ("
            "SELECT metric_name, series_id, min(time_unix_nano) AS first_ns FROM metrics "
            f"WHERE {names}{_time_filter(start_ms, end_ms)} GROUP BY metric_name, series_id)"
        )
        lo, hi = firsts.column("lo")[0].as_py(), firsts.column("hi")[0].as_py()
        if lo is None or hi is None:
            return pa.table({c: [] for c in SERIES_COLUMNS.split(", ")})
        rows = await self._run(
            f"SELECT {SERIES_COLUMNS}, time_unix_nano FROM metrics WHERE {names}"
            f"{_time_filter(int(lo) // 1_000_000, int(hi) // 1_000_000)}"
        )
        return first_per_series(rows)

    async def exemplars(self, otlp_names: Sequence[str], start_ms: int, end_ms: int) -> pa.Table:
        names = ", ".join(_quote(n) for n in sorted(set(otlp_names)))
        sql = (
            "SELECT metric_name, metric_type, metric_unit, is_monotonic, aggregation_temporality, "
            "series_id, attributes, resource_attributes, explicit_bounds, exemplars "
            f"FROM metrics WHERE metric_name IN ({names}) AND {_time_filter(start_ms, end_ms)} "
            "AND array_length(exemplars) > 0"
        )
        return await self._run(sql)

    async def targets(
        self, start_ms: int, end_ms: int, times: bool = True
    ) -> tuple[pa.Table, pa.Table]:
        """Each resource (by service and instance) with its attributes, and (with ``times``)
        every time it sent a point. Attributes are read only around each resource's first
        point, as for :meth:`series`."""
        target = (
            "coalesce(service_name, '') AS s, "
            "coalesce(resource_attributes['service.namespace'], '') AS ns, "
            "coalesce(resource_attributes['service.instance.id'], '') AS iid"
        )
        where = _time_filter(start_ms, end_ms)
        empty = pa.table({"s": [], "ns": [], "iid": [], "time_unix_nano": []})
        seen = await self._run(
            f"SELECT {target}, time_unix_nano FROM metrics WHERE {where} GROUP BY 1, 2, 3, 4"
            if times
            else f"SELECT {target}, min(time_unix_nano) AS time_unix_nano FROM metrics "
            f"WHERE {where} GROUP BY 1, 2, 3"
        )
        if seen.num_rows == 0:
            return empty.append_column("resource_attributes", pa.array([])), empty
        firsts = pc.min_max(seen.column("time_unix_nano"))
        lo = int(firsts["min"].as_py()) // 1_000_000
        hi = int(firsts["max"].as_py()) // 1_000_000 if not times else lo
        if times:  # the latest first time over the resources
            keys = _target_keys(seen)
            t = seen.column("time_unix_nano").to_pylist()
            first: dict[tuple[str, str, str], int] = {}
            for k, ti in zip(keys, t, strict=True):
                first[k] = min(first.get(k, ti), ti)
            hi = max(first.values()) // 1_000_000
        rows = await self._run(
            f"SELECT {target}, resource_attributes FROM metrics WHERE {_time_filter(lo, hi)}"
        )
        unique: dict[tuple[str, str, str], int] = {}
        for i, k in enumerate(_target_keys(rows)):
            unique.setdefault(k, i)
        resources = rows.take(pa.array(list(unique.values()), type=pa.int64()))
        return resources, seen if times else empty


def _target_keys(table: pa.Table) -> list[tuple[str, str, str]]:
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
        _target_keys(resources), resources.column("resource_attributes").to_pylist(), strict=True
    ):
        labels = mapping.target_labels({str(a): str(b) for a, b in raw or []})
        if labels is not None:
            labels_of[k] = labels
    if not labels_of or times.num_rows == 0:
        return []
    t_ms = np.asarray(times.column("time_unix_nano").to_numpy(), dtype=np.int64) // 1_000_000
    keys = _target_keys(times)
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

    def regex(self) -> re.Pattern[str]:
        try:
            return re.compile(self.value)
        except re.error as exc:
            raise PromQLError(f"invalid regular expression {self.value!r}: {exc}") from None

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = self.regex().fullmatch(value) is not None
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


def _map_at(column: pa.ChunkedArray, i: int) -> dict[str, str]:
    raw = column[i].as_py()
    if not raw:
        return {}
    return {str(k): str(v) for k, v in raw}


class _Collector:
    def __init__(self) -> None:
        self.parts: dict[
            LabelKey, tuple[Labels, list[np.ndarray], list[np.ndarray], list[np.ndarray]]
        ]
        self.parts = {}

    def add(self, labels: Labels, t: np.ndarray, v: np.ndarray, stale: np.ndarray) -> None:
        k = key(labels)
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
            t = np.concatenate(ts).astype(np.int64)
            v = np.concatenate(vs).astype(np.float64)
            s = np.concatenate(ss).astype(bool)
            if len(ts) > 1:
                order = np.argsort(t, kind="stable")
                t, v, s = t[order], v[order], s[order]
                # same timestamp twice (two OTLP series mapped onto one): the last wins
                keep = np.ones(len(t), dtype=bool)
                keep[:-1] = t[1:] != t[:-1]
                t, v, s = t[keep], v[keep], s[keep]
            out.append(Series(labels, t, v, s if s.any() else None))
        return out


def _floats(column: pa.ChunkedArray, rows: np.ndarray) -> np.ndarray:
    taken = column.take(pa.array(rows))
    return np.asarray(taken.to_numpy(zero_copy_only=False), dtype=np.float64)


def restarts(t_ms: np.ndarray, start_ns: np.ndarray) -> np.ndarray:
    """Start times (ms) of restarts: a point whose start time changed and lies after the
    previous point. A zero sample there makes ``rate`` and ``increase`` see the reset even
    when the new count already exceeds the old one."""
    if len(t_ms) < 2:
        return np.zeros(0, dtype=np.int64)
    start_ms = start_ns // 1_000_000
    new = (start_ns[1:] != start_ns[:-1]) & (start_ns[1:] > 0)
    new &= (start_ms[1:] > t_ms[:-1]) & (start_ms[1:] < t_ms[1:])
    return np.asarray(start_ms[1:][new], dtype=np.int64)


def first_per_series(rows: pa.Table) -> pa.Table:
    """The earliest row of each (metric name, series id) in ``rows``."""
    if rows.num_rows == 0:
        return rows
    names = rows.column("metric_name").combine_chunks().dictionary_encode()
    code = np.asarray(names.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    sid = np.asarray(rows.column("series_id").to_numpy(), dtype=np.int64)
    t = np.asarray(rows.column("time_unix_nano").to_numpy(), dtype=np.int64)
    order = np.lexsort((t, sid, code))
    first = np.ones(len(order), dtype=bool)
    first[1:] = (code[order][1:] != code[order][:-1]) | (sid[order][1:] != sid[order][:-1])
    return rows.take(pa.array(order[first]))


def _series_index(labels: pa.Table) -> dict[tuple[str, int], int]:
    names = labels.column("metric_name").to_pylist()
    sids = labels.column("series_id").to_pylist()
    return {(str(n), int(i)): row for row, (n, i) in enumerate(zip(names, sids, strict=True))}


def to_series(
    table: pa.Table, labels: pa.Table, wanted: Sequence[str] | None = None
) -> list[Series]:
    """Prometheus series of the fetched samples.

    ``labels`` holds one row per OTLP series (:meth:`QuerySource.series`) with its type
    and attribute maps; ``wanted`` limits the exposed names.
    """
    n = table.num_rows
    if n == 0:
        return []
    index = _series_index(labels)
    names = table.column("metric_name").combine_chunks().dictionary_encode()
    dictionary = [str(x) for x in names.dictionary.to_pylist()]
    name_code = np.asarray(names.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    sid = np.asarray(table.column("series_id").to_numpy(), dtype=np.int64)
    tns = np.asarray(table.column("time_unix_nano").to_numpy(), dtype=np.int64)
    order = np.lexsort((tns, sid, name_code))
    name_code, sid, tns = name_code[order], sid[order], tns[order]
    change = np.ones(n, dtype=bool)
    change[1:] = (name_code[1:] != name_code[:-1]) | (sid[1:] != sid[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    flags = np.asarray(table.column("flags").to_numpy(), dtype=np.int64)[order]
    start_ns = np.asarray(table.column("start_time_unix_nano").to_numpy(), dtype=np.int64)[order]
    wanted_set = set(wanted) if wanted is not None else None
    out = _Collector()
    lists: tuple[FlatLists, FlatLists] | None = None
    for a, b in zip(starts, ends, strict=True):
        row = index.get((dictionary[int(name_code[a])], int(sid[a])))
        if row is None:  # written between the two reads: seen by the next query
            continue
        rows = order[a:b]
        info = _info_at(labels, row)
        attributes = _map_at(labels.column("attributes"), row)
        resource = _map_at(labels.column("resource_attributes"), row)
        t = tns[a:b] // 1_000_000
        stale = (flags[a:b] & STALE_FLAG) != 0
        base = info.base
        emit = _Emitter(out, wanted_set, attributes, resource, t, stale)
        cumulative = info.metric_type == "summary" or (
            info.temporality == 2
            and (info.metric_type == "histogram" or (info.metric_type == "sum" and info.monotonic))
        )
        if cumulative:
            emit.zeros = restarts(t, start_ns[a:b])
        if info.metric_type in ("gauge", "sum"):
            v = _floats(table.column("value"), rows)
            if info.metric_type == "sum" and info.temporality == 1:
                # delta sums: the running total of the fetched points (docs/rationale.md)
                v = np.cumsum(np.where(stale | np.isnan(v), 0.0, v))
            emit(base, v)
        elif info.metric_type == "histogram":
            if lists is None:
                lists = (
                    FlatLists(table.column("explicit_bounds")),
                    FlatLists(table.column("bucket_counts")),
                )
            _histogram(table, rows, base, emit, info.temporality == 1, lists)
        elif info.metric_type == "summary":
            _summary(table, rows, base, emit)
    return out.series()


@dataclasses.dataclass
class _Emitter:
    """Adds the series of one OTLP series under one exposed name (and extra labels)."""

    out: _Collector
    wanted: set[str] | None
    attributes: dict[str, str]
    resource: dict[str, str]
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
        labels = mapping.series_labels(name, self.attributes, self.resource)
        if extra:
            labels.update(extra)
        t, stale = self.t, self.stale
        if keep is not None:
            t, values, stale = t[keep], values[keep], stale[keep]
        if self.zeros is not None and len(self.zeros):
            t = np.concatenate([t, self.zeros])
            values = np.concatenate([values, np.zeros(len(self.zeros))])
            stale = np.concatenate([stale, np.zeros(len(self.zeros), dtype=bool)])
            order = np.argsort(t, kind="stable")
            t, values, stale = t[order], values[order], stale[order]
        self.out.add(labels, t, values, stale)


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


def _histogram(
    table: pa.Table,
    rows: np.ndarray,
    base: str,
    emit: _Emitter,
    delta: bool,
    lists: tuple[FlatLists, FlatLists],
) -> None:
    count = _floats(table.column("count"), rows)
    total = _floats(table.column("sum"), rows)
    if delta:
        count = np.cumsum(np.nan_to_num(count))
        total = np.cumsum(np.nan_to_num(total))
    emit(f"{base}_count", count)
    emit(f"{base}_sum", total)
    bounds, counts = lists
    for layout, sel in _layouts(bounds, counts, rows):
        cum = np.cumsum(counts.matrix(rows[sel], len(layout) + 1), axis=1)
        if delta:
            cum = np.cumsum(cum, axis=0)
        keep = np.zeros(len(rows), dtype=bool)
        keep[sel] = True
        les = [mapping.format_float(b) for b in layout] + ["+Inf"]
        for j, le in enumerate(les):
            full = np.full(len(rows), np.nan)
            full[sel] = cum[:, j]
            emit(f"{base}_bucket", full, {"le": le}, keep)


def _summary(table: pa.Table, rows: np.ndarray, base: str, emit: _Emitter) -> None:
    emit(f"{base}_count", _floats(table.column("count"), rows))
    emit(f"{base}_sum", _floats(table.column("sum"), rows))
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


def _info_at(table: pa.Table, i: int) -> MetricInfo:
    return MetricInfo(
        str(table.column("metric_name")[i].as_py()),
        str(table.column("metric_type")[i].as_py()),
        str(table.column("metric_unit")[i].as_py() or ""),
        table.column("is_monotonic")[i].as_py(),
        table.column("aggregation_temporality")[i].as_py(),
        "",
    )


def series_label_sets(table: pa.Table) -> list[Labels]:
    """Every Prometheus label set of the series rows of :meth:`QuerySource.series`."""
    seen: dict[LabelKey, Labels] = {}
    for i in range(table.num_rows):
        info = _info_at(table, i)
        attributes = _map_at(table.column("attributes"), i)
        resource = _map_at(table.column("resource_attributes"), i)
        base = info.base
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
        elif info.metric_type in ("gauge", "sum"):
            extras.append((base, {}))
        for name, extra in extras:
            labels = mapping.series_labels(name, attributes, resource)
            labels.update(extra)
            seen.setdefault(key(labels), labels)
    return list(seen.values())
