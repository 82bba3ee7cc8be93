"""Where PromQL's samples come from: the tenant's ``metrics`` table, through the read view.

:class:`QuerySource` reads a few metrics' rows over a time range straight from the
tenant's view (:meth:`shoal.storage.reader.TenantReader.metric_rows`: no SQL, the rows
decoded from each file kept between reads); which series exist, with which labels (the
metrics, the label sets, the resources), comes from the tenant's series index
(:meth:`~shoal.storage.reader.TenantReader.series`) instead of the data. The rarer
reads (exemplars, the targets' times) are SQL through
:class:`shoal.sql.service.QueryService`, so tenancy, the sandbox and the limits apply.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import PromQLError
from shoal.promql import columns
from shoal.promql.labels import SeriesRows
from shoal.promql.mapping import IDENTIFYING, MetricInfo, target_keys
from shoal.promql.model import Series
from shoal.promql.series import to_series
from shoal.schema import METRICS, REMOTE_WRITE_SCOPE
from shoal.sql.service import QueryService
from shoal.storage import series_rows as series_index
from shoal.storage.reader import TenantReader

SAMPLE_KEYS = ("metric_name", "series_id", "time_unix_nano", "start_time_unix_nano", "flags")
COLUMNS_BY_TYPE = {
    "gauge": ("value",),
    "sum": ("value",),
    "histogram": ("count", "sum", "bucket_counts", "explicit_bounds"),
    "summary": ("count", "sum", "quantile_values"),
    "exponential_histogram": (
        "count",
        "sum",
        "exp_scale",
        "exp_zero_count",
        "exp_zero_threshold",
        "exp_positive_offset",
        "exp_positive_bucket_counts",
        "exp_negative_offset",
        "exp_negative_bucket_counts",
    ),
}
"""The sample columns each metric type needs; attribute maps are read once per series
(:meth:`QuerySource.series`), and a gauge's read skips the histogram lists."""


def sample_columns(types: Iterable[str]) -> list[str]:
    """The columns to read for metrics of these types (every sample column if unknown)."""
    wanted = set(types) & set(COLUMNS_BY_TYPE) or set(COLUMNS_BY_TYPE)
    extra = {c for t in wanted for c in COLUMNS_BY_TYPE[t]}
    every = [c for cols in COLUMNS_BY_TYPE.values() for c in cols]
    return [*SAMPLE_KEYS, *sorted(extra, key=every.index)]


SERIES_COLUMNS = (
    "metric_name, metric_type, metric_unit, is_monotonic, aggregation_temporality, series_id, "
    "attributes, resource_attributes, explicit_bounds, quantile_values"
)
CATALOG_KEYS = (
    "metric_name",
    "metric_type",
    "metric_unit",
    "is_monotonic",
    "aggregation_temporality",
)
VERBATIM = f"coalesce(scope_name, '') = '{REMOTE_WRITE_SCOPE}' AS verbatim"
"""Whether a row came by remote write (its name is kept as written; see mapping.MetricInfo)."""


def _iso(ms: int) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_FIRST_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_LAST_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


def _time_filter(start_ms: int, end_ms: int, alias: str = "") -> str:
    # timestamp is microseconds (floor of the nanoseconds): widen by a millisecond on
    # both ends for the pruning bounds, then cut exactly on time_unix_nano.
    p = f"{alias}." if alias else ""
    # offsets and windows may reach past the times a timestamp literal can write
    start_ms = min(max(start_ms, _FIRST_MS), _LAST_MS)
    end_ms = min(max(end_ms, _FIRST_MS), _LAST_MS)
    return (
        f"{p}timestamp >= '{_iso(start_ms - 1)}' AND {p}timestamp <= '{_iso(end_ms + 1)}' "
        f"AND {p}time_unix_nano >= {start_ms * 1_000_000} "
        f"AND {p}time_unix_nano < {(end_ms + 1) * 1_000_000}"
    )


T = TypeVar("T")


class _Answers:
    """Answers derived from index rows, remembered under the rows' fingerprint, at most
    ``max_entries`` of them and ``max_weight`` series in per-series answers. Thread-safe."""

    def __init__(self, max_entries: int, max_weight: int) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[Hashable, tuple[Any, int]] = (
            collections.OrderedDict()
        )
        self._weight = 0

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            self._entries.move_to_end(key)
            return True, entry[0]

    def put(self, key: Hashable, value: Any, weight: int) -> None:
        if weight > self.max_weight:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (value, weight)
            self._weight += weight
            while len(self._entries) > self.max_entries or self._weight > self.max_weight:
                self._weight -= self._entries.popitem(last=False)[1][1]


