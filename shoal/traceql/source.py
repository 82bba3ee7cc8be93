"""The rows a search reads: one SQL query over the tenant's ``spans`` in the window.

The plan's leaves decide the projection: the structure columns every search needs
(ids, times, name, service), the intrinsics' columns, each attribute as its map lookup
(``attributes['http.method']`` and the matching ``attributes_types`` entry, computed
inside DataFusion, so the maps themselves never leave it), and the events or links
lists only when an event or link field is asked for. It runs through
:class:`~shoal.sql.service.QueryService` (the tenant's session, the sandbox, the memory,
time and concurrency limits), at most ``max_spans`` rows.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from shoal.errors import TraceQLError
from shoal.sql.service import QueryService
from shoal.traceql import plan
from shoal.traceql.evaluate import ATTRIBUTE_COLUMNS, alias

BASE = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "name",
    "service_name",
)
INTRINSIC_COLUMNS = {
    "span:status": ("status_code",),
    "span:statusMessage": ("status_message",),
    "span:kind": ("kind",),
    "instrumentation:name": ("scope_name",),
    "instrumentation:version": ("scope_version",),
    "event:name": ("events",),
    "event:timeSinceStart": ("events",),
    "link:traceID": ("links",),
    "link:spanID": ("links",),
}


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _iso(ns: int) -> str:
    when = dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=dt.UTC)
    micros = (ns % 1_000_000_000) // 1000
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"


def projection(node: object, extra: tuple[str, ...] = ()) -> list[str]:
    """The SELECT list for ``node``'s leaves (and ``extra`` columns)."""
    attributes, intrinsics = plan.needs(node)
    columns = dict.fromkeys([*BASE, "status_code", "kind", *extra])
    for name in intrinsics:
        for column in INTRINSIC_COLUMNS.get(name, ()):
            columns[column] = None
    select = list(columns)
    seen: set[str] = set()
    for attribute in sorted(attributes, key=lambda a: (a.scope or "", a.name)):
        if attribute.scope in ("event", "link"):
            column = "events" if attribute.scope == "event" else "links"
            if column not in columns:
                columns[column] = None
                select.append(column)
            continue
        scopes = ["span", "resource"] if attribute.scope is None else [attribute.scope]
        for scope in scopes:
            key = alias(scope, attribute.name)
            if key in seen:
                continue
            seen.add(key)
            values, types = ATTRIBUTE_COLUMNS[scope]
            select.append(f"{values}[{quote(attribute.name)}] AS {_ident(key)}")
            select.append(f"{types}[{quote(attribute.name)}] AS {_ident(key + '#t')}")
    return select


def sql_window(start_ns: int, end_ns: int) -> tuple[str, str]:
    """The WHERE conditions of spans that start in ``[start_ns, end_ns)``: the bounds on
    ``timestamp`` (microseconds, for pruning files and row groups), then the exact cut."""
    lo = start_ns // 1000
    hi = -(-end_ns // 1000)
    return (
        f"timestamp >= '{_iso(lo * 1000)}' AND timestamp <= '{_iso(hi * 1000)}' ",
        f"AND start_time_unix_nano >= {start_ns} AND start_time_unix_nano < {end_ns}",
    )


def sql(node: object, start_ns: int, end_ns: int, extra: tuple[str, ...] = ()) -> str:
    """The query reading the spans that start in ``[start_ns, end_ns)``."""
    lo, hi = sql_window(start_ns, end_ns)
    return f"SELECT {', '.join(projection(node, extra))} FROM spans WHERE {lo}{hi}"


async def read(
    service: QueryService,
    tenant: str,
    node: object,
    start_ns: int,
    end_ns: int,
    max_spans: int,
    extra: tuple[str, ...] = (),
) -> pa.Table:
    """The window's spans with the columns ``node`` needs; an error past ``max_spans``."""
    prepared = await service.aprepare(tenant, sql(node, start_ns, end_ns, extra))
    result = await service.execute(prepared, max_rows=max_spans)
    table = await result.to_table()
    if result.truncated:
        raise TraceQLError(
            f"the search reads more than {max_spans} spans (traceql_max_spans); narrow "
            "the time range"
        )
    return table
