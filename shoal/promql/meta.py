"""The metric browser and metadata calls: series, label names, label values, metadata, exemplars.

They read one row per OTLP series (``GROUP BY series_id`` in SQL, attribute maps
taken once per series) rather than every sample.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import PromQLError
from shoal.promql import candidates, columns, label_columns, mapping, tree
from shoal.promql import labels as series_labels
from shoal.promql.matchers import LabelMatcher, matches_all, select_metrics
from shoal.promql.model import NAME, Labels, key
from shoal.promql.output import seconds
from shoal.promql.source import QuerySource
from shoal.promql.tree import Selector
from shoal.storage import series_rows as series_index


def selectors(texts: Sequence[str], start_ms: int, end_ms: int) -> list[Selector]:
    """``match[]`` arguments: each must be an instant vector selector."""
    out = []
    for text in texts:
        node = tree.parse(text, start_ms, end_ms)
        if not isinstance(node, Selector) or node.range_ms is not None:
            raise PromQLError(f'invalid parameter "match[]": {text!r} is not a series selector')
        if all(m.matches("") for m in node.matchers):
            raise PromQLError(
                'invalid parameter "match[]": match[] must contain at least one non-empty matcher'
            )
        out.append(node)
    return out


async def _every_series(
    source: QuerySource, start_ms: int, end_ms: int
) -> tuple[pa.Table, pa.Table]:
    """The index rows of every series in the range, and their resources."""
    table, (resources, _) = await asyncio.gather(
        source.series(None, start_ms, end_ms),
        source.targets(start_ms, end_ms, times=False),
    )
    return table, resources


async def series(
    source: QuerySource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[Labels]:
    """The label sets of the series matching any of ``matches`` (all series when empty),
    in label order, as Prometheus lists them."""
    if not matches:
        table, resources = await _every_series(source, start_ms, end_ms)
        return list(
            await source.amemo(
                "sorted label sets",
                table,
                lambda: _sorted(
                    series_labels.series_label_sets(table, source.promote)
                    + mapping.target_label_sets(resources)
                ),
                per_series=True,
            )
        )
    parts: list[list[Labels]] = []
    infos = await source.metrics(start_ms, end_ms)
    for sel in matches:
        if all(m.matches(mapping.TARGET_INFO) for m in sel.matchers if m.name == NAME):
            resources, _ = await source.targets(start_ms, end_ms, times=False)
            parts.append(
                [
                    labels
                    for labels in mapping.target_label_sets(resources)
                    if matches_all(labels, sel.matchers)
                ]
            )
        names = select_metrics(infos, sel.matchers)
        if not names:
            continue
        table = await source.series(names, start_ms, end_ms)
        matchers = tuple(sel.matchers)
        parts.append(
            await source.amemo(
                ("matching label sets", tuple(sorted(names)), matchers),
                table,
                functools.partial(_matching, table, matchers, source.promote),
                per_series=True,
            )
        )
    parts = [part for part in parts if part]
    if len(parts) == 1:  # the usual call: one selector, its answer already in order
        return list(parts[0])
    found: dict[Any, Labels] = {}
    for part in parts:
        for labels in part:
            found.setdefault(key(labels), labels)
    return _sorted(list(found.values()))


def _sorted(label_sets: list[Labels]) -> list[Labels]:
    return sorted(label_sets, key=key)


def _matching(
    table: pa.Table, matchers: Sequence[LabelMatcher], promote: tuple[str, ...]
) -> list[Labels]:
    """The label sets of the index rows ``table`` that ``matchers`` select, in order:
    made only for the rows the matchers may select (:func:`candidates.narrow`)."""
    rows = candidates.narrow(table, matchers, promote)
    found = label_columns.label_sets(rows, promote, matchers)
    if found is not None:
        return found
    label_sets = series_labels.series_label_sets(rows, promote)  # in order already
    return [labels for labels in label_sets if matches_all(labels, matchers)]


async def label_names(
    source: QuerySource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[str]:
    if not matches:
        table, resources = await _every_series(source, start_ms, end_ms)
        return await source.amemo(
            "label names",
            table,
            lambda: sorted(_all_label_names(table, resources, source.promote)),
        )
    names: set[str] = set()
    for labels in await series(source, matches, start_ms, end_ms):
        names.update(labels)
    return sorted(names)


def _all_label_names(table: pa.Table, resources: pa.Table, promote: tuple[str, ...]) -> set[str]:
    """The label names of every series of ``table`` (index rows) and every target_info,
    computed column-wise: the same set as the label sets of :func:`series` hold."""
    names: set[str] = set()
    if table.num_rows:
        names.add(NAME)
        keys = columns.valued_keys(table.column("attributes"))
        names.update(mapping.label_name(k) for k in keys)
        present = columns.valued_keys(table.column("resource_attributes"))
        names.update(
            mapping.label_name(k) for k in promote if k in present and k not in mapping.IDENTIFYING
        )
        if mapping.SERVICE_NAME in present:
            names.add("job")
        if mapping.SERVICE_INSTANCE_ID in present:
            names.add("instance")
        types = set(pc.unique(table.column("metric_type")).to_pylist())
        if "histogram" in types:
            names.add("le")
        if "summary" in types:
            quantiles = table.filter(pc.equal(table.column("metric_type"), "summary"))
            if pc.sum(pc.list_value_length(quantiles.column("quantile_values"))).as_py():
                names.add("quantile")
    for labels in mapping.target_label_sets(resources):
        names.update(labels)
    return names


async def label_values(
    source: QuerySource,
    name: str,
    matches: Sequence[Selector],
    start_ms: int,
    end_ms: int,
) -> list[str]:
    if not matches:
        table, infos, (resources, _) = await asyncio.gather(
            source.series(None, start_ms, end_ms),
            source.metrics(start_ms, end_ms),
            source.targets(start_ms, end_ms, times=False),
        )

        def every_value() -> list[str] | None:
            if name == NAME:
                names = {n for info in infos for n in info.names}
                if mapping.target_label_sets(resources):
                    names.add(mapping.TARGET_INFO)
                return sorted(names)
            found = _all_label_values(name, table, resources, source.promote)
            return None if found is None else sorted(found)

        answer = await source.amemo(("label values", name), table, every_value)
        if answer is not None:
            return answer
    values: set[str] = set()
    for labels in await series(source, matches, start_ms, end_ms):
        value = labels.get(name)
        if value:
            values.add(value)
    return sorted(values)


def _all_label_values(
    name: str, table: pa.Table, resources: pa.Table, promote: tuple[str, ...]
) -> set[str] | None:
    """The values of label ``name`` over every series and target_info, computed
    column-wise; None where only the label sets themselves can tell (an attribute
    that the mapping may override or join: several attribute keys, a promoted
    resource attribute, or an attribute named like a label the mapping sets)."""
    values: set[str] = set()
    for labels in mapping.target_label_sets(resources):
        if labels.get(name):
            values.add(labels[name])
    if table.num_rows == 0:
        return values
    if name == NAME or any(
        mapping.label_name(k) == name for k in promote if k not in mapping.IDENTIFYING
    ):
        return None
    attributes = table.column("attributes")
    sources = [k for k in columns.valued_keys(attributes) if mapping.label_name(k) == name]
    if name in ("job", "instance", "le", "quantile"):
        if sources:
            return None
        if name in ("job", "instance"):
            return values | _job_instance_values(table, name)
        kind, column = ("histogram", "explicit_bounds") if name == "le" else ("summary", "")
        rows = table.filter(pc.equal(table.column("metric_type"), kind))
        if name == "le":
            bounds = pc.unique(pc.list_flatten(rows.column(column))).to_pylist()
            values.update(mapping.format_float(b) for b in bounds)
            if rows.num_rows:
                values.add("+Inf")
        else:
            items = pc.list_flatten(rows.column("quantile_values"))
            quantiles = pc.unique(pc.struct_field(items, "quantile")).to_pylist()
            values.update(mapping.format_float(q) for q in quantiles)
        return values
    if len(sources) > 1:
        return None
    if sources:
        values.update(columns.values_under(attributes, sources[0]))
    return values


def _job_instance_values(table: pa.Table, name: str) -> set[str]:
    """The ``job`` or ``instance`` values of the index rows ``table`` (from each
    row's resource attributes, as :func:`mapping.job_instance` makes them)."""
    attrs = table.column("resource_attributes")

    def attr(key: str) -> pa.ChunkedArray:  # as the index holds them: distinct values are few
        return columns.lookup_encoded(attrs, key)

    def text(values: pa.ChunkedArray | pa.Array) -> list[str]:
        return [str(v or "") for v in series_index.plain(values).to_pylist()]

    if name == "instance":
        instances = columns.values_under_once(attrs, mapping.SERVICE_INSTANCE_ID)
        if instances is not None:  # no resource holds the key twice: no entry to choose
            return instances
        return set(text(pc.unique(attr(mapping.SERVICE_INSTANCE_ID)))) - {""}
    pairs = pa.table({"n": attr(mapping.SERVICE_NAME), "ns": attr(mapping.SERVICE_NAMESPACE)})
    distinct = pairs.group_by(["n", "ns"], use_threads=False).aggregate([])
    found = mapping.job_instance
    return {
        found({mapping.SERVICE_NAME: n, mapping.SERVICE_NAMESPACE: ns}).get("job", "")
        for n, ns in zip(text(distinct.column("n")), text(distinct.column("ns")), strict=True)
    } - {""}


async def metadata(
    source: QuerySource, metric: str | None, start_ms: int, end_ms: int
) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for info in await source.metrics(start_ms, end_ms):
        base = info.base
        if metric is not None and metric != base:
            continue
        entry = {
            "type": mapping.prom_type(info.metric_type, info.monotonic, info.temporality),
            "help": info.description,
            "unit": info.unit if info.verbatim else mapping.UNITS.get(info.unit, ""),
        }
        if entry not in out.setdefault(base, []):
            out[base].append(entry)
    return out


async def exemplars(
    source: QuerySource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[dict[str, Any]]:
    """Exemplars of the series the selectors match, with their trace and span ids."""
    infos = await source.metrics(start_ms, end_ms)
    groups: dict[Any, tuple[Labels, list[dict[str, Any]]]] = {}
    for sel in matches:
        names = select_metrics(infos, sel.matchers)
        if not names:
            continue
        table = await source.exemplars(names, start_ms, end_ms)
        for row in table.to_pylist():
            info = mapping.MetricInfo(
                row["metric_name"],
                row["metric_type"],
                row["metric_unit"] or "",
                row["is_monotonic"],
                row["aggregation_temporality"],
                "",
                bool(row["verbatim"]),
            )
            attributes = mapping.text_map(row["attributes"])
            resource = mapping.text_map(row["resource_attributes"])
            bounds = list(row["explicit_bounds"] or [])
            for ex in row["exemplars"] or []:
                t_ms = int(ex["time_unix_nano"]) // 1_000_000
                if not start_ms <= t_ms <= end_ms:
                    continue
                value = float(ex["value"])
                if info.metric_type == "histogram":
                    idx = int(np.searchsorted(np.asarray(bounds, dtype=np.float64), value, "left"))
                    le = mapping.format_float(bounds[idx]) if idx < len(bounds) else "+Inf"
                    labels = mapping.series_labels(
                        f"{info.base}_bucket", attributes, resource, source.promote
                    )
                    labels["le"] = le
                else:
                    labels = mapping.series_labels(info.base, attributes, resource, source.promote)
                if not matches_all(labels, sel.matchers):
                    continue
                ex_labels = {
                    mapping.label_name(str(k)): str(v) for k, v in ex["filtered_attributes"] or []
                }
                if ex["trace_id"]:
                    ex_labels["trace_id"] = ex["trace_id"]
                if ex["span_id"]:
                    ex_labels["span_id"] = ex["span_id"]
                slot = groups.setdefault(key(labels), (labels, []))
                slot[1].append(
                    {
                        "labels": ex_labels,
                        "value": mapping.format_float(value),
                        "timestamp": seconds(t_ms),
                    }
                )
    return [
        {"seriesLabels": labels, "exemplars": sorted(items, key=lambda e: e["timestamp"])}
        for labels, items in groups.values()
    ]