_ANSWERS = _Answers(max_entries=64, max_weight=250_000)
"""Over every tenant; 250,000 series of label sets are about 100 MB."""


def fingerprint(series: pa.Table) -> tuple[int, int, int]:
    """Which series index rows are: their count, and wrapping sums of their series ids
    and earliest times. Labels are a function of the series id, and what else the
    earliest row decides changes its time, so equal fingerprints mean equal answers."""
    ids = series.column("series_id").to_numpy()
    firsts = series.column("first_ns").to_numpy()
    with np.errstate(over="ignore"):
        return (
            series.num_rows,
            int(np.sum(ids, dtype=np.uint64)),
            int(np.sum(firsts, dtype=np.uint64)),
        )


def _remember(key: Hashable, series: pa.Table, compute: Callable[[], T], per_series: bool) -> T:
    """``compute()``, kept under ``key`` (see :meth:`QuerySource.memo` for its weight)."""
    value = compute()
    weight = 1
    if per_series:
        weight = len(value) if isinstance(value, list) else series.num_rows
    _ANSWERS.put(key, value, weight)
    return value


def _over_cap(cap: int, verb: str = "reads", what: str = "samples or series") -> PromQLError:
    return PromQLError(
        f"the query {verb} more than {cap} {what} (promql_max_samples); "
        "narrow the selector or the time range",
        error_type="execution",
    )


class DerivedSeries(Protocol):
    """Series computed from another table, served as if stored in ``metrics`` (the
    service graph's ``traces_service_graph_*`` from the spans: ``shoal.traceql``).

    :meth:`metric_rows` answers rows of ``METRICS_SCHEMA`` (names and labels as written,
    ``scope_name`` the remote-write convention) in ``[start_ns, end_ns)``, blocking; the
    source adds their series to the index it reads and their rows to the samples of the
    metrics a query names. This is the only way in: PromQL knows nothing of spans."""

    def metric_rows(self, tenant: str, start_ns: int, end_ns: int) -> pa.Table: ...


