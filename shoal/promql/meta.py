"""The metric browser and metadata calls: series, label names, label values, metadata, exemplars.

They read one row per OTLP series (``GROUP BY series_id`` in SQL, attribute maps
taken once per series) rather than every sample.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.errors import PromQLError
from shoal.promql import fetch, mapping, tree
from shoal.promql.model import NAME, Labels, key
from shoal.promql.output import seconds
from shoal.promql.source import SampleSource
from shoal.promql.tree import Selector


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


async def series(
    source: SampleSource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[Labels]:
    """The label sets of the series matching any of ``matches`` (all series when empty)."""
    found: dict[Any, Labels] = {}
    if not matches:
        table, (resources, _) = await asyncio.gather(
            source.series(None, start_ms, end_ms),
            source.targets(start_ms, end_ms, times=False),
        )
        return fetch.series_label_sets(table, source.promote) + fetch.target_label_sets(resources)
    catalog = await source.catalog(start_ms, end_ms)
    for sel in matches:
        if all(m.matches(mapping.TARGET_INFO) for m in sel.matchers if m.name == NAME):
            resources, _ = await source.targets(start_ms, end_ms, times=False)
            for labels in fetch.target_label_sets(resources):
                if fetch.matches_all(labels, sel.matchers):
                    found.setdefault(key(labels), labels)
        names = fetch.select_metrics(catalog, sel.matchers)
        if not names:
            continue
        table = await source.series(names, start_ms, end_ms)
        for labels in fetch.series_label_sets(table, source.promote):
            if fetch.matches_all(labels, sel.matchers):
                found.setdefault(key(labels), labels)
    return list(found.values())


async def label_names(
    source: SampleSource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[str]:
    names: set[str] = set()
    for labels in await series(source, matches, start_ms, end_ms):
        names.update(labels)
    return sorted(names)


async def label_values(
    source: SampleSource,
    name: str,
    matches: Sequence[Selector],
    start_ms: int,
    end_ms: int,
) -> list[str]:
    if name == "__name__" and not matches:
        catalog = await source.catalog(start_ms, end_ms)
        names = {n for info in catalog for n in info.names}
        resources, _ = await source.targets(start_ms, end_ms, times=False)
        if fetch.target_label_sets(resources):
            names.add(mapping.TARGET_INFO)
        return sorted(names)
    values: set[str] = set()
    for labels in await series(source, matches, start_ms, end_ms):
        value = labels.get(name)
        if value:
            values.add(value)
    return sorted(values)


async def metadata(
    source: SampleSource, metric: str | None, start_ms: int, end_ms: int
) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for info in await source.catalog(start_ms, end_ms):
        if info.metric_type == "exponential_histogram":
            continue
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
    source: SampleSource, matches: Sequence[Selector], start_ms: int, end_ms: int
) -> list[dict[str, Any]]:
    """Exemplars of the series the selectors match, with their trace and span ids."""
    catalog = await source.catalog(start_ms, end_ms)
    groups: dict[Any, tuple[Labels, list[dict[str, Any]]]] = {}
    for sel in matches:
        names = fetch.select_metrics(catalog, sel.matchers)
        if not names:
            continue
        table = await source.exemplars(names, start_ms, end_ms)
        for row in table.to_pylist():
            info = fetch.MetricInfo(
                row["metric_name"],
                row["metric_type"],
                row["metric_unit"] or "",
                row["is_monotonic"],
                row["aggregation_temporality"],
                "",
                bool(row["verbatim"]),
            )
            attributes = {str(k): str(v) for k, v in row["attributes"] or []}
            resource = {str(k): str(v) for k, v in row["resource_attributes"] or []}
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
                if not fetch.matches_all(labels, sel.matchers):
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
