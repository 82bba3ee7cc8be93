"""TraceQL's one entry point: the calls of Tempo's HTTP API, for one tenant at a time.

:class:`TraceQLService` answers trace by id, search, tag names and tag values over the
tenant's ``spans`` table, through the read view: a trace's rows come from
:meth:`~shoal.storage.reader.TenantReader.lookup_rows` (the files that hold the trace
found from their filters, flushed and unflushed rows alike), a search's from SQL
through :class:`~shoal.sql.service.QueryService` (tenant session, sandbox, limits).
Errors are :class:`~shoal.errors.TraceQLError` (400, or 404 for an unknown trace) or the
SQL layer's limit errors; the HTTP routes only parse parameters and translate errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import string
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from shoal.errors import TraceQLError
from shoal.otlp import traces_out
from shoal.sql.service import QueryService
from shoal.storage.reader import TenantReader
from shoal.traceql import answers, parser, plan, source, spansets, tags
from shoal.traceql.frame import Frame

T = TypeVar("T")

_HEX = frozenset(string.hexdigits)
DEFAULT_MAX_SPANS = 3_000_000
DEFAULT_LIMIT = 20
DEFAULT_SPSS = 3
DEFAULT_TAG_LIMIT = 5000
"""Tag names per scope, or tag values, answered at most (Grafana asks for up to 5,000)."""
V1_SCOPES = ("resource", "span", "intrinsic")


def parse_trace_id(text: str) -> str:
    """A trace id as Tempo reads one: up to 32 hex digits, zero-padded on the left; the
    lowercase 32-digit form the ``spans`` table stores."""
    text = text.strip()
    if not text or not set(text) <= _HEX:
        raise TraceQLError(f"invalid trace id {text[:64]!r}: a trace id is hex digits")
    if len(text) > 32:
        raise TraceQLError(f"invalid trace id {text[:64]!r}: trace ids are at most 128 bits")
    return text.lower().rjust(32, "0")


@dataclasses.dataclass(frozen=True)
class FoundTrace:
    """A trace's spans as OTLP groups them, and the bytes read to find them."""

    trace: TracesData
    inspected_bytes: int


@dataclasses.dataclass(eq=False)
class TraceQLService:
    """Tempo's API over every tenant's ``spans`` table. Safe to share across tasks."""

    reader: TenantReader
    sql: QueryService
    max_spans: int = DEFAULT_MAX_SPANS
    """The most spans one search reads (``traceql_max_spans``)."""

    @property
    def timeout_s(self) -> float:
        """The query time limit (``query_timeout_s``), which a whole call must keep."""
        return self.sql.limits.timeout_s

    async def _blocking(self, call: Callable[[], T]) -> T:
        """``call`` in a worker thread, within the memory gate and the time limit."""
        self.sql.gate.check()
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(None, call), self.timeout_s)

    async def trace(
        self, tenant: str, trace_id: str, start_s: int | None = None, end_s: int | None = None
    ) -> FoundTrace:
        """Every span of trace ``trace_id`` (flushed or not), or TraceQLError(not_found).

        With ``start_s`` and ``end_s`` (unix seconds), the trace is found only if one of
        its spans starts in ``[start_s, end_s]``; it is then returned whole."""
        wanted = parse_trace_id(trace_id)
        rows, inspected = await self._blocking(
            lambda: self.reader.lookup_rows(tenant, "spans", wanted)
        )
        if rows.num_rows and start_s is not None and end_s is not None:
            starts = rows.column("start_time_unix_nano")
            inside = pc.and_(
                pc.greater_equal(starts, start_s * 1_000_000_000),
                pc.less(starts, (end_s + 1) * 1_000_000_000),
            )
            if not pc.any(inside).as_py():
                rows = rows.slice(0, 0)
        if rows.num_rows == 0:
            raise TraceQLError(f"trace not found: {wanted}", not_found=True)
        return FoundTrace(traces_out.encode(_in_order(rows)), inspected)

    async def search(self, tenant: str, request: SearchRequest) -> dict[str, Any]:
        """``/api/search``: the traces ``request`` finds, as Tempo answers them."""
        node = request.plan()

        async def run() -> dict[str, Any]:
            table = await source.read(
                self.sql, tenant, node, request.start_ns, request.end_ns, self.max_spans
            )

            def evaluate() -> dict[str, Any]:
                frame = Frame(table)
                sets = spansets.evaluate(frame, node)
                return answers.search_answer(
                    frame, node, sets, request.limit, request.spss, table.nbytes
                )

            return await self._blocking(evaluate)

        return await asyncio.wait_for(run(), self.timeout_s)

    async def tag_names(
        self,
        tenant: str,
        start_ns: int,
        end_ns: int,
        scope: str | None = None,
        q: str | None = None,
        limit: int = DEFAULT_TAG_LIMIT,
        v2: bool = True,
    ) -> dict[str, Any]:
        """``/api/search/tags`` (``v2`` False) and ``/api/v2/search/tags``."""
        known = tags.SCOPES if v2 else V1_SCOPES
        if scope in (None, "", "all", "none"):
            scopes = tuple(known) if v2 else ("resource", "span")
        elif scope in known:
            scopes = (scope,)
        else:
            raise TraceQLError(f"invalid scope {scope!r}: expected one of {', '.join(known)}")
        found = await asyncio.wait_for(
            tags.tag_names(self.sql, tenant, scopes, start_ns, end_ns, q, limit, self.max_spans),
            self.timeout_s,
        )
        if not v2:
            return {"tagNames": sorted({n for names in found.values() for n in names})[:limit]}
        listed = [
            {"name": name, "tags": found[name]}
            for name in scopes
            if found.get(name) or name == "intrinsic"
        ]
        return {"scopes": listed}

    async def tag_values(
        self,
        tenant: str,
        name: str,
        start_ns: int,
        end_ns: int,
        q: str | None = None,
        limit: int = DEFAULT_TAG_LIMIT,
        v2: bool = True,
    ) -> dict[str, Any]:
        """``/api/search/tag/<name>/values`` (``v2`` False: ``name`` is an attribute of span
        or resource, values as text) and ``/api/v2/search/tag/<name>/values`` (``name`` is
        a TraceQL field, values typed)."""
        field = tags.parse_tag(name) if v2 else _v1_tag(name)
        found = await asyncio.wait_for(
            tags.tag_values(self.sql, tenant, field, start_ns, end_ns, q, limit, self.max_spans),
            self.timeout_s,
        )
        if not v2:
            return {"tagValues": sorted({value for _, value in found})}
        return {"tagValues": [{"type": kind, "value": value} for kind, value in found]}


