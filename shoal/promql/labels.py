"""The label sets of OTLP series under Prometheus' names, worked out once per series.

:class:`SeriesRows` holds the series index rows of a read (one row per OTLP series: its
type, unit and attribute maps) converted to Python once, and gives each row's labels
under an exposed name; :func:`series_label_sets` lists every label set the rows expose.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from shoal.promql import label_columns, mapping
from shoal.promql.mapping import MetricInfo
from shoal.promql.model import LabelKey, Labels, key
from shoal.storage.series_rows import plain


class SeriesRows:
    """The series rows of :meth:`QuerySource.series`, converted to Python once per call
    (indexing Arrow columns one value at a time costs more than the conversion)."""

    def __init__(self, table: pa.Table, promote: tuple[str, ...] = ()) -> None:
        def column(name: str) -> list[Any]:
            if name not in table.column_names:
                return []
            return list(plain(table.column(name)).to_pylist())

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
        self._kinds: dict[int, tuple[MetricInfo, str, bool]] = {}
        self.promote = promote
        self.index = series_index(table) if "series_id" in table.column_names else {}
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

    def kind(self, i: int) -> tuple[MetricInfo, str, bool]:
        """Row ``i``'s :meth:`info`, its :meth:`base` name, and whether its points count
        from a start time (cumulative counters, histograms and every summary), whose
        restarts add a zero sample: worked out once per row."""
        found = self._kinds.get(i)
        if found is None:
            info = self.info(i)
            cumulative = info.metric_type == "summary" or (
                info.temporality == 2
                and (
                    info.metric_type in ("histogram", "exponential_histogram")
                    or (info.metric_type == "sum" and bool(info.monotonic))
                )
            )
            found = self._kinds[i] = (info, self.base(info), cumulative)
        return found

    def base(self, info: MetricInfo) -> str:
        """``info.base``, worked out once per metric."""
        found = self._bases.get(info)
        if found is None:
            found = self._bases[info] = info.base
        return found

    def attributes(self, i: int) -> dict[str, str]:
        return mapping.text_map(self._attributes[i])

    def resource(self, i: int) -> dict[str, str]:
        return mapping.text_map(self._resource[i])

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
    """Every Prometheus label set of the series rows of :meth:`QuerySource.series`, in
    label order (:func:`shoal.promql.model.key`), as Prometheus lists series: made column
    by column where the rows allow it (:mod:`shoal.promql.label_columns`)."""
    found = label_columns.label_sets(table, promote)
    return found if found is not None else label_sets_by_row(table, promote)


def label_sets_by_row(table: pa.Table, promote: tuple[str, ...] = ()) -> list[Labels]:
    """:func:`series_label_sets`, each row's label sets made in Python: for every row."""
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
    return [seen[k] for k in sorted(seen)]


def series_index(labels: pa.Table) -> dict[tuple[str, int], int]:
    """Each series' row, by (OTLP metric name, series id)."""
    names = plain(labels.column("metric_name")).to_pylist()
    sids = labels.column("series_id").to_pylist()
    return {(str(n), int(i)): row for row, (n, i) in enumerate(zip(names, sids, strict=True))}
