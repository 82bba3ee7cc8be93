"""The attribute maps of series index rows, read column-wise.

The index holds its maps with dictionary-encoded keys and values
(:func:`shoal.storage.series_rows.hold`), which Arrow's ``map_lookup`` does not take; these
read plain and encoded maps alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _keys_with_values(maps: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """The keys and values of every entry of ``maps`` whose value is not empty."""
    keys, values, _ = entries(maps)
    keep = pc.fill_null(pc.not_equal(values, ""), False)
    return pc.filter(keys, keep), pc.filter(values, keep)


def valued_keys(maps: pa.ChunkedArray) -> set[str]:
    """The keys under which some row of ``maps`` holds a non-empty value."""
    if not _encoded(maps):
        keys, _ = _keys_with_values(maps)
        return {str(k) for k in pc.unique(keys).to_pylist()}
    found: set[str] = set()
    for chunk in maps.chunks:
        keys, values, _ = _children(chunk)
        found.update(_used(keys, _valued(values)))
    return found


def values_under(maps: pa.ChunkedArray, key: str) -> set[str]:
    """The non-empty values that rows of ``maps`` hold under ``key``."""
    found = _values_under(maps, key, once=False)
    assert found is not None  # not asked for once
    return found


def values_under_once(maps: pa.ChunkedArray, key: str) -> set[str] | None:
    """:func:`values_under`, or None where a row holds ``key`` twice (for the values of
    each row's first entry, as :func:`lookup` reads them)."""
    return _values_under(maps, key, once=True)


def _values_under(maps: pa.ChunkedArray, key: str, once: bool) -> set[str] | None:
    if not _encoded(maps):
        if once and _lookup_chunks(maps, key, once=True) is None:
            return None
        keys, values = _keys_with_values(maps)
        return {str(v) for v in pc.unique(pc.filter(values, pc.equal(keys, key))).to_pylist()}
    found: set[str] = set()
    for chunk in maps.chunks:
        keys, values, offsets = _children(chunk)
        under = _in_dictionary(keys, pa.array([key]))
        if once:  # entries under the key per row, from running counts at the row bounds
            running = np.concatenate([[0], np.cumsum(under, dtype=np.int32)])
            if len(offsets) > 1 and int(np.max(np.diff(running[offsets]))) > 1:
                return None
        found.update(_used(values, _valued(values) & under))
    return found


def _valued(values: pa.DictionaryArray) -> Mask:
    valued: Mask = ~_in_dictionary(values, _EMPTY) & np.asarray(values.is_valid())
    return valued


def _used(encoded: pa.DictionaryArray, chosen: Mask) -> list[str]:
    """The strings of ``encoded``'s dictionary that its ``chosen`` entries hold."""
    codes = np.asarray(pc.fill_null(encoded.indices, 0))[chosen]
    used = np.bincount(codes, minlength=len(encoded.dictionary)) > 0
    return [str(v) for v in encoded.dictionary.filter(pa.array(used)).to_pylist()]


def any_key_besides(maps: pa.ChunkedArray, known: Sequence[str]) -> bool:
    """Whether any row of ``maps`` holds a non-empty value under a key not in ``known``:
    tested through the codes where the maps are encoded, without a copy of the entries."""
    chosen = pa.array(sorted(known), pa.string())
    if not _encoded(maps):
        keys, _ = _keys_with_values(maps)
        return bool(len(keys)) and not pc.all(pc.is_in(keys, value_set=chosen)).as_py()
    for chunk in maps.chunks:
        keys, values, _ = _children(chunk)
        other = ~_in_dictionary(keys, chosen)
        if other.any():
            other &= _valued(values)
            if other.any():
                return True
    return False


def distinct_keys(maps: pa.ChunkedArray) -> list[str]:
    """The keys of ``maps`` that some row holds, each once."""
    if not _encoded(maps):
        keys, _, _ = entries(maps)
        return sorted(str(k) for k in pc.unique(keys).to_pylist())
    found: set[str] = set()
    for chunk in maps.chunks:
        keys, _, _ = _children(chunk)
        used = np.bincount(np.asarray(keys.indices), minlength=len(keys.dictionary)) > 0
        found.update(str(k) for k in keys.dictionary.filter(pa.array(used)).to_pylist())
    return sorted(found)


def rows_with(maps: pa.ChunkedArray, key: str, wanted: Callable[[str], bool]) -> Rows:
    """The rows of ``maps`` holding an entry under ``key`` whose value (not null) satisfies
    ``wanted``, which is asked once per distinct value; a row may appear more than once."""
    if not _encoded(maps):
        keys, values, rows = entries(maps)
        chosen = np.asarray(pc.fill_null(pc.equal(keys, key), False), dtype=bool)
        picked = pc.filter(values, pa.array(chosen))
        distinct = pc.unique(picked)
        ok = [v is not None and wanted(str(v)) for v in distinct.to_pylist()]
        good = distinct.filter(pa.array(ok, pa.bool_()))
        matched: Rows = rows[chosen][np.asarray(pc.is_in(picked, value_set=good), dtype=bool)]
        return matched
    out: list[Rows] = []
    offset = 0
    for chunk in maps.chunks:
        keys, values, offsets = _children(chunk)
        hit = _in_dictionary(keys, pa.array([key])) & codes_where(values, wanted)
        at = np.flatnonzero(hit).astype(np.int32)
        out.append(np.searchsorted(offsets, at, side="right").astype(np.int64) - 1 + offset)
        offset += len(chunk)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def matching(values: pa.Array | pa.ChunkedArray, wanted: Callable[[str], bool]) -> Mask:
    """Whether each of the plain strings ``values`` (null: ``""``) satisfies ``wanted``,
    which is asked once per distinct string."""
    filled = pc.fill_null(values, "")
    distinct = plain(pc.unique(filled))
    ok = [wanted(str(v)) for v in distinct.to_pylist()]
    chosen = distinct.filter(pa.array(ok, pa.bool_()))
    hits: Mask = np.asarray(pc.is_in(filled, value_set=chosen), dtype=bool)
    return hits


def codes_where(encoded: pa.DictionaryArray, wanted: Callable[[str], bool]) -> Mask:
    """Whether each entry of ``encoded`` is a string (not null) that satisfies ``wanted``,
    asked once per string of the dictionary."""
    ok = np.array([v is not None and wanted(v) for v in encoded.dictionary.to_pylist()], bool)
    indices = encoded.indices
    if not len(ok):
        return np.zeros(len(encoded), dtype=bool)
    codes = np.asarray(pc.fill_null(indices, 0) if indices.null_count else indices)
    mask: Mask = ok[codes]
    return mask & np.asarray(indices.is_valid()) if indices.null_count else mask


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
    found = [plain(values) for values in _lookup_chunks(maps, key) or []]
    return pc.fill_null(pa.chunked_array(found, pa.string()), "")


def lookup_encoded(maps: pa.ChunkedArray, key: str) -> pa.ChunkedArray:
    """:func:`lookup`, its values left as the maps hold them (dictionary-encoded in the
    index) and null where a row has none: for grouping rows by value, cheaper than text."""
    if not pa.types.is_dictionary(maps.type.key_type):
        return pc.map_lookup(maps, key, "first")
    found = _lookup_chunks(maps, key)
    assert found is not None  # not asked for once
    return pa.chunked_array(found, maps.type.item_type)


def lookup_once(maps: pa.ChunkedArray, key: str) -> pa.ChunkedArray | None:
    """:func:`lookup_encoded`, or None where a row holds ``key`` twice (its answer would
    then depend on which entry is read)."""
    found = _lookup_chunks(maps, key, once=True)
    return None if found is None else pa.chunked_array(found, maps.type.item_type)


def _lookup_chunks(maps: pa.ChunkedArray, key: str, once: bool = False) -> list[pa.Array] | None:
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
        if once and bool(np.any(np.diff(rows) == 0)):
            return None
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
