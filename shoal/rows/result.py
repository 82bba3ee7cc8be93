"""What a codec's decoding of one request body gives: the rows, and what was refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """What a codec (:func:`shoal.otlp.decode`, :func:`shoal.promwrite.decode.decode`) returns.

    ``table`` has exactly the signal's frozen schema and one chunk per column
    (``to_batches()`` yields one batch, none when empty); ``accepted`` rows are in
    it; ``rejected`` points were dropped, and ``errors`` says why (one line per
    reason, with a count), for OTLP ``partial_success``. ``all_null`` says, per
    column, whether every row of it is null, when the decoder knew it from the arrays
    it built the table of (None: not known); the WAL's accounting then need not ask
    each column of the table again (``shoal.ingest.records.rows_bytes``).
    """

    table: pa.Table
    accepted: int
    rejected: int
    errors: list[str]
    all_null: tuple[bool, ...] | None = None


def all_null(columns: Sequence[pa.Array | pa.ChunkedArray], rows: int) -> tuple[bool, ...]:
    """Per column, whether every one of its ``rows`` rows is null: the columns a table
    is about to be made of, asked while their wrappers exist (asking a table's columns
    makes a wrapper per column, several times the cost)."""
    return tuple(column.null_count == rows for column in columns)


class Rejections:
    """Counts rejected rows per reason and renders the partial-success messages."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.total = 0

    def add(self, reason: str, count: int, rejected: bool = True) -> None:
        if count <= 0:
            return
        self._counts[reason] = self._counts.get(reason, 0) + count
        if rejected:
            self.total += count

    def mask(self, reason: str, bad: np.ndarray, keep: np.ndarray) -> None:
        """Reject rows where ``bad`` holds and that are still kept; updates ``keep``."""
        newly = bad & keep
        count = int(newly.sum())
        if count:
            self.add(reason, count)
            keep &= ~newly

    def messages(self) -> list[str]:
        return [f"{reason} ({count})" for reason, count in self._counts.items()]

    def result(
        self, columns: Mapping[str, pa.Array], schema: pa.Schema, keep: np.ndarray
    ) -> DecodeResult:
        """The table of ``schema`` made of ``columns`` (by name) less the rows ``keep``
        leaves out, and what was refused."""
        table = pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
        if not keep.all():
            table = table.filter(pa.array(keep))
        return DecodeResult(table, table.num_rows, self.total, self.messages())