@dataclasses.dataclass(eq=False)
class QuerySource:
    """Samples of one tenant: the read view for rows and series, SQL for the rest."""

    reader: TenantReader
    service: QueryService
    tenant: str
    promote: tuple[str, ...] = ()
    derived: DerivedSeries | None = None
    _found: dict[tuple[int, int], pa.Table] = dataclasses.field(
        init=False, repr=False, default_factory=dict
    )
    """Index rows by range, for this source's life (one API request)."""
    _finding: threading.Lock = dataclasses.field(
        init=False, repr=False, default_factory=threading.Lock
    )
    """Held while index rows are found: a request's calls made at once (the metric
    browser asks for series, metrics and targets together) find them once."""
    _derived: dict[tuple[int, int], pa.Table] = dataclasses.field(
        init=False, repr=False, default_factory=dict
    )

    def _derived_rows(self, start_ms: int, end_ms: int) -> pa.Table | None:
        """The derived series' rows in the range (kept for this source's life)."""
        if self.derived is None:
            return None
        rows = self._derived.get((start_ms, end_ms))
        if rows is None:
            rows = self.derived.metric_rows(
                self.tenant, start_ms * 1_000_000, (end_ms + 1) * 1_000_000
            )
            self._derived[start_ms, end_ms] = rows
        return rows

    async def _run(self, sql: str) -> pa.Table:
        cap = self.service.limits.max_samples
        prepared = await self.service.aprepare(self.tenant, sql)
        result = await self.service.execute(prepared, max_rows=cap)
        table = await result.to_table()
        if result.truncated:
            raise _over_cap(cap)
        return table

    def memo(
        self, what: Hashable, series: pa.Table, compute: Callable[[], T], per_series: bool = False
    ) -> T:
        """``compute()``, remembered while ``series`` (index rows) stay the same. A
        ``per_series`` answer weighs a series for each label set it lists (a list), or
        for each row of ``series`` (anything else)."""
        key = (self.tenant, self.promote, what, fingerprint(series))
        found, value = _ANSWERS.get(key)
        if not found:
            value = _remember(key, series, compute, per_series)
        answer: T = value
        return answer

    async def amemo(
        self, what: Hashable, series: pa.Table, compute: Callable[[], T], per_series: bool = False
    ) -> T:
        """:meth:`memo` with the working out in a worker thread: for answers that test
        matchers or read columns over many rows (tens of milliseconds at a million
        series), which must not hold up the event loop (other requests, other tenants)
        meanwhile. A remembered answer is returned without the hand-off."""
        key = (self.tenant, self.promote, what, fingerprint(series))
        found, value = _ANSWERS.get(key)
        if not found:
            value = await asyncio.get_running_loop().run_in_executor(
                None, _remember, key, series, compute, per_series
            )
        answer: T = value
        return answer

    def _index_now(self, start_ms: int, end_ms: int) -> pa.Table:
        """The tenant's metric series seen in the range (the series index, no SQL); one
        request's calls over the same range see the same rows."""
        start_ms = min(max(start_ms, _FIRST_MS), _LAST_MS)
        end_ms = min(max(end_ms, _FIRST_MS), _LAST_MS)
        with self._finding:
            known = self._found.get((start_ms, end_ms))
            if known is not None:
                return known
            found = self._found[start_ms, end_ms] = self._find(start_ms, end_ms)
            return found

    def _find(self, start_ms: int, end_ms: int) -> pa.Table:
        found = self.reader.series(
            self.tenant, "metrics", start_ms * 1_000_000, (end_ms + 1) * 1_000_000 - 1
        )
        derived = self._derived_rows(start_ms, end_ms)
        if derived is not None and derived.num_rows:
            schema = series_index.index_schema(METRICS)
            extra = series_index.hold(series_index.summarize(derived, METRICS, schema))
            found = series_index.hold(pa.concat_tables([found, extra.cast(found.schema)]))
        if found.num_rows > self.service.limits.max_samples:
            raise _over_cap(self.service.limits.max_samples, "selects", "series")
        verbatim = columns.among(found.column("scope_name"), [REMOTE_WRITE_SCOPE])
        return found.append_column("verbatim", verbatim)

    async def _index(self, start_ms: int, end_ms: int) -> pa.Table:
        return await asyncio.get_running_loop().run_in_executor(
            None, self._index_now, start_ms, end_ms
        )

    async def metrics(self, start_ms: int, end_ms: int) -> list[MetricInfo]:
        """Each metric (name, type, unit, monotonicity, temporality, origin) in the range."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self.metrics_now, start_ms, end_ms
        )

    def metrics_now(self, start_ms: int, end_ms: int) -> list[MetricInfo]:
        found = self._index_now(start_ms, end_ms)
        return self.memo("metrics", found, lambda: _metrics(found))

    def samples_now(
        self,
        otlp_names: Sequence[str],
        start_ms: int,
        end_ms: int,
        types: Iterable[str] = (),
        wanted: Sequence[str] | None = None,
    ) -> list[Series]:
        self.service.gate.check()
        a = min(max(start_ms, _FIRST_MS), _LAST_MS)
        b = min(max(end_ms, _FIRST_MS), _LAST_MS)
        table = self.reader.metric_rows(
            self.tenant,
            sorted(set(otlp_names)),
            sample_columns(types),
            a * 1_000_000,
            (b + 1) * 1_000_000,
            self.service.limits.max_samples,
        )
        derived = self._derived_rows(a, b)
        if derived is not None and derived.num_rows:
            named = pc.is_in(derived.column("metric_name"), pa.array(sorted(set(otlp_names))))
            picked = derived.filter(named).select(table.column_names)
            if picked.num_rows:
                joined = pa.concat_tables([table, picked.cast(table.schema)])
                table = joined.unify_dictionaries().combine_chunks()
        if table.num_rows > self.service.limits.max_samples:
            raise _over_cap(self.service.limits.max_samples)
        labels = self._series_now(otlp_names, start_ms, end_ms)
        # labels worked out per series, kept while the index rows stay the same
        rows = self.memo(
            ("series rows", tuple(sorted(set(otlp_names)))),
            labels,
            lambda: SeriesRows(labels, self.promote),
            per_series=True,
        )
        return to_series(table, labels, wanted, self.promote, rows)

    def _series_now(self, otlp_names: Sequence[str] | None, start_ms: int, end_ms: int) -> pa.Table:
        found = self._index_now(start_ms, end_ms)
        found = found.select([*SERIES_COLUMNS.split(", "), "verbatim", "first_ns"])
        if otlp_names is not None:
            keep = columns.among(found.column("metric_name"), sorted(set(otlp_names)))
            # a selector that names no metric names them all: copying every row (a million
            # series: ~50 ms) would change nothing
            if not pc.all(keep).as_py():
                found = found.filter(keep)
        return found

    async def series(
        self, otlp_names: Sequence[str] | None, start_ms: int, end_ms: int
    ) -> pa.Table:
        """One row per series in the range (name, type, attribute maps), from the series
        index: the labels of its earliest row."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self._series_now, otlp_names, start_ms, end_ms
        )

    async def exemplars(self, otlp_names: Sequence[str], start_ms: int, end_ms: int) -> pa.Table:
        names = ", ".join(_quote(n) for n in sorted(set(otlp_names)))
        sql = (
            "SELECT metric_name, metric_type, metric_unit, is_monotonic, aggregation_temporality, "
            f"{VERBATIM}, series_id, attributes, resource_attributes, explicit_bounds, exemplars "
            f"FROM metrics WHERE metric_name IN ({names}) AND {_time_filter(start_ms, end_ms)} "
            "AND array_length(exemplars) > 0"
        )
        return await self._run(sql)

    async def targets(
        self, start_ms: int, end_ms: int, times: bool = True
    ) -> tuple[pa.Table, pa.Table]:
        """Each resource (by service and instance) with its attributes, and (with ``times``)
        every time it sent a point. Attributes are read only around each resource's first
        point, as for :meth:`series`. Without ``times``, from the series index, for the
        target_info label sets (:func:`_resources`)."""
        target = (
            "coalesce(service_name, '') AS s, "
            "coalesce(resource_attributes['service.namespace'], '') AS ns, "
            "coalesce(resource_attributes['service.instance.id'], '') AS iid"
        )
        where = _time_filter(start_ms, end_ms)
        empty = pa.table({"s": [], "ns": [], "iid": [], "time_unix_nano": []})
        if not times:  # the resources alone: from the series index
            found = await self._index(start_ms, end_ms)
            return await self.amemo("resources", found, lambda: _resources(found)), empty
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
            keys = target_keys(seen)
            t = seen.column("time_unix_nano").to_pylist()
            first: dict[tuple[str, str, str], int] = {}
            for k, ti in zip(keys, t, strict=True):
                first[k] = min(first.get(k, ti), ti)
            hi = max(first.values()) // 1_000_000
        rows = await self._run(
            f"SELECT {target}, resource_attributes FROM metrics WHERE {_time_filter(lo, hi)}"
        )
        unique: dict[tuple[str, str, str], int] = {}
        for i, k in enumerate(target_keys(rows)):
            unique.setdefault(k, i)
        resources = rows.take(pa.array(list(unique.values()), type=pa.int64()))
        return resources, seen if times else empty


