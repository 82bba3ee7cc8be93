"""Columns that hold null, or an empty list or map, in every row, built without copying.

The decoders hand the flusher many such columns (the histogram fields of gauge
rows, the exemplars of points without any, the type maps of string-only
attributes), one chunk per request. Any order of one is itself, so the flusher
does not take them; and the Parquet writer spends time on every chunk of every
column, so it gets them as one chunk instead: a slice of an array built once
per type over one shared zeroed buffer, which serves as validity bitmap (all
null), offsets (all lists empty) and values alike. Building one costs nothing
per flush and holds no memory per column (docs/benchmarks.md).
"""

from __future__ import annotations

import functools

import pyarrow as pa

ROWS = 1 << 18
"""Rows of one cached array; a longer column is several slices of it, one chunk each."""

_ZEROS = pa.py_buffer(bytes((ROWS + 1) * 8))
"""Zeroed bytes enough for ``ROWS`` values of 8 bytes, or ``ROWS + 1`` 64-bit offsets."""


_OFFSET_TYPES = (
    pa.types.is_string,
    pa.types.is_binary,
    pa.types.is_large_string,
    pa.types.is_large_binary,
)
_FIXED_WIDTH_TYPES = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_timestamp,
    pa.types.is_date,
)


@functools.lru_cache(maxsize=256)
def _build(typ: pa.DataType, null: bool) -> pa.Array | None:
    """``ROWS`` rows of ``typ``, all null (``null``) or all empty lists/maps, built once per
    type; None for a type this does not build (the caller keeps the column as it is)."""
    validity = _ZEROS if null else None
    nulls = ROWS if null else 0
    if pa.types.is_map(typ):
        entries = [pa.array([], typ.key_type), pa.array([], typ.item_type)]
        child: pa.Array = pa.StructArray.from_arrays(
            entries, fields=[typ.key_field, typ.item_field]
        )
        return pa.Array.from_buffers(typ, ROWS, [validity, _ZEROS], nulls, children=[child])
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        child = pa.array([], typ.value_type)
        return pa.Array.from_buffers(typ, ROWS, [validity, _ZEROS], nulls, children=[child])
    if not null:
        return None
    if any(kind(typ) for kind in _OFFSET_TYPES):  # validity, offsets, (no) values
        return pa.Array.from_buffers(typ, ROWS, [_ZEROS, _ZEROS, _ZEROS], ROWS)
    if any(kind(typ) for kind in _FIXED_WIDTH_TYPES):  # validity, values
        return pa.Array.from_buffers(typ, ROWS, [_ZEROS, _ZEROS], ROWS)
    return None


def column(typ: pa.DataType, rows: int, null: bool) -> pa.ChunkedArray | None:
    """``rows`` rows of ``typ``, each null (``null``) or an empty list or map, as slices
    of a cached array (one chunk up to :data:`ROWS` rows); None for a type not handled."""
    whole = _build(typ, null)
    if whole is None:
        return None
    chunks = [whole.slice(0, min(ROWS, rows - start)) for start in range(0, rows, ROWS)]
    return pa.chunked_array(chunks, typ)
