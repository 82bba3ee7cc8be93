"""What a codec's decoding of one request body gives: the rows, and what was refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

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