def _metrics(found: pa.Table) -> list[MetricInfo]:
    keys = [*CATALOG_KEYS, "verbatim"]
    # distinct descriptions too, then the greatest per metric: Arrow has no min/max of
    # dictionary-encoded strings, and the index holds its strings so
    columns_read = [*keys, "metric_description"]
    first, _ = columns.distinct_rows(found, columns_read)
    described: dict[tuple[Any, ...], str] = {}
    for row in found.select(columns_read).take(pa.array(first)).to_pylist():
        k = tuple(row[name] for name in keys)
        text = str(row["metric_description"] or "")
        described[k] = max(described.get(k, text), text)
    return [
        MetricInfo(str(n), str(t), str(u or ""), mono, temporality, text, bool(verbatim))
        for (n, t, u, mono, temporality, verbatim), text in described.items()
    ]


def _resources(found: pa.Table) -> pa.Table:
    """One row per resource (service, namespace, instance) of the index rows ``found``:
    its first row's. Grouped on the values as the index holds them (dictionary codes),
    then once more on their text (null and "" are one resource), over the few groups.
    None at all when no row's resource holds an attribute beyond its identity (remote
    write's never do), which is seen without grouping: such resources make no
    target_info, all that the resources alone are read for."""
    attrs = found.column("resource_attributes")
    if not columns.any_key_besides(attrs, sorted(IDENTIFYING)):
        none = {name: pa.array([], pa.string()) for name in _RESOURCE}
        return pa.table({**none, "resource_attributes": attrs.slice(0, 0)})
    coded = pa.table(
        {
            "s": found.column("service_name"),
            "ns": columns.lookup_encoded(attrs, "service.namespace"),
            "iid": columns.lookup_encoded(attrs, "service.instance.id"),
            "row": pa.array(np.arange(found.num_rows, dtype=np.int64)),
        }
    )
    groups = coded.group_by(["s", "ns", "iid"], use_threads=False).aggregate([("row", "min")])
    texts = pa.table(
        {name: pc.fill_null(series_index.plain(groups.column(name)), "") for name in _RESOURCE}
    ).append_column("row", groups.column("row_min"))
    firsts = texts.group_by(list(_RESOURCE), use_threads=False).aggregate([("row", "min")])
    firsts = firsts.sort_by("row_min")
    rows = firsts.column("row_min")
    return firsts.select(list(_RESOURCE)).append_column("resource_attributes", attrs.take(rows))


_RESOURCE = ("s", "ns", "iid")
