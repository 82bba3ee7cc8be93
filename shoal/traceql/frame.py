"""The spans a search reads, as columns, and the trace structure over them.

A :class:`Frame` holds one row per span of the search's window (the columns the plan
needs, read by :mod:`shoal.traceql.source`), and works out once, column-wise, what
every evaluation shares: each span's trace (a dense code), its parent's row (a hash
join of ``(trace_id, parent_span_id)`` against ``(trace_id, span_id)``), and per trace
its root span, first start and last end.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

ROOT_NOT_YET_RECEIVED = "<root span not yet received>"
"""Tempo's ``rootServiceName`` of a trace whose root span has not arrived."""


def ints(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> I64:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return np.asarray(column.fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclasses.dataclass
class Frame:
    """The window's spans and their structure. ``table`` has the source's columns."""

    table: pa.Table

    def __post_init__(self) -> None:
        self.n = self.table.num_rows
        self._columns: dict[str, pa.Array] = {}

    def column(self, name: str) -> pa.Array:
        """A column as one array (combined once: a search's rows come in many batches)."""
        found = self._columns.get(name)
        if found is None:
            col = self.table.column(name)
            found = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            self._columns[name] = found
        return found

    @functools.cached_property
    def trace(self) -> I64:
        """Each span's trace, a code in ``range(len(self.trace_ids))``."""
        encoded = pc.dictionary_encode(self.column("trace_id"))
        self._trace_ids = encoded.dictionary
        return ints(encoded.indices)

    @property
    def trace_ids(self) -> pa.Array:
        _ = self.trace
        return self._trace_ids

    @property
    def traces(self) -> int:
        return len(self.trace_ids)

    @functools.cached_property
    def parent(self) -> I64:
        """Each span's parent's row, or -1 (a root, or a parent not in the window)."""
        if self.n == 0:
            return np.zeros(0, dtype=np.int64)
        trace_id = self.column("trace_id")
        own = pc.binary_join_element_wise(trace_id, self.column("span_id"), "")
        wanted = pc.binary_join_element_wise(trace_id, self.column("parent_span_id"), "")
        return ints(pc.index_in(wanted, value_set=own), fill=-1)

    @functools.cached_property
    def is_root(self) -> BOOL:
        """Spans without a parent id (a trace's root as its sender marked it)."""
        return np.asarray(self.column("parent_span_id").is_null().to_numpy(zero_copy_only=False))

    @functools.cached_property
    def start(self) -> I64:
        return ints(self.column("start_time_unix_nano"))

    @functools.cached_property
    def end(self) -> I64:
        return ints(self.column("end_time_unix_nano"))

    @functools.cached_property
    def trace_start(self) -> I64:
        out = np.full(self.traces, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(out, self.trace, self.start)
        return out

    @functools.cached_property
    def trace_end(self) -> I64:
        out = np.full(self.traces, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(out, self.trace, self.end)
        return out

    @functools.cached_property
    def root_row(self) -> I64:
        """Each trace's root span row (the earliest-starting span without a parent id),
        or -1 when none arrived."""
        out = np.full(self.traces, -1, dtype=np.int64)
        rows = np.flatnonzero(self.is_root)
        if len(rows):
            # latest-starting first, so that the earliest root is written last
            order = rows[np.lexsort((-self.start[rows], self.trace[rows]))]
            out[self.trace[order]] = order
        return out

    def per_trace(self, values: Any) -> Any:
        """A per-trace array broadcast to the spans."""
        return values[self.trace]

    @functools.cached_property
    def child_count(self) -> I64:
        parents = self.parent[self.parent >= 0]
        return np.bincount(parents, minlength=self.n).astype(np.int64)
