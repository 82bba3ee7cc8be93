"""A search's answer as Tempo writes it: ``{"traces": [...], "metrics": {...}}``.

Each trace: ``traceID`` (hex, leading zeros dropped, as Tempo's ``TraceIDToHexString``),
``rootServiceName`` (``<root span not yet received>`` when no span without a parent
arrived), ``rootTraceName``, ``startTimeUnixNano`` and ``durationMs`` over the spans
read, and ``spanSets``: per spanset its first ``spss`` spans by start time (``spanID``,
``name``, ``startTimeUnixNano``, ``durationNanos``, the attributes the query names plus
``service.name``), ``matched`` (how many spans it holds) and its ``by()`` attributes;
``spanSet`` repeats the first, as Tempo does for older clients. Traces come most recent
first; 64-bit numbers are strings and zero values are left out, as gogo's ``jsonpb``
writes them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.arrays import unique
from shoal.traceql import plan
from shoal.traceql.evaluate import SpanFields
from shoal.traceql.frame import ROOT_NOT_YET_RECEIVED, Frame
from shoal.traceql.spansets import SpanSets
from shoal.traceql.values import Values

_STATUS = {0: "unset", 1: "ok", 2: "error"}
_KIND = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _valid(column: Any) -> Any:
    return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


class _Cells:
    """One column's values by row, read out one at a time."""

    def __init__(self, column: Any) -> None:
        self.column = column

    def __getitem__(self, row: int) -> Any:
        return self.column[row].as_py()


def trace_id_text(hex_id: str) -> str:
    return hex_id.lstrip("0") or "0"


def any_value(values: Values, row: int) -> dict[str, Any] | None:
    """OTLP/JSON's ``AnyValue`` of ``values`` at ``row``, or None when it has none."""
    for kind, (data, rows) in values.typed.items():
        if not rows[row]:
            continue
        item = data if isinstance(data, pa.Scalar) else data[row]
        item = item.as_py() if hasattr(item, "as_py") else item
        if kind == "string":
            return {"stringValue": item}
        if kind == "int":
            return {"intValue": str(int(item))}
        if kind == "float":
            number = float(item)
            return {"doubleValue": number if math.isfinite(number) else str(number)}
        if kind == "bool":
            return {"boolValue": bool(item)}
        if kind == "duration":
            return {"intValue": str(int(item))}
        if kind == "status":
            return {"stringValue": _STATUS.get(int(item), str(item))}
        if kind == "span_kind":
            return {"stringValue": _KIND.get(int(item), str(item))}
    return None


def _key(leaf: plan.Field) -> str:
    if isinstance(leaf, plan.Attribute):
        return leaf.name
    if isinstance(leaf, plan.Intrinsic):
        return leaf.name.split(":", 1)[1]
    return plan.field_text(leaf)


_SKIP = {"span:name", "span:duration", "span:id", "trace:id", "trace:rootName",
         "trace:rootService", "trace:duration"}  # fmt: skip
"""Intrinsics the span or trace of the answer already shows."""


def _shown(node: plan.Spanset, sets: SpanSets) -> list[plan.Field]:
    leaves: dict[str, plan.Field] = {}
    for leaf in [*plan.fields_in(node), *sets.selected]:
        if isinstance(leaf, plan.Intrinsic) and (
            leaf.name in _SKIP or leaf.name.split(":")[0] in ("event", "link")
        ):
            continue
        if isinstance(leaf, plan.Attribute) and leaf.scope in ("event", "link"):
            continue
        leaves.setdefault(_key(leaf), leaf)
    return list(leaves.values())


def search_answer(
    frame: Frame, node: plan.Spanset, sets: SpanSets, limit: int, spss: int, inspected_bytes: int
) -> dict[str, Any]:
    rows = np.flatnonzero(sets.mask)
    metrics: dict[str, Any] = {"inspectedTraces": frame.traces, "inspectedSpans": str(frame.n)}
    if inspected_bytes:
        metrics["inspectedBytes"] = str(inspected_bytes)
    if len(rows) == 0:
        return {"traces": [], "metrics": metrics}
    traces = unique(frame.trace[rows])
    order = np.lexsort((traces, -frame.trace_start[traces]))
    chosen = traces[order][:limit]
    keep = np.isin(frame.trace[rows], chosen)
    rows = rows[keep]
    rows = rows[np.lexsort((rows, frame.start[rows]))]
    fields = SpanFields(frame)
    service = frame.column("service_name")
    shown = [("service.name", Values(frame.n, {"string": (service, _valid(service))}))]
    shown += [(_key(leaf), fields.field(leaf)) for leaf in _shown(node, sets)]
    by_set: dict[int, list[int]] = {}
    for row in rows.tolist():
        by_set.setdefault(int(sets.group[row]), []).append(row)
    sets_of: dict[int, list[dict[str, Any]]] = {}
    # only the rows answered are read out of the columns (a day's search reads millions)
    trace_ids, names, services, span_ids = (
        _Cells(frame.trace_ids),
        _Cells(frame.column("name")),
        _Cells(frame.column("service_name")),
        _Cells(frame.column("span_id")),
    )
    for group, members in by_set.items():
        spans = []
        for row in members[: max(spss, 0)]:
            attributes = []
            for key, values in shown:
                value = any_value(values, row)
                if value is not None:
                    attributes.append({"key": key, "value": value})
            span: dict[str, Any] = {
                "spanID": span_ids[row],
                "name": names[row],
                "startTimeUnixNano": str(int(frame.start[row])),
                "durationNanos": str(int(frame.end[row] - frame.start[row])),
            }
            if attributes:
                span["attributes"] = attributes
            spans.append({k: v for k, v in span.items() if v not in ("", None)})
        spanset: dict[str, Any] = {"spans": spans, "matched": len(members)}
        labels = []
        for name, values, row in sets.labels.get(group, []):
            value = any_value(values, row)
            labels.append({"key": name, "value": value if value is not None else {}})
        if labels:
            spanset["attributes"] = labels
        sets_of.setdefault(int(frame.trace[members[0]]), []).append(spanset)
    out = []
    for code in chosen.tolist():
        root = int(frame.root_row[code])
        start = int(frame.trace_start[code])
        duration_ms = (int(frame.trace_end[code]) - start) // 1_000_000
        entry: dict[str, Any] = {
            "traceID": trace_id_text(trace_ids[code]),
            "rootServiceName": (services[root] or "") if root >= 0 else ROOT_NOT_YET_RECEIVED,
            "rootTraceName": names[root] if root >= 0 else "",
            "startTimeUnixNano": str(start),
            "durationMs": duration_ms,
        }
        entry = {k: v for k, v in entry.items() if v not in ("", 0)}
        spansets = sets_of.get(code, [])
        if spansets:
            entry["spanSet"] = spansets[0]
            entry["spanSets"] = spansets
        out.append(entry)
    return {"traces": out, "metrics": metrics}
