"""The tenant's streams per minute from the log index (:mod:`shoal.storage.logindex`):
the summaries of the committed files of the read view and of its unflushed rows, for a
time range, without reading the rows of the files.

What answers from it: the label browser, ``/series``, ``/index/stats``,
``/index/volume`` (counted by whole minutes at the range's edges, as Loki's index
answers are counted by whole chunks), and the counting metric queries whose selector has
no line filter, exactly, when no bucket's edge falls between the first and last entry of
a stream's minute (always so when the buckets are whole minutes).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from shoal.sql.service import QueryService
from shoal.storage import logindex
from shoal.storage.view import TableInput

MINUTE_NS = logindex.MINUTE_NS
SUMMARIES = logindex.Summaries()
"""The files' summaries read so far, shared by every request."""


class Tenant(Protocol):
    """Whose log index to read, and through which query service's read view."""

    @property
    def sql(self) -> QueryService: ...

    @property
    def tenant(self) -> str: ...


def _collect(source: Tenant, first_minute: int, last_minute: int) -> pa.Table:
    reader = source.sql.reader
    view = reader.view(source.tenant, ("logs",))
    table: TableInput | None = view.tables.get("logs")
    if table is None:
        return logindex.SCHEMA.empty_table()
    place = reader.catalog.place(source.tenant, "logs")
    low_us, high_us = first_minute * MINUTE_NS // 1000, (last_minute + 1) * MINUTE_NS // 1000
    parts = [
        SUMMARIES.of_file(place, f.path)
        for f in table.files
        if f.max_time_us >= low_us and f.min_time_us <= high_us
    ]
    if table.batches:
        rows = pa.Table.from_batches(list(table.batches)).select(list(logindex.COLUMNS))
        parts.append(logindex.summarize(rows))
    if not parts:
        return logindex.SCHEMA.empty_table()
    found = pa.concat_tables(parts)
    minute = found.column("minute")
    keep = pc.and_(pc.greater_equal(minute, first_minute), pc.less_equal(minute, last_minute))
    return found.filter(keep)


async def minutes(source: Tenant, start_ns: int, end_ns: int) -> pa.Table:
    """Summary rows (:data:`shoal.storage.logindex.SCHEMA`) of the minutes that hold any
    of ``[start_ns, end_ns]``; blocking work on a worker thread."""
    first = (start_ns + MINUTE_NS - 1) // MINUTE_NS - 1
    last = (end_ns + MINUTE_NS - 1) // MINUTE_NS - 1
    return await asyncio.get_running_loop().run_in_executor(None, _collect, source, first, last)
