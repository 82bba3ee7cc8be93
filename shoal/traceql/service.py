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
import string
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from shoal.errors import TraceQLError
from shoal.otlp import traces_out
from shoal.sql.service import QueryService
from shoal.storage.reader import TenantReader

T = TypeVar("T")

_HEX = frozenset(string.hexdigits)


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


class TraceQLService:
    """Tempo's API over every tenant's ``spans`` table. Safe to share across tasks."""

    def __init__(self, reader: TenantReader, sql: QueryService) -> None:
        self.reader = reader
        self.sql = sql

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


def _in_order(rows: pa.Table) -> pa.Table:
    """Spans by start time (then span id), whichever file or batch each came from."""
    order = pc.sort_indices(
        rows, sort_keys=[("start_time_unix_nano", "ascending"), ("span_id", "ascending")]
    )
    return rows.take(order)


__all__ = ["FoundTrace", "TraceQLService", "parse_trace_id"]
