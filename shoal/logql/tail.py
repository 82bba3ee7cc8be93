"""Loki's live tail: a log query over rows handed over the moment they are acknowledged
(:class:`shoal.ingest.feed.RowFeed`), and the messages of ``/loki/api/v1/tail``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import LogQLError
from shoal.logql import mapping, output, pipeline
from shoal.logql import model as m
from shoal.logql.frame import STREAM, Frame, concat, group
from shoal.logql.parse import parse
from shoal.logql.source import selected

MAX_DELAY_S = 5


def log_query(text: str) -> m.LogQuery:
    query = parse(text)
    if not isinstance(query, m.LogQuery):
        raise LogQLError("a live tail takes a log query, not a metric query")
    if any(isinstance(s, m.Unwrap) for s in query.stages):
        raise LogQLError("unwrap is only allowed in a range aggregation")
    return query


def entries(query: m.LogQuery, tables: Sequence[pa.Table]) -> Frame:
    """The entries of freshly acknowledged ``logs`` rows that ``query`` keeps."""
    frames = []
    for table in tables:
        if not table.num_rows:
            continue
        ts = pc.if_else(
            pc.not_equal(table.column("time_unix_nano"), 0),
            table.column("time_unix_nano"),
            table.column("observed_time_unix_nano"),
        )
        rows = table.append_column("ts", ts).select(list(mapping.COLUMNS))
        frame = selected(mapping.frame(rows), query.matchers)
        frames.append(pipeline.run(frame, query.stages))
    return concat(frames)


def dropped(query: m.LogQuery, tables: Sequence[pa.Table]) -> list[dict[str, Any]]:
    """Loki's ``dropped_entries`` for rows a slow follower missed: each entry's stream
    labels and time (of those the selector selects)."""
    frame = concat([entries(m.LogQuery(query.matchers), [t]) for t in tables])
    if not frame.rows:
        return []
    names = [n for n, lb in frame.labels.items() if lb.category == STREAM]
    ids, label_sets = group(frame, names)
    return [
        {"labels": label_sets[int(i)], "timestamp": str(int(t))}
        for i, t in zip(ids.tolist(), frame.ts.tolist(), strict=True)
    ]


def message(
    frame: Frame, dropped_entries: list[dict[str, Any]], categorize: bool
) -> dict[str, Any]:
    """One message of the tail: its streams (oldest entries first), and the entries
    dropped since the last one."""
    body: dict[str, Any] = {"streams": output.streams(frame, True, categorize)}
    if categorize:
        body["encodingFlags"] = [output.CATEGORIZE]
    body["dropped_entries"] = dropped_entries or None
    return body