_LOGFMT = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)')


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """A search's parameters: TraceQL ``q``, or the older ``tags`` (logfmt, each value a
    case-insensitive substring) with ``min_duration_ns``/``max_duration_ns`` of the trace;
    the window ``[start_ns, end_ns)``; ``limit`` traces and ``spss`` spans per spanset."""

    start_ns: int
    end_ns: int
    query: str = ""
    tags: str = ""
    min_duration_ns: int | None = None
    max_duration_ns: int | None = None
    limit: int = DEFAULT_LIMIT
    spss: int = DEFAULT_SPSS

    def plan(self) -> plan.Spanset:
        if self.query.strip() or not (self.tags or self.min_duration_ns or self.max_duration_ns):
            return parser.parse(self.query)
        return tags_plan(self.tags, self.min_duration_ns, self.max_duration_ns)


def tags_plan(tag_text: str, min_ns: int | None, max_ns: int | None) -> plan.Spanset:
    """The older tag search as a spanset filter."""
    conditions: list[plan.Field] = []
    for key, raw in _LOGFMT.findall(tag_text):
        value = parser._unquote(raw) if raw.startswith('"') else raw
        pattern = "(?i).*" + re.escape(value) + ".*"
        field: plan.Field = (
            plan.Intrinsic("span:name") if key == "name" else plan.Attribute(None, key)
        )
        conditions.append(plan.Compare("=~", field, plan.Literal("string", pattern)))
    if tag_text.strip() and not conditions:
        raise TraceQLError(f"invalid tags {tag_text[:80]!r}: expected key=value pairs (logfmt)")
    duration = plan.Intrinsic("trace:duration")
    if min_ns is not None:
        conditions.append(plan.Compare(">=", duration, plan.Literal("duration", min_ns)))
    if max_ns is not None:
        conditions.append(plan.Compare("<=", duration, plan.Literal("duration", max_ns)))
    node: plan.Field | None = None
    for condition in conditions:
        node = condition if node is None else plan.Logic("&&", node, condition)
    return plan.SpansetFilter(node)


def _v1_tag(name: str) -> plan.Field:
    if name in ("name", "status", "kind"):
        return plan.Intrinsic(parser.INTRINSICS[name])
    if not name or any(c.isspace() for c in name):
        raise TraceQLError(f"invalid tag name {name!r}")
    return plan.Attribute(None, name)


def _in_order(rows: pa.Table) -> pa.Table:
    """Spans by start time (then span id), whichever file or batch each came from."""
    order = pc.sort_indices(
        rows, sort_keys=[("start_time_unix_nano", "ascending"), ("span_id", "ascending")]
    )
    return rows.take(order)


__all__ = ["FoundTrace", "SearchRequest", "TraceQLService", "parse_trace_id"]
