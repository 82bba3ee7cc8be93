"""The attribute maps of series index rows, read column-wise.

The index holds its maps with dictionary-encoded keys and values
(:func:`shoal.storage.series_rows.hold`), which Arrow's ``map_lookup`` does not take; these
read plain and encoded maps alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.storage.series_rows import plain

Rows = np.ndarray[Any, np.dtype[np.int64]]
Offsets = np.ndarray[Any, np.dtype[np.int32]]
Mask = np.ndarray[Any, np.dtype[np.bool_]]
_EMPTY = pa.array([""])


def _entry_list(maps: pa.Array) -> pa.ListArray:
    """``maps`` viewed as lists of ``(key, value)`` structs (a map's ``.keys``/``.items``
    ignore a slice's offset; the list view does not)."""
    t = maps.type
    entries = pa.struct([pa.field("key", t.key_type, False), ("value", t.item_type)])
    return maps.cast(pa.list_(entries))


def _chunk_entries(chunk: pa.Array) -> tuple[pa.Array, pa.Array, Rows]:
    """Every entry of one chunk of maps: its key, its value and its row in the chunk."""
    listed = _entry_list(chunk)
    flat = listed.flatten()
    rows = np.asarray(pc.list_parent_indices(listed), dtype=np.int64)
    return flat.field("key"), flat.field("value"), rows


def entries(maps: pa.ChunkedArray) -> tuple[pa.Array, pa.Array, Rows]:
    """Every entry of ``maps``: its key, its value and its row (types kept)."""
    t = maps.type
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    rows: list[Rows] = []
    offset = 0
    for chunk in maps.chunks:
        k, v, r = _chunk_entries(chunk)
        keys.append(k)
        values.append(v)
        rows.append(r + offset)
        offset += len(chunk)
    if not keys:
        return pa.array([], t.key_type), pa.array([], t.item_type), np.zeros(0, np.int64)
    if len(keys) > 1 and pa.types.is_dictionary(t.key_type):
        both = pa.table({"k": pa.chunked_array(keys), "v": pa.chunked_array(values)})
        both = both.unify_dictionaries().combine_chunks()
        return both.column("k").chunk(0), both.column("v").chunk(0), np.concatenate(rows)
    return pa.concat_arrays(keys), pa.concat_arrays(values), np.concatenate(rows)


def keys_with_values(maps: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """The keys and values of every entry of ``maps`` whose value is not empty."""
    if not _encoded(maps):
        keys, values, _ = entries(maps)
        keep = pc.fill_null(pc.not_equal(values, ""), False)
        return pc.filter(keys, keep), pc.filter(values, keep)
    kept_keys: list[pa.Array] = []
    kept_values: list[pa.Array] = []
    for chunk in maps.chunks:
        keys, values, _ = _children(chunk)
        keep = ~_in_dictionary(values, _EMPTY) & np.asarray(values.is_valid())
        kept_keys.append(keys.filter(pa.array(keep)))
        kept_values.append(values.filter(pa.array(keep)))
    both = pa.table({"k": pa.chunked_array(kept_keys), "v": pa.chunked_array(kept_values)})
    both = both.unify_dictionaries().combine_chunks()
    return both.column("k").chunk(0), both.column("v").chunk(0)


def _encoded(maps: pa.ChunkedArray) -> bool:
    """Whether ``maps`` (no null map among them) hold dictionary-encoded keys and values:
    their entries are then read through the codes, without a copy of every entry."""
    t = maps.type
    return bool(
        pa.types.is_dictionary(t.key_type)
        and pa.types.is_dictionary(t.item_type)
        and maps.null_count == 0
        and maps.num_chunks > 0
    )


def _children(chunk: pa.MapArray) -> tuple[pa.DictionaryArray, pa.DictionaryArray, Offsets]:
    """One chunk's keys and values, entry by entry, as views, and where each row's
    entries start (``offsets`` from 0; the chunk may be a slice: its ``keys`` and
    ``items`` are the whole children)."""
    offsets = np.asarray(chunk.offsets, dtype=np.int32)
    first, last = int(offsets[0]), int(offsets[-1])
    keys = chunk.keys.slice(first, last - first)
    values = chunk.items.slice(first, last - first)
    return keys, values, offsets - first


def _in_dictionary(encoded: pa.DictionaryArray, chosen: pa.Array) -> Mask:
    """Whether each entry of ``encoded`` is one of the strings ``chosen`` (null: False),
    each distinct string tested once and the entries by their codes."""
    hit = np.asarray(pc.is_in(encoded.dictionary, value_set=chosen), dtype=bool)
    wanted = np.flatnonzero(hit)
    indices = encoded.indices
    codes = np.asarray(pc.fill_null(indices, 0) if indices.null_count else indices)
    if not len(wanted):
        return np.zeros(len(encoded), dtype=bool)
    # one string (a key, a metric name): a comparison, cheaper than a table lookup
    mask = np.asarray(codes == wanted[0]) if len(wanted) == 1 else hit[codes]
    return mask & np.asarray(indices.is_valid()) if indices.null_count else mask


def lookup(maps: pa.ChunkedArray, key: str) -> pa.ChunkedArray:
    """Each row's first value under ``key`` in ``maps``, plain strings, ``""`` where it
    has none."""
    if not pa.types.is_dictionary(maps.type.key_type):
        return pc.fill_null(pc.map_lookup(maps, key, "first"), "")
    found = [plain(values) for values in _lookup_chunks(maps, key)]
    return pc.fill_null(pa.chunked_array(found, pa.string()), "")


def lookup_encoded(maps: pa.ChunkedArray, key: str) -> pa.ChunkedArray:
    """:func:`lookup`, its values left as the maps hold them (dictionary-encoded in the
    index) and null where a row has none: for grouping rows by value, cheaper than text."""
    if not pa.types.is_dictionary(maps.type.key_type):
        return pc.map_lookup(maps, key, "first")
    return pa.chunked_array(_lookup_chunks(maps, key), maps.type.item_type)


def _lookup_chunks(maps: pa.ChunkedArray, key: str) -> list[pa.Array]:
    out = []
    for chunk in maps.chunks:
        hit: np.ndarray[Any, Any]
        rows: np.ndarray[Any, Any]
        if _encoded(pa.chunked_array([chunk])):
            keys, values, offsets = _children(chunk)
            hit = np.flatnonzero(_in_dictionary(keys, pa.array([key]))).astype(np.int32)
            rows = np.searchsorted(offsets, hit, side="right") - 1  # int32: twice as fast
        else:
            keys, values, every_row = _chunk_entries(chunk)
            hit = np.flatnonzero(np.asarray(pc.fill_null(pc.equal(keys, key), False)))
            rows = every_row[hit]
        at = np.full(len(chunk), -1, dtype=np.int64)
        at[rows[::-1]] = hit[::-1]  # the first entry of a row wins
        out.append(values.take(pa.array(at, mask=at < 0)))
    return out


def among(column: pa.ChunkedArray, values: Sequence[str]) -> pa.ChunkedArray:
    """Whether each row's string is one of ``values`` (null: False), tested once per
    distinct string where the column is dictionary-encoded."""
    chosen = pa.array(list(values), pa.string())
    if not pa.types.is_dictionary(column.type):
        return pc.fill_null(pc.is_in(column, value_set=chosen), False)
    out = [pa.array(_in_dictionary(chunk, chosen), pa.bool_()) for chunk in column.chunks]
    return pa.chunked_array(out, pa.bool_())
