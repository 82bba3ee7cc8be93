"""Rows with dictionary strings: how compaction moves strings without copying them.

Parquet stores every string column of a table dictionary-encoded (the layout
rules). Read with ``read_dictionary`` those columns stay dictionaries (indices
into the file's distinct values), so reading skips building every string,
reordering rows moves 4-byte indices, and the writer takes the dictionary as it
is instead of hashing every value again. The file then gets the table's own
Arrow schema in its footer (``ARROW:schema``, the bytes pyarrow writes for the
table's schema), so it reads back, in any reader, exactly like a file the
flusher wrote: plain strings, the same Parquet columns and encodings.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.storage import layout

ARROW_SCHEMA_KEY = b"ARROW:schema"

DICTIONARY_BYTES_LIMIT = 256 * 1024
"""A column whose merged dictionary is larger goes to the writer as plain strings.

Each row group's dictionary page holds the whole merged dictionary, so a large
one (high-cardinality strings such as log bodies) would repeat in every row
group and push the writer past its dictionary page limit."""


def _empty_file(schema: pa.Schema) -> pa.BufferReader:
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf, **layout.writer_options(schema))
    return pa.BufferReader(buf.getvalue())


def string_leaves(schema: pa.Schema) -> list[str]:
    """Parquet paths of the schema's string leaves (the dictionary-encoded columns)."""
    return list(layout.writer_options(schema)["use_dictionary"])


@functools.lru_cache(maxsize=16)
def dictionary_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Parquet files of it read with every string leaf as a dictionary."""
    return pq.ParquetFile(_empty_file(schema), read_dictionary=string_leaves(schema)).schema_arrow


@functools.lru_cache(maxsize=16)
def stored_schema_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The footer key-value pair through which pyarrow records ``schema`` in a file."""
    metadata = pq.ParquetFile(_empty_file(schema)).metadata.metadata or {}
    return {ARROW_SCHEMA_KEY: metadata[ARROW_SCHEMA_KEY]}


def sort_key(column: pa.Array) -> pa.Array:
    """A column that sorts like ``column``: a dictionary becomes its values' ranks."""
    if not pa.types.is_dictionary(column.type):
        return column
    ranks = pc.rank(column.dictionary, sort_keys="ascending", tiebreaker="dense")
    return pc.take(ranks, column.indices)


def _same_in_every_row(column: pa.ChunkedArray) -> bool:
    """True when every row holds null, or every row an empty list or map."""
    if column.null_count == len(column):
        return True
    if column.null_count or not (pa.types.is_list(column.type) or pa.types.is_map(column.type)):
        return False
    for chunk in column.chunks:
        offsets = chunk.offsets
        if offsets[0].as_py() != offsets[len(offsets) - 1].as_py():
            return False
    return True


def take_rows(table: pa.Table, order: pa.Array) -> pa.Table:
    """``table.take(order)``; a column equal in every row (all null, all empty) is kept."""
    columns = [col if _same_in_every_row(col) else col.take(order) for col in table.columns]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _dictionaries(array: pa.Array) -> Iterator[pa.Array]:
    typ = array.type
    if pa.types.is_dictionary(typ):
        yield array.dictionary
    elif pa.types.is_map(typ):
        yield from _dictionaries(array.keys)
        yield from _dictionaries(array.items)
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        yield from _dictionaries(array.values)
    elif pa.types.is_struct(typ):
        for i in range(typ.num_fields):
            yield from _dictionaries(array.field(i))


def decode_large_dictionaries(table: pa.Table, plain: pa.Schema) -> pa.Table:
    """``table`` with each column holding a dictionary over the limit cast to ``plain``."""
    for i, name in enumerate(table.column_names):
        column = table.column(i)
        if any(
            d.nbytes > DICTIONARY_BYTES_LIMIT
            for chunk in column.chunks
            for d in _dictionaries(chunk)
        ):
            field = plain.field(name)
            table = table.set_column(i, field, column.cast(field.type))
    return table
