"""Where PromQL's samples come from: SQL over the tenant's ``metrics`` table.

:class:`QuerySource` reads through :class:`shoal.query.service.QueryService`, so
tenancy, the sandbox and the limits apply, with the time range and the OTLP metric
names pushed down so file pruning works. :class:`SampleSource` is the protocol the
engine uses; a test or a future series index can stand in for it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import PromQLError
from shoal.promql.fetch import MetricInfo, target_keys
from shoal.promwrite import SCOPE
from shoal.query.service import QueryService

COLUMNS = (
    "metric_name, series_id, time_unix_nano, start_time_unix_nano, flags, value, count, sum, "
    "bucket_counts, explicit_bounds, quantile_values"
)
"""The sample columns; attribute maps are read once per series (:meth:`QuerySource.series`)."""
SERIES_COLUMNS = (
    "metric_name, metric_type, metric_unit, is_monotonic, aggregation_temporality, series_id, "
    "attributes, resource_attributes, explicit_bounds, quantile_values"
)
VERBATIM = f"coalesce(scope_name, '') = '{SCOPE}' AS verbatim"
"""Whether a row came by remote write (its name is kept as written; see fetch.MetricInfo)."""


class SampleSource(Protocol):
    promote: tuple[str, ...]
    """Resource attribute keys shown as labels of every series."""

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


class QuerySource:
    """Samples of one tenant, read through the query service."""

    def __init__(self, service: QueryService, tenant: str, promote: tuple[str, ...] = ()) -> None:
        self.service = service
        self.tenant = tenant
        self.promote = promote

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
            f"aggregation_temporality, {VERBATIM}, max(metric_description) AS description "
            f"FROM metrics WHERE {_time_filter(start_ms, end_ms)} GROUP BY 1, 2, 3, 4, 5, 6"
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
                    bool(row["verbatim"]),
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
            return pa.table({c: [] for c in [*SERIES_COLUMNS.split(", "), "verbatim"]})
        rows = await self._run(
            f"SELECT {SERIES_COLUMNS}, {VERBATIM}, time_unix_nano FROM metrics WHERE {names}"
            f"{_time_filter(int(lo) // 1_000_000, int(hi) // 1_000_000)}"
        )
        return first_per_series(rows)

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
