"""The machinery that turns a read's rows into Prometheus series, a series at a time.

:class:`Floats` converts a table's numeric columns once; an :class:`Emitter` adds the
samples of one OTLP series under one exposed name (and extra labels) to a
:class:`Collector`, which joins what several OTLP series map onto one label set.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.promql.labels import SeriesRows
from shoal.promql.model import LabelKey, Labels, Series


class Collector:
    """Joins the series that several OTLP series map onto one label set."""

    def __init__(self) -> None:
        self.parts: dict[
            LabelKey, tuple[Labels, list[np.ndarray], list[np.ndarray], list[np.ndarray | None]]
        ]
        self.parts = {}

    def add(
        self,
        labels: Labels,
        k: LabelKey,
        t: np.ndarray,
        v: np.ndarray,
        stale: np.ndarray | None,
    ) -> None:
        """One OTLP series' samples under ``labels`` (``k`` its key); ``stale`` marks its
        stale markers, None when it has none."""
        slot = self.parts.get(k)
        if slot is None:
            self.parts[k] = (labels, [t], [v], [stale])
        else:
            slot[1].append(t)
            slot[2].append(v)
            slot[3].append(stale)

    def series(self) -> list[Series]:
        out = []
        for k, (labels, ts, vs, ss) in self.parts.items():
            if len(ts) == 1:  # the usual case: one OTLP series under this label set
                s = ss[0]
                out.append(
                    Series(labels, ts[0], vs[0], s if s is not None and s.any() else None, k)
                )
                continue
            t = np.concatenate(ts).astype(np.int64)
            v = np.concatenate(vs).astype(np.float64)
            s = np.concatenate(
                [
                    np.zeros(len(x), dtype=bool) if y is None else y
                    for x, y in zip(ts, ss, strict=True)
                ]
            ).astype(bool)
            order = np.argsort(t, kind="stable")
            t, v, s = t[order], v[order], s[order]
            # same timestamp twice (two OTLP series mapped onto one): the last wins
            keep = np.ones(len(t), dtype=bool)
            keep[:-1] = t[1:] != t[:-1]
            t, v, s = t[keep], v[keep], s[keep]
            out.append(Series(labels, t, v, s if s.any() else None, k))
        return out


class Floats:
    """Numeric columns of one table as float64 arrays (null as NaN), converted once."""

    def __init__(self, table: pa.Table, order: np.ndarray) -> None:
        self.table = table
        self.order = order
        self.columns: dict[str, np.ndarray] = {}
        self.ordered: dict[str, np.ndarray] = {}

    def _column(self, name: str) -> np.ndarray:
        values = self.columns.get(name)
        if values is None:
            column = self.table.column(name)
            if column.type != pa.float64():
                column = pc.cast(column, pa.float64())
            values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            self.columns[name] = values
        return values

    def __call__(self, name: str, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self._column(name)[rows], dtype=np.float64)

    def rows(self, name: str, a: int, b: int) -> np.ndarray:
        """The column at positions ``a:b`` of the row order (a view of one array)."""
        values = self.ordered.get(name)
        if values is None:
            values = self.ordered[name] = self._column(name)[self.order]
        return values[a:b]


@dataclasses.dataclass
class Emitter:
    """Adds the series of one OTLP series under one exposed name (and extra labels)."""

    out: Collector
    wanted: set[str] | None
    rows: SeriesRows
    row: int
    t: np.ndarray
    stale: np.ndarray | None
    """The rows' stale markers, None when there is none."""
    zeros: np.ndarray | None = None
    """Times of injected zero samples: a counter restarted (a new start time)."""

    def wants(self, name: str) -> bool:
        """Whether series under the exposed ``name`` are asked for."""
        return self.wanted is None or name in self.wanted

    def __call__(
        self,
        name: str,
        values: np.ndarray,
        extra: dict[str, str] | None = None,
        keep: np.ndarray | None = None,
    ) -> None:
        if not self.wants(name):
            return
        labels, k = self.rows.labels(self.row, name, extra)
        t, stale = self.t, self.stale
        if keep is not None:
            t, values = t[keep], values[keep]
            stale = None if stale is None else stale[keep]
        if self.zeros is not None and len(self.zeros):
            t = np.concatenate([t, self.zeros])
            values = np.concatenate([values, np.zeros(len(self.zeros))])
            order = np.argsort(t, kind="stable")
            t, values = t[order], values[order]
            if stale is not None:
                stale = np.concatenate([stale, np.zeros(len(self.zeros), dtype=bool)])[order]
        self.out.add(labels, k, t, values, stale)


class FlatLists:
    """A list column as flat values with a start and a length per row, read once per table."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        lengths = pc.list_value_length(arr).fill_null(0)
        self.lengths = np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.values = np.asarray(
            pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.float64
        )

    def matrix(self, rows: np.ndarray, width: int) -> np.ndarray:
        return np.asarray(self.values[self.starts[rows][:, None] + np.arange(width)[None, :]])

    def row(self, i: int) -> tuple[float, ...]:
        a = int(self.starts[i])
        return tuple(self.values[a : a + int(self.lengths[i])].tolist())
