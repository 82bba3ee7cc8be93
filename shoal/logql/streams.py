"""The tenant's streams in a time range, without reading their entries one by one: one
SQL aggregation over the ``logs`` table grouped by what makes a stream (the resource's
attributes, or a push's labels), mapped to Loki's stream labels. What the label browser,
``/series``, ``/index/stats`` and ``/index/volume`` answer from."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from shoal.logql import indexed, mapping
from shoal.logql import model as m
from shoal.logql.selection import matches, per_stream, stream_labels
from shoal.logql.source import LogSource, _iso, pushed_filters


@dataclasses.dataclass(frozen=True)
class Stream:
    labels: dict[str, str]
    entries: int
    bytes: int
    first_ns: int
    last_ns: int


async def streams(
    source: LogSource,
    start_ns: int,
    end_ns: int,
    selectors: Sequence[m.LogQuery] = (),
    line_filters: bool = True,
) -> list[Stream]:
    """The streams with entries in ``[start_ns, end_ns]`` that any of ``selectors`` selects
    (all without one), with their entry counts, bytes and times. ``line_filters``: also
    apply the selectors' leading ``|=`` filters (as ``/index/stats`` does)."""
    where = [f"timestamp >= '{_iso(start_ns // 1000)}'", f"timestamp <= '{_iso(end_ns // 1000)}'"]
    pushed = pushed_filters(selectors[0]) if len(selectors) == 1 else []
    if line_filters and any(p.startswith("(strpos") for p in pushed):
        where += pushed
        text = (
            "SELECT service_name, scope_name, resource_attributes, count(*) AS entries, "
            "sum(octet_length(body)) AS bytes, min(ts) AS first_ns, max(ts) AS last_ns FROM "
            f"(SELECT {mapping.TS_SQL}, service_name, scope_name, resource_attributes, body "
            f"FROM logs WHERE {' AND '.join(where)}) AS rows "
            f"WHERE ts >= {start_ns} AND ts <= {end_ns} GROUP BY 1, 2, 3"
        )
        table = await source.rows(text)
    else:  # no line filter: the log index's minutes, no row read
        table = per_stream(await indexed.minutes(source, start_ns, end_ns))
    merged: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for row in table.to_pylist():
        labels = stream_labels(row)
        key = tuple(sorted(labels.items()))
        counts = merged.setdefault(key, [0, 0, 2**63 - 1, -(2**63)])
        counts[0] += int(row["entries"])
        counts[1] += int(row["bytes"] or 0)
        counts[2] = min(counts[2], int(row["first_ns"]))
        counts[3] = max(counts[3], int(row["last_ns"]))
    out = []
    for key, (entries, size, first, last) in merged.items():
        labels = dict(key)
        if selectors and not any(matches(labels, s.matchers) for s in selectors):
            continue
        out.append(Stream(labels, entries, size, first, last))
    return out


def unique(values: pa.Array) -> list[str]:
    return sorted(v for v in pc.unique(values).to_pylist() if v)
