"""What Grafana's Logs Drilldown asks of the logs beyond queries: log volume per group of
streams (``/index/volume``, ``/index/volume_range``) and the fields found in the latest
entries (``/detected_fields``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.logql import indexed, parsers
from shoal.logql import model as m
from shoal.logql.frame import METADATA, PARSED, Frame
from shoal.logql.parse import bytes_value
from shoal.logql.pipeline import go_duration_seconds
from shoal.logql.selection import matches, per_stream, stream_labels
from shoal.logql.series import Steps
from shoal.logql.source import LogSource

Key = tuple[tuple[str, str], ...]


async def volume(
    source: LogSource, selector: m.LogQuery, start_ns: int, end_ns: int,
    target_labels: Sequence[str], by_labels: bool, steps: Steps | None,
) -> dict[Key, np.ndarray]:  # fmt: skip
    """Bytes per group (per step with ``steps``) of the streams ``selector`` selects: by
    ``target_labels`` (default: the selector's label names), or with ``by_labels`` per
    label name."""
    minutes = await indexed.minutes(source, start_ns, end_ns)
    count = steps.count if steps is not None else 1
    bucket = np.zeros(minutes.num_rows, dtype=np.int64)
    if steps is not None:
        starts = np.asarray(minutes.column("minute").to_numpy(), np.int64) * indexed.MINUTE_NS
        bucket = (starts + indexed.MINUTE_NS - steps.start) // steps.step
    table = per_stream(minutes.append_column("bucket", pa.array(bucket)), ("bucket",))
    names = list(target_labels) or [x.name for x in selector.matchers]
    out: dict[Key, np.ndarray] = {}
    for row in table.to_pylist():
        labels = stream_labels(row)
        if not matches(labels, selector.matchers):
            continue
        keys: list[Key]
        if by_labels:
            keys = [((name, ""),) for name in labels]
        else:
            keys = [tuple(sorted((n, labels[n]) for n in names if labels.get(n)))]
        index = min(max(int(row["bucket"]), 0), count - 1)
        for key in keys:
            sums = out.setdefault(key, np.zeros(count, dtype=np.int64))
            sums[index] += int(row["bytes"] or 0)
    return out


def _kind(values: list[str]) -> str:
    """The type Loki's detected fields give a field from its values."""

    def every(test: Any) -> bool:
        try:
            for v in values:
                test(v)
        except (ValueError, Exception):
            return False
        return True

    if every(lambda v: int(v, 10)):
        return "int"
    if every(float):
        return "float"
    if every(lambda v: {"true": 1, "false": 1}[v.lower()]):
        return "boolean"
    if every(go_duration_seconds):
        return "duration"
    if every(lambda v: bytes_value(v.replace(" ", ""))):
        return "bytes"
    return "string"


def detected(frame: Frame) -> list[dict[str, Any]]:
    """The fields of the entries of ``frame``: structured metadata, the labels its
    pipeline parsed, and what ``json`` (for JSON lines) or ``logfmt`` finds in the lines."""
    found: dict[str, tuple[list[str], list[str] | None]] = {}
    for name, label in frame.labels.items():
        if label.category in (METADATA, PARSED) and not name.startswith("__"):
            values = [v for v in frame.column(name).to_pylist() if v]
            if values:
                found[name] = (values, None if label.category == METADATA else ["parsed"])
    if frame.rows:
        stripped = pc.utf8_trim_whitespace(frame.line)
        is_json = pc.fill_null(pc.starts_with(stripped, "{"), False)
        for parser, mask in (("json", is_json), ("logfmt", pc.invert(is_json))):
            lines = frame.line.filter(mask)
            if not len(lines):
                continue
            columns, _, _ = (
                parsers.json_all(lines) if parser == "json" else parsers.logfmt(lines, False, False)
            )
            for name, values in columns.items():
                present = [v for v in values if v]
                if present and name not in found:
                    found[name] = (present, [parser])
    out = []
    for name, (values, parser_names) in sorted(found.items()):
        out.append({
            "label": name, "type": _kind(values), "cardinality": len(set(values)),
            "parsers": parser_names,
        })  # fmt: skip
    return out


def as_strings(values: pa.Array) -> list[str]:
    return [v for v in values.to_pylist() if v]
