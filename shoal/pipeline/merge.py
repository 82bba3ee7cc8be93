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
import pyarrow.parquet as pq

from shoal.pipeline import encoded
from shoal.pipeline.writer import WriteTarget, write_hour
from shoal.storage import layout


def read_file(path: str, schema: pa.Schema) -> pa.Table:
    """A file's rows in the dictionary form of ``schema``, one chunk per row group.

    Each row group has dictionaries of its own, and Arrow cannot return a nested
    string leaf (a map key or value) read as a dictionary in several chunks
    ("Nested data conversions not implemented for chunked array outputs"), so a
    file is read row group by row group.
    """
    target = encoded.dictionary_schema(schema)
    names = list(schema.names)
    pf = pq.ParquetFile(path, read_dictionary=encoded.string_leaves(schema))
    pieces = []
    for group in range(pf.num_row_groups):
        piece = pf.read_row_group(group, columns=names, use_threads=False).select(names)
        pieces.append(piece if piece.schema.equals(target) else piece.cast(target))
    return pa.concat_tables(pieces) if pieces else target.empty_table()


def merge_files(target: WriteTarget, paths: list[str]) -> list[dict[str, object]]:
    """Read ``paths``, sort their rows together and write them as hourly files."""
    spec = target.spec
    data = pa.concat_tables([read_file(p, spec.schema) for p in paths]).combine_chunks()
    if data.num_rows == 0:
        return []
    data = encoded.decode_large_dictionaries(data, spec.schema)
    schema = data.schema
    hours = layout.time_as_us(data.column(spec.time_column)) // layout.HOUR_US
    several = int(hours.min()) != int(hours.max())
    keys = [c for c in spec.sort_columns if c in schema.names] or [spec.time_column]
    order = layout.sort_order(data, keys, hours)
    if not np.all(order[1:] > order[:-1]):
        data = layout.reorder(data, order)
        hours = hours[order]
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
