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


@functools.lru_cache(maxsize=16)
def string_leaves(schema: pa.Schema) -> tuple[str, ...]:
    """Parquet paths of the schema's string leaves (the dictionary-encoded columns)."""
    return tuple(layout.writer_options(schema)["use_dictionary"])


@functools.lru_cache(maxsize=16)
def dictionary_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Parquet files of it read with every string leaf as a dictionary."""
    return pq.ParquetFile(_empty_file(schema), read_dictionary=string_leaves(schema)).schema_arrow


@functools.lru_cache(maxsize=16)
def stored_schema_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The footer key-value pair through which pyarrow records ``schema`` in a file."""
    metadata = pq.ParquetFile(_empty_file(schema)).metadata.metadata or {}
    return {ARROW_SCHEMA_KEY: metadata[ARROW_SCHEMA_KEY]}


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
