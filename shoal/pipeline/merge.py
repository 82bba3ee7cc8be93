"""Compaction's task body: merge small files into well-sized files sorted by series and time.

A task reads its files with Arrow, strings as dictionaries (see
:mod:`shoal.pipeline.encoded`), sorts all rows together by (hour, the table's
sort columns) and writes each hour with :func:`shoal.pipeline.writer.write_hour`,
which also computes each new file's Delta statistics and coverage from the
rows in memory.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from pyarrow._parquet import ParquetReader

from shoal.pipeline import encoded
from shoal.pipeline.writer import WriteTarget, write_hour
from shoal.storage import layout
from shoal.storage.place import Place


def read_file(place: Place, path: str, schema: pa.Schema) -> pa.Table:
    """A file's rows in the dictionary form of ``schema``, one chunk per row group.

    Each row group has dictionaries of its own, and Arrow cannot return a nested
    string leaf (a map key or value) read as a dictionary in several chunks
    ("Nested data conversions not implemented for chunked array outputs"), so a
    file is read row group by row group, from ``place`` (a table's directory or
    bucket: one GET for the whole file). The reader is Arrow's own, under
    ``pq.ParquetFile``: that wrapper also maps every nested column path in
    Python, a cost per file of this wide schema that compaction, opening
    thousands of small files, does not need.
    """
    target = encoded.dictionary_schema(schema)
    reader = ParquetReader()
    source = place.open_input(path)
    reader.open(source, read_dictionary=encoded.string_leaves(schema), pre_buffer=False)
    try:
        pieces = []
        for group in range(reader.num_row_groups):
            piece = reader.read_row_group(group, None, use_threads=False)
            if not piece.schema.equals(target):
                piece = piece.select(target.names).cast(target)
            pieces.append(piece)
    finally:
        reader.close()
        source.close()
    return pa.concat_tables(pieces) if pieces else target.empty_table()


def merge_files(target: WriteTarget, paths: list[str]) -> list[dict[str, object]]:
    """Read ``paths`` (relative to the target's place), sort their rows together and
    write them as hourly files."""
    spec = target.spec
    # one chunk per input row group: the sort's take joins them (with one
    # dictionary per column) while it moves the rows, so they are not copied twice
    data = pa.concat_tables([read_file(target.place, p, spec.schema) for p in paths])
    if data.num_rows == 0:
        return []
    hours = layout.time_as_us(data.column(spec.time_column)) // layout.HOUR_US
    several = int(hours.min()) != int(hours.max())
    keys = [c for c in spec.sort_columns if c in data.schema.names] or [spec.time_column]
    order = layout.sort_order(data, keys, hours)
    if not np.all(order[1:] > order[:-1]):
        data = layout.reorder(data, order)
        hours = hours[order]
    # the columns the take left as they were (all null or all empty), or all of
    # them when the rows were in order already
    data = data.combine_chunks()
    data = encoded.decode_large_dictionaries(data, spec.schema)
    schema = data.schema
    if not several:
        return write_hour(target, int(hours[0]), data, schema)
    cuts = [0, *(np.flatnonzero(np.diff(hours)) + 1).tolist(), data.num_rows]
    written: list[dict[str, object]] = []
    for lo, hi in itertools.pairwise(cuts):
        written.extend(write_hour(target, int(hours[lo]), data.slice(lo, hi - lo), schema))
    return written


def merge_runs(target: WriteTarget, runs: list[list[str]]) -> list[dict[str, object]]:
    """Task body for several runs of files, merged one after the other."""
    written: list[dict[str, object]] = []
    for paths in runs:
        written.extend(merge_files(target, paths))
    return written
