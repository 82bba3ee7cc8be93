"""Cardinality statistics in the shape of Prometheus' ``/api/v1/status/tsdb``.

Prometheus counts the series of its head block from its postings index; shoal counts
the Prometheus series of a tenant's metrics from the series index (one row per OTLP
series, no sample read): the label sets that ``/api/v1/series`` lists
(:func:`shoal.promql.meta.series`: a histogram is its ``_bucket``, ``_sum`` and
``_count`` series, ``target_info`` is there), so both endpoints agree. The four lists
are Prometheus' own: series per metric name, distinct values per label name, bytes of
the distinct values per label name, and series per label pair; the ``limit`` largest
of each, larger counts first (equal counts by name).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from shoal.promql.model import NAME, Labels

EMPTY_MIN_TIME = 2**63 - 1
EMPTY_MAX_TIME = -(2**63)
"""Prometheus' head reports these bounds when it holds no sample."""


def _top(counts: collections.Counter[str], limit: int) -> list[dict[str, Any]]:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [{"name": name, "value": value} for name, value in ranked]


def tsdb_status(
    label_sets: Sequence[Labels], min_time_ms: int, max_time_ms: int, limit: int = 10
) -> dict[str, Any]:
    """The ``data`` of ``/api/v1/status/tsdb`` for these series (each label set once)."""
    by_metric: collections.Counter[str] = collections.Counter()
    by_pair: collections.Counter[str] = collections.Counter()
    values: dict[str, set[str]] = collections.defaultdict(set)
    for labels in label_sets:
        by_metric[labels.get(NAME, "")] += 1
        for name, value in labels.items():
            by_pair[f"{name}={value}"] += 1
            values[name].add(value)
    by_metric.pop("", None)
    value_counts = collections.Counter({name: len(found) for name, found in values.items()})
    value_bytes = collections.Counter(
        {name: sum(len(v.encode()) for v in found) for name, found in values.items()}
    )
    empty = not label_sets
    return {
        "headStats": {
            "numSeries": len(label_sets),
            "numLabelPairs": len(by_pair),
            "chunkCount": 0,
            "minTime": EMPTY_MIN_TIME if empty else min_time_ms,
            "maxTime": EMPTY_MAX_TIME if empty else max_time_ms,
        },
        "seriesCountByMetricName": _top(by_metric, limit),
        "labelValueCountByLabelName": _top(value_counts, limit),
        "memoryInBytesByLabelName": _top(value_bytes, limit),
        "seriesCountByLabelValuePair": _top(by_pair, limit),
    }
