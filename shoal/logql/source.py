"""A log query's entries, read from the tenant's ``logs`` table through SQL
(:class:`~shoal.sql.service.QueryService`: the tenant's session, the sandbox, the
limits), as a :class:`~shoal.logql.frame.Frame` with the stream selector applied and the
pipeline run.

What the SQL can narrow exactly is pushed into it: the time range (which the query
service turns into the files and unflushed batches that hold it), ``service_name``
matchers, the ``service_name`` values of the streams any other selector selects (found
in the log index: ``{app="api"}``, ``{service_name=~"a|b"}``; the files are sorted by
``service_name``, so the scan reads only those services' row groups), and the line
filters ``|=`` before the pipeline changes the line. Everything is then checked again on
the columns, so the pushed filters only spare reading.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import QueryLimitError
from shoal.logql import indexed, mapping, pipeline, selection
from shoal.logql import model as m
from shoal.logql.frame import STREAM, Frame, concat
from shoal.lokipush.labels import SERVICE_NAME
from shoal.regex import search_column
from shoal.sql.service import QueryService

_LINE_CHANGING = (m.LineFormat, m.Decolorize)
MAX_PUSHED_SERVICES = 1000
"""Above this many selected services the selector is left to the columns alone."""


def _iso(us: int) -> str:
    us = min(max(us, -62_135_596_800_000_000), 253_402_300_799_000_000)
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def pushed_filters(query: m.LogQuery, services: Collection[str | None] | None = None) -> list[str]:
    """SQL conditions that keep every entry ``query`` can select (and spare the others);
    ``services``: the ``service_name`` values of every stream the selector selects (None
    is a row without one), when they are known."""
    out: list[str] = []
    for matcher in query.matchers:
        if _pushed(matcher):
            # an OTLP resource without service.name is mapped to a discovered name
            out.append(f"(service_name = {quote(matcher.value)} OR service_name IS NULL)")
    if services is not None:
        out.append(_among(services))
    for stage in query.stages:
        if isinstance(stage, _LINE_CHANGING) or (
            isinstance(stage, m.Parser) and stage.kind == "unpack"
        ):
            break
        if isinstance(stage, m.LineFilter) and stage.op == "|=" and all(stage.values):
            found = " OR ".join(f"strpos(body, {quote(v)}) > 0" for v in stage.values)
            out.append(f"({found})")
    return out


def _pushed(matcher: m.Matcher) -> bool:
    return matcher.name == SERVICE_NAME and matcher.op == "=" and bool(matcher.value)


def _among(services: Collection[str | None]) -> str:
    names = sorted(quote(s) for s in services if s is not None)
    found = [f"service_name IN ({', '.join(names)})"] if names else []
    if None in services:
        found.append("service_name IS NULL")
    return "(" + " OR ".join(found) + ")" if found else "FALSE"


def select(
    query: m.LogQuery,
    start_ns: int,
    end_ns: int,
    order: str = "",
    services: Collection[str | None] | None = None,
) -> str:
    """The SQL reading the rows of ``query`` with ``start_ns <= time <= end_ns``."""
    where = [
        f"timestamp >= '{_iso(start_ns // 1000)}'",
        f"timestamp <= '{_iso(end_ns // 1000)}'",
        *pushed_filters(query, services),
    ]
    columns = ", ".join(mapping.TS_SQL if c == "ts" else c for c in mapping.COLUMNS)
    text = f"SELECT {columns} FROM logs WHERE {' AND '.join(where)}"
    return text + (f" ORDER BY timestamp {order}" if order else "")


def selected(frame: Frame, matchers: Sequence[m.Matcher]) -> Frame:
    """The entries whose stream labels satisfy the selector."""
    for matcher in matchers:
        label = frame.labels.get(matcher.name)
        if label is not None and label.category == STREAM:
            values = frame.value_or_empty(matcher.name)
        else:
            values = pa.array([""] * frame.rows, pa.string())
        if matcher.op in ("=", "!="):
            hit = pc.equal(values, matcher.value)
        else:
            hit = search_column(values, matcher.value, anchored=True)
        frame = frame.filter(pc.invert(hit) if matcher.op in ("!=", "!~") else hit)
        if not frame.rows:
            break
    return frame


class LogSource:
    """One tenant's log entries, for the calls of one API request."""

    def __init__(self, sql: QueryService, tenant: str) -> None:
        self.sql = sql
        self.tenant = tenant
        self.lines_read = 0
        self.bytes_read = 0

    @property
    def max_rows(self) -> int:
        return self.sql.limits.max_samples

    async def rows(self, text: str) -> pa.Table:
        """Rows of an SQL text over the tenant's tables, under the query limits."""
        cap = self.max_rows
        prepared = await self.sql.aprepare(self.tenant, text)
        result = await self.sql.execute(prepared, max_rows=cap)
        table = await result.to_table()
        if result.truncated:
            raise QueryLimitError(
                "rows",
                f"the query reads over {cap} log entries (promql_max_samples); narrow the "
                "time range, the stream selector or add a line filter",
            )
        return table

    async def entries(self, query: m.LogQuery, start_ns: int, end_ns: int) -> Frame:
        """The entries of ``query``'s selector with ``start_ns <= time <= end_ns``, through
        its pipeline up to an ``unwrap`` (the unwrap and what follows are the caller's)."""
        services = await self.services(query, start_ns, end_ns)
        table = await self.rows(select(query, start_ns, end_ns, services=services))
        frame = mapping.frame(table)
        keep = (frame.ts >= start_ns) & (frame.ts <= end_ns)
        if not keep.all():
            frame = frame.filter(pa.array(keep))
        self.lines_read += frame.rows
        self.bytes_read += int(pc.sum(pc.binary_length(frame.line)).as_py() or 0)
        frame = selected(frame, query.matchers)
        cut = next((i for i, s in enumerate(query.stages) if isinstance(s, m.Unwrap)), None)
        return pipeline.run(frame, query.stages if cut is None else query.stages[:cut])

    async def services(
        self, query: m.LogQuery, start_ns: int, end_ns: int, minutes: pa.Table | None = None
    ) -> set[str | None] | None:
        """The ``service_name`` values of the streams in ``[start_ns, end_ns]`` that
        ``query``'s selector selects, from the log index (no row read; ``minutes``: the
        index's rows for the range, when the caller has read them); None when the
        selector is a pushed ``service_name`` alone or selects too many services to list."""
        if all(_pushed(matcher) for matcher in query.matchers):
            return None
        if minutes is None:
            minutes = await indexed.minutes(self, start_ns, end_ns)
        found = selection.services(minutes, query.matchers)
        return found if len(found) <= MAX_PUSHED_SERVICES else None

    async def newest(
        self, query: m.LogQuery, start_ns: int, end_ns: int, limit: int, forward: bool
    ) -> Frame:
        """At most ``limit`` entries of ``query`` in ``[start_ns, end_ns)``, the newest
        (or with ``forward`` the oldest), reading the range in windows from that end, each
        twice the last, until the limit is reached."""
        if end_ns <= start_ns:
            return concat([])
        window = max((end_ns - start_ns) // 32, 3_600_000_000_000)
        found: list[Frame] = []
        total = 0
        hi, lo = end_ns - 1, start_ns
        while True:
            if forward:
                a, b = lo, min(lo + window - 1, end_ns - 1)
            else:
                a, b = max(hi - window + 1, start_ns), hi
            frame = await self.entries(query, a, b)
            found.append(frame)
            total += frame.rows
            if forward:
                lo = b + 1
                done = lo > end_ns - 1
            else:
                hi = a - 1
                done = hi < start_ns
            if total >= limit or done:
                break
            window *= 2
        frame = concat(found)
        order = np.argsort(frame.ts, kind="stable")
        if not forward:
            order = order[::-1]
        return frame.take(order[:limit])
