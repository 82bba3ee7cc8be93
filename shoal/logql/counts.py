"""Counting metric queries answered by one SQL aggregation, without reading the entries.

``sum by (level) (count_over_time({service_name="api"} |= "GET" [1m]))`` over a day of
logs is a count per group and time bucket: DataFusion computes it over the files (and the
unflushed rows) of the range, and only the counts come back. The answer is exactly the
one :mod:`shoal.logql.ranges` gives over the entries (the ground-truth tests run such
queries): each step's window ``(t - range, t]`` is a run of whole buckets of the
greatest common divisor of the step and the range.

It applies to ``count_over_time``, ``rate``, ``bytes_over_time`` and ``bytes_rate`` of a
selector with only ``|=``/``!=`` line filters, grouped ``by`` labels (by the range
aggregation itself, or by a ``sum`` right around it) that are stream labels, or
structured metadata of pushed rows (which are their ``attributes``). Anything else, or a
group label that an OTLP row has only as mapped metadata, is left to the general path
(:func:`answer` gives None).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shoal.logql import mapping
from shoal.logql import model as m
from shoal.logql.series import Series, Steps
from shoal.logql.source import LogSource, _iso, pushed_filters, quote
from shoal.logql.streams import matches, stream_labels
from shoal.schema import LOKI_PUSH_SCOPE

COUNTING = frozenset({"count_over_time", "rate", "bytes_over_time", "bytes_rate"})


def grouped(expr: m.Expr) -> Grouped | None:
    """The range aggregation and group labels of a query this module can answer."""
    if isinstance(expr, m.VectorAggregation):
        inner = expr.expr
        if (
            expr.op == "sum" and expr.parameter is None and expr.grouping is not None
            and not expr.grouping.without and isinstance(inner, m.RangeAggregation)
            and inner.grouping is None
        ):  # fmt: skip
            return _plain(inner, expr.grouping.labels)
        return None
    if isinstance(expr, m.RangeAggregation) and expr.grouping is not None:
        if not expr.grouping.without:
            return _plain(expr, expr.grouping.labels)
    return None


Grouped = tuple[m.RangeAggregation, tuple[str, ...]]


def _plain(node: m.RangeAggregation, labels: tuple[str, ...]) -> Grouped | None:
    if node.function not in COUNTING:
        return None
    for stage in node.query.stages:
        if not (isinstance(stage, m.LineFilter) and stage.op in ("|=", "!=") and all(stage.values)):
            return None
    return node, tuple(dict.fromkeys(labels))


def _line_filters(query: m.LogQuery) -> list[str]:
    out = []
    for stage in query.stages:
        assert isinstance(stage, m.LineFilter)
        found = " OR ".join(f"strpos(coalesce(body, ''), {quote(v)}) > 0" for v in stage.values)
        out.append(f"({found})" if stage.op == "|=" else f"NOT ({found})")
    return out


async def answer(source: LogSource, expr: m.Expr, steps: Steps) -> list[Series] | None:
    """The series of ``expr`` at ``steps`` from one aggregation, or None when this
    module cannot answer it exactly."""
    found = grouped(expr)
    if found is None:
        return None
    node, labels = found
    step = steps.step if steps.count > 1 else node.range_ns
    width = math.gcd(step, node.range_ns)
    base = steps.start - node.offset_ns - node.range_ns
    last = steps.end - node.offset_ns
    buckets = ((steps.count - 1) * step + node.range_ns) // width
    where = [
        f"timestamp >= '{_iso((base + 1) // 1000)}'", f"timestamp <= '{_iso(last // 1000)}'",
        *[p for p in pushed_filters(node.query) if not p.startswith("(strpos")],
        *_line_filters(node.query),
    ]  # fmt: skip
    columns = "".join(f", attributes[{quote(n)}] AS {_alias(i)}" for i, n in enumerate(labels))
    keys = ", ".join(str(i + 5) for i in range(len(labels)))
    text = (
        f"SELECT service_name, scope_name, resource_attributes, (ts - {base} + {width} - 1) "
        f"/ {width} - 1 AS bucket{columns}, count(*) AS entries, "
        "sum(octet_length(coalesce(body, ''))) AS bytes FROM "
        f"(SELECT {mapping.TS_SQL}, service_name, scope_name, resource_attributes, attributes, "
        f"body FROM logs WHERE {' AND '.join(where)}) AS rows "
        f"WHERE ts > {base} AND ts <= {last} GROUP BY 1, 2, 3, 4{', ' + keys if keys else ''}"
    )
    table = await source.rows(text)
    sums: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
    use_bytes = node.function in ("bytes_over_time", "bytes_rate")
    mapped: dict[Any, dict[str, str]] = {}
    for row in table.to_pylist():
        key = (row["scope_name"], row["service_name"], tuple(row["resource_attributes"] or ()))
        stream = mapped.get(key)
        if stream is None:
            stream = mapped[key] = stream_labels(row)
        if not matches(stream, node.query.matchers):
            continue
        group: dict[str, str] = {}
        for i, name in enumerate(labels):
            if name in stream:
                group[name] = stream[name]
            elif row["scope_name"] != LOKI_PUSH_SCOPE:
                return None  # an OTLP row's metadata is mapped: the general path knows it
            elif row[_alias(i)]:
                group[name] = row[_alias(i)]
        counts = sums.setdefault(tuple(sorted(group.items())), np.zeros(buckets + 1, np.float64))
        bucket = int(row["bucket"])
        if 0 <= bucket < buckets:
            counts[bucket + 1] += row["bytes"] if use_bytes else row["entries"]
    source.lines_read += int(sum(v.sum() for v in sums.values())) if not use_bytes else 0
    starts = np.arange(steps.count, dtype=np.int64) * (step // width)
    ends = starts + node.range_ns // width
    out = []
    for labels_key, counts in sums.items():
        cumulative = np.cumsum(counts)
        values = cumulative[ends] - cumulative[starts]
        present = values > 0
        if not present.any():
            continue
        if node.function in ("rate", "bytes_rate"):
            values = values / (node.range_ns / 1e9)
        out.append(Series(dict(labels_key), np.where(present, values, 0.0), present))
    return out


def _alias(index: int) -> str:
    return f"group_{index}"
