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
(:func:`answer` gives None). Without line filters and grouped by stream labels, the counts
come from the log index instead (:mod:`shoal.logql.indexed`) when each of its stream
minutes lies in one bucket.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.logql import indexed, mapping
from shoal.logql import model as m
from shoal.logql.frame import codes as codes_of
from shoal.logql.selection import matches, stream_labels
from shoal.logql.series import Series, Steps
from shoal.logql.source import LogSource, _iso, pushed_filters, quote
from shoal.schema import LOKI_PUSH_SCOPE
from shoal.storage import logindex

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
    minutes = None
    if not node.query.stages:
        # the log index has the counts when each of its (stream, minute) rows lies in one
        # bucket: always when the buckets are whole minutes, else when no bucket's edge
        # falls between a minute's first and last entry; then no row is read
        minutes = await indexed.minutes(source, base + 1, last)
        bucket = _bucket_of_minutes(minutes, base, width)
        if bucket is not None:
            grouped_counts = _sums(
                minutes.append_column("bucket", bucket), node, labels, buckets, metadata=False
            )
            if grouped_counts is not None:
                return _series(node, steps, step, width, *grouped_counts, source)
    services = await source.services(node.query, base + 1, last, minutes)
    where = [
        f"timestamp >= '{_iso((base + 1) // 1000)}'", f"timestamp <= '{_iso(last // 1000)}'",
        *[p for p in pushed_filters(node.query, services) if not p.startswith("(strpos")],
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
    grouped_counts = _sums(table, node, labels, buckets)
    if grouped_counts is None:
        return None
    return _series(node, steps, step, width, *grouped_counts, source)


def _bucket_of_minutes(table: pa.Table, base: int, width: int) -> pa.Array | None:
    """The bucket of each summary row (its entries lie in ``[first_ns, last_ns]``), as the
    SQL above numbers them, or None when a bucket's edge cuts some row's entries apart."""

    def bucket(column: str) -> np.ndarray:
        ns = np.asarray(_column(table, column).to_numpy(zero_copy_only=False), np.int64)
        return np.asarray((ns - base + width - 1) // width - 1, np.int64)

    first = bucket("first_ns")
    if not np.array_equal(first, bucket("last_ns")):
        return None
    return pa.array(first, pa.int64())


def _series(
    node: m.RangeAggregation, steps: Steps, step: int, width: int,
    groups: list[dict[str, str]], sums: np.ndarray, source: LogSource,
) -> list[Series]:  # fmt: skip
    if node.function not in ("bytes_over_time", "bytes_rate"):
        source.lines_read += int(sums.sum())
    starts = np.arange(steps.count, dtype=np.int64) * (step // width)
    ends = starts + node.range_ns // width
    cumulative = np.cumsum(sums, axis=1)
    out = []
    for group, row in zip(groups, cumulative, strict=True):
        values = row[ends] - row[starts]
        present = values > 0
        if not present.any():
            continue
        if node.function in ("rate", "bytes_rate"):
            values = values / (node.range_ns / 1e9)
        out.append(Series(group, np.where(present, values, 0.0), present))
    return out


def _sums(
    table: pa.Table, node: m.RangeAggregation, labels: tuple[str, ...], buckets: int,
    metadata: bool = True,
) -> tuple[list[dict[str, str]], np.ndarray] | None:  # fmt: skip
    """Per group of ``labels``, the count (or bytes) per bucket (column 0 left empty for
    the cumulative sums); None when a group label is an OTLP row's mapped metadata, or
    any metadata without ``metadata`` (the log index has none)."""
    n = table.num_rows
    if not n:
        return [], np.zeros((0, buckets + 1))
    resources = _column(table, "resource_attributes")
    keys = pc.binary_join_element_wise(
        pc.fill_null(_column(table, "scope_name"), ""),
        pc.fill_null(_column(table, "service_name"), ""),
        logindex.map_key(resources),
        "\x1d",
    )
    encoded = keys.dictionary_encode()
    stream_of = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, first = np.unique(stream_of, return_index=True)
    streams = []
    for i in first.tolist():
        row = {
            "scope_name": table.column("scope_name")[i].as_py(),
            "service_name": table.column("service_name")[i].as_py(),
            "resource_attributes": resources[i].as_py(),
        }
        streams.append((stream_labels(row), row["scope_name"] == LOKI_PUSH_SCOPE))
    selected = np.array([matches(s, node.query.matchers) for s, _ in streams], dtype=np.bool_)
    keep = selected[stream_of]
    codes = np.zeros(n, dtype=np.int64)
    tables: list[list[str | None]] = []
    for i, name in enumerate(labels):
        chosen = [stream for stream, ok in zip(streams, selected, strict=True) if ok]
        if any(name not in labelled and not (pushed and metadata) for labelled, pushed in chosen):
            return None  # an OTLP row's metadata is mapped: the general path knows it
        per_stream = pa.array([s.get(name) for s, _ in streams], pa.string())
        values = per_stream.take(encoded.indices)
        if metadata:
            found = _column(table, _alias(i))
            values = pc.coalesce(values, pc.if_else(pc.equal(found, ""), None, found))
        index, distinct = codes_of(values)
        tables.append(distinct)
        codes = codes * (len(distinct) + 1) + (index + 1)
    uniques, group_of = np.unique(codes[keep], return_inverse=True)
    weights = _column(table, "bytes" if node.function.startswith("bytes") else "entries")
    amounts = np.asarray(pc.fill_null(weights, 0).to_numpy(zero_copy_only=False), np.float64)[keep]
    bucket = np.asarray(_column(table, "bucket").to_numpy(zero_copy_only=False), np.int64)[keep]
    inside = (bucket >= 0) & (bucket < buckets)
    sums = np.zeros((len(uniques), buckets + 1), dtype=np.float64)
    np.add.at(sums, (group_of[inside], bucket[inside] + 1), amounts[inside])
    out: list[dict[str, str]] = []
    for code in uniques.tolist():
        group: dict[str, str] = {}
        for name, distinct in zip(reversed(labels), reversed(tables), strict=True):
            code, index = divmod(code, len(distinct) + 1)
            if index and distinct[index - 1]:
                group[name] = str(distinct[index - 1])
        out.append(dict(sorted(group.items())))
    return out, sums


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _alias(index: int) -> str:
    return f"group_{index}"
