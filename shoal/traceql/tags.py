"""Tag names and tag values, for Grafana's search editor and autocomplete.

Names are the distinct keys of the attribute maps of the spans in the window, per scope
(``span``, ``resource``, ``instrumentation``, and those of the events' and links'
maps), and the intrinsics shoal evaluates; values are the distinct values of one field,
typed as Tempo types them (``string``, ``int``, ``float``, ``bool``, and ``keyword`` for
statuses and kinds). Both are one SQL query each through
:class:`~shoal.sql.service.QueryService` (``map_keys`` and ``unnest`` inside
DataFusion). With ``q``, a TraceQL spanset filter, only the spans it matches count: the
window's spans are read with what the filter and the field need and evaluated
column-wise, as a search's are. A ``q`` that does not parse, or is more than one
``{ }``, is ignored, as Tempo ignores it (the editor sends half-typed queries).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import TraceQLError
from shoal.sql.service import QueryService
from shoal.traceql import plan, source
from shoal.traceql.evaluate import ATTRIBUTE_COLUMNS, SpanFields, condition
from shoal.traceql.frame import Frame
from shoal.traceql.parser import parse

INTRINSIC_TAGS = (
    "duration",
    "event:name",
    "event:timeSinceStart",
    "instrumentation:name",
    "instrumentation:version",
    "kind",
    "link:spanID",
    "link:traceID",
    "name",
    "rootName",
    "rootServiceName",
    "span:childCount",
    "span:duration",
    "span:id",
    "span:kind",
    "span:name",
    "span:parentID",
    "span:status",
    "span:statusMessage",
    "status",
    "statusMessage",
    "trace:duration",
    "trace:id",
    "trace:rootName",
    "trace:rootService",
    "traceDuration",
)
SCOPES = ("resource", "span", "intrinsic", "event", "link", "instrumentation")
_NESTED = {"event": "events", "link": "links"}
_TYPES = {None: "string", "int": "int", "double": "float", "bool": "bool"}
_KEYWORDS = {
    "span:status": {0: "unset", 1: "ok", 2: "error"},
    "span:kind": {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
                  5: "consumer"},
}  # fmt: skip
_COLUMN_INTRINSICS = {
    "span:name": "name",
    "span:statusMessage": "status_message",
    "instrumentation:name": "scope_name",
    "instrumentation:version": "scope_version",
    "span:status": "status_code",
    "span:kind": "kind",
}


def _where(start_ns: int, end_ns: int) -> str:
    lo, hi = source.sql_window(start_ns, end_ns)
    return lo + hi


async def _rows(service: QueryService, tenant: str, sql: str, cap: int) -> pa.Table:
    prepared = await service.aprepare(tenant, sql)
    result = await service.execute(prepared, max_rows=cap)
    return await result.to_table()


def filter_of(q: str | None) -> plan.SpansetFilter | None:
    """``q`` as one spanset filter, or None (no ``q``, or one Tempo would ignore)."""
    if not q or not q.strip():
        return None
    try:
        node = parse(q)
    except TraceQLError:
        return None
    if isinstance(node, plan.SpansetFilter) and node.condition is not None:
        return node
    return None


def _keys_sql(scope: str, where: str) -> str:
    if scope in _NESTED:
        return (
            "SELECT DISTINCT k FROM (SELECT unnest(map_keys(e['attributes'])) AS k FROM "
            f"(SELECT unnest({_NESTED[scope]}) AS e FROM spans WHERE {where}))"
        )
    column = ATTRIBUTE_COLUMNS[scope][0]
    return (
        f"SELECT DISTINCT k FROM (SELECT unnest(map_keys({column})) AS k FROM spans WHERE {where})"
    )


def _keys_of(maps: pa.Array) -> list[str]:
    keys = pc.list_flatten(maps.cast(pa.list_(pa.struct([("key", pa.string()),
                                                          ("value", pa.string())]))))  # fmt: skip
    return sorted(set(pc.unique(keys.field("key")).to_pylist()) - {None})


async def tag_names(
    service: QueryService,
    tenant: str,
    scopes: tuple[str, ...],
    start_ns: int,
    end_ns: int,
    q: str | None,
    limit: int,
    max_spans: int,
) -> dict[str, list[str]]:
    """Per scope asked for, its tag names (sorted, at most ``limit`` each)."""
    found: dict[str, list[str]] = {}
    node = filter_of(q)
    if node is not None:
        columns = tuple(
            c for s in scopes if s not in ("intrinsic",)
            for c in ([_NESTED[s]] if s in _NESTED else [ATTRIBUTE_COLUMNS[s][0]])
        )  # fmt: skip
        table = await source.read(service, tenant, node, start_ns, end_ns, max_spans, columns)
        frame = Frame(table)
        mask = pa.array(condition(frame, node.condition))
        for scope in scopes:
            if scope == "intrinsic":
                continue
            if scope in _NESTED:
                items = pc.list_flatten(pc.filter(frame.column(_NESTED[scope]), mask))
                found[scope] = _keys_of(items.field("attributes"))
            else:
                found[scope] = _keys_of(pc.filter(frame.column(ATTRIBUTE_COLUMNS[scope][0]), mask))
    else:
        where = _where(start_ns, end_ns)
        for scope in scopes:
            if scope == "intrinsic":
                continue
            rows = await _rows(service, tenant, _keys_sql(scope, where), limit + 1)
            found[scope] = sorted(k for k in rows.column("k").to_pylist() if k is not None)
    if "intrinsic" in scopes:
        found["intrinsic"] = list(INTRINSIC_TAGS)
    return {scope: names[:limit] for scope, names in found.items()}


def parse_tag(name: str) -> plan.Field:
    """A v2 tag name (``resource.service.name``, ``.x``, ``name``, ``span:status``)."""
    try:
        node = parse("{ " + name + " = nil }")
    except TraceQLError as exc:
        raise TraceQLError(f"invalid tag name {name!r}: {exc}") from None
    assert isinstance(node, plan.SpansetFilter) and isinstance(node.condition, plan.Compare)
    return node.condition.left


def _typed_rows(values: pa.Array, types: pa.Array | None) -> list[tuple[str, str]]:
    out = []
    tags = types.to_pylist() if types is not None else [None] * len(values)
    for value, tag in zip(values.to_pylist(), tags, strict=True):
        if value is None or tag not in _TYPES:
            continue
        out.append((_TYPES[tag], value))
    return out


async def tag_values(
    service: QueryService,
    tenant: str,
    field: plan.Field,
    start_ns: int,
    end_ns: int,
    q: str | None,
    limit: int,
    max_spans: int,
) -> list[tuple[str, str]]:
    """The distinct ``(type, value)`` of ``field``, sorted, at most ``limit``."""
    node = filter_of(q)
    if node is not None:
        found = await _filtered_values(service, tenant, field, node, start_ns, end_ns, max_spans)
    else:
        found = await _values(service, tenant, field, _where(start_ns, end_ns), limit)
    return sorted(set(found))[:limit]


async def _values(
    service: QueryService, tenant: str, field: plan.Field, where: str, limit: int
) -> list[tuple[str, str]]:
    cap = limit + 1
    if isinstance(field, plan.Attribute):
        key = source.quote(field.name)
        if field.scope in _NESTED:
            sql = (
                f"SELECT e['attributes'][{key}] AS v, e['attributes_types'][{key}] AS t FROM "
                f"(SELECT unnest({_NESTED[field.scope]}) AS e FROM spans WHERE {where}) "
                "GROUP BY 1, 2"
            )
            rows = await _rows(service, tenant, sql, cap)
            return _typed_rows(rows.column("v").combine_chunks(), rows.column("t").combine_chunks())
        out: list[tuple[str, str]] = []
        for scope in ("span", "resource") if field.scope is None else (field.scope,):
            values, types = ATTRIBUTE_COLUMNS[scope]
            sql = (
                f"SELECT {values}[{key}] AS v, {types}[{key}] AS t FROM spans WHERE {where} "
                f"AND {values}[{key}] IS NOT NULL GROUP BY 1, 2"
            )
            rows = await _rows(service, tenant, sql, cap)
            out += _typed_rows(rows.column("v").combine_chunks(), rows.column("t").combine_chunks())
        return out
    assert isinstance(field, plan.Intrinsic)
    name = field.name
    if name in _KEYWORDS:
        sql = f"SELECT DISTINCT {_COLUMN_INTRINSICS[name]} AS v FROM spans WHERE {where}"
        rows = await _rows(service, tenant, sql, cap)
        words = _KEYWORDS[name]
        return [("keyword", words[v]) for v in rows.column("v").to_pylist() if v in words]
    if name in _COLUMN_INTRINSICS:
        column = _COLUMN_INTRINSICS[name]
        sql = f"SELECT DISTINCT {column} AS v FROM spans WHERE {where} AND {column} IS NOT NULL"
    elif name in ("trace:rootName", "trace:rootService"):
        column = "name" if name == "trace:rootName" else "service_name"
        sql = (
            f"SELECT DISTINCT {column} AS v FROM spans WHERE {where} "
            f"AND parent_span_id IS NULL AND {column} IS NOT NULL"
        )
    elif name == "event:name":
        sql = (
            "SELECT DISTINCT v FROM (SELECT e['name'] AS v FROM "
            f"(SELECT unnest(events) AS e FROM spans WHERE {where})) WHERE v IS NOT NULL"
        )
    else:
        return []  # ids and durations: Tempo lists no values for them either
    rows = await _rows(service, tenant, sql, cap)
    return [("string", v) for v in rows.column("v").to_pylist() if v is not None]


async def _filtered_values(
    service: QueryService,
    tenant: str,
    field: plan.Field,
    node: plan.SpansetFilter,
    start_ns: int,
    end_ns: int,
    max_spans: int,
) -> list[tuple[str, str]]:
    if isinstance(field, plan.Attribute) and field.scope in _NESTED:
        return []  # event and link values under a filter: not implemented, none listed
    # a plan naming the filter's fields and the tag's, so that the source reads both
    tag = plan.Compare("=", field, plan.Literal("nil", None))
    both = plan.SpansetFilter(plan.Logic("||", node.condition or plan.Literal("bool", True), tag))
    table = await source.read(service, tenant, both, start_ns, end_ns, max_spans)
    frame = Frame(table)
    mask = condition(frame, node.condition)
    values = SpanFields(frame).field(field)
    out: list[tuple[str, str]] = []
    for kind, (data, rows) in values.typed.items():
        chosen = rows & mask
        if not chosen.any():
            continue
        picked = pc.filter(data, pa.array(chosen)) if isinstance(data, pa.Array) else data[chosen]
        distinct = pc.unique(pa.array(picked)).to_pylist()
        for value in distinct:
            out.append(_typed(kind, value))
    return out


def _typed(kind: str, value: Any) -> tuple[str, str]:
    if kind == "status":
        return ("keyword", _KEYWORDS["span:status"].get(int(value), str(value)))
    if kind == "span_kind":
        return ("keyword", _KEYWORDS["span:kind"].get(int(value), str(value)))
    if kind == "bool":
        return ("bool", "true" if value else "false")
    if kind == "float":
        return ("float", repr(float(value)))
    if kind == "duration":
        return ("duration", f"{int(value)}ns")
    return (kind, str(value))


__all__ = ["INTRINSIC_TAGS", "SCOPES", "parse_tag", "tag_names", "tag_values"]
