"""The attribute maps of series index rows, read column-wise.

The index holds its maps with dictionary-encoded keys and values
(:func:`shoal.storage.series_rows.hold`), which Arrow's ``map_lookup`` does not take; these
read plain and encoded maps alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.storage.series_rows import plain

Rows = np.ndarray[Any, np.dtype[np.int64]]
Offsets = np.ndarray[Any, np.dtype[np.int32]]
Mask = np.ndarray[Any, np.dtype[np.bool_]]
Codes = np.ndarray[Any, np.dtype[np.integer[Any]]]
_EMPTY = pa.array([""])


@dataclasses.dataclass(frozen=True)
class Equal:
    """A test that a string is ``value`` (``negated``: that it is not), which the
    functions here tell for many strings by one comparison instead of a call each."""

    value: str
    negated: bool = False

    def __call__(self, text: str) -> bool:
        return (text == self.value) != self.negated


Test = Callable[[str], bool]


def _strings_where(strings: pa.Array, wanted: Test) -> Mask:
    """Whether each of ``strings`` satisfies ``wanted``; null: False."""
    if isinstance(wanted, Equal):
        hit = np.asarray(pc.fill_null(pc.equal(strings, wanted.value), False), dtype=bool)
        return (~hit & np.asarray(strings.is_valid(), dtype=bool)) if wanted.negated else hit
    return np.array([v is not None and wanted(v) for v in strings.to_pylist()], bool)


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
        if once and _twice(_rows_of(chunk, offsets, np.flatnonzero(under))):
            return None
        found.update(_used(values, _valued(values) & under))
    return found


def _twice(rows: Offsets) -> bool:
    """Whether ascending ``rows`` name a row twice."""
    return bool(len(rows) > 1 and np.any(rows[1:] == rows[:-1]))


def _valued(values: pa.DictionaryArray) -> Mask:
    valued: Mask = ~_in_dictionary(values, _EMPTY)
    return valued & np.asarray(values.is_valid()) if values.null_count else valued


def _used(encoded: pa.DictionaryArray, chosen: Mask) -> list[str]:
    """The strings of ``encoded``'s dictionary that its ``chosen`` entries hold."""
    codes = _codes(encoded)[np.flatnonzero(chosen)]  # cheaper than a boolean gather
    used = np.zeros(len(encoded.dictionary), dtype=bool)
    used[codes] = True
    return [str(v) for v in encoded.dictionary.filter(pa.array(used)).to_pylist()]


def _codes(encoded: pa.DictionaryArray) -> Codes:
    """The codes of ``encoded``'s entries, 0 where an entry is null."""
    indices = encoded.indices
    return np.asarray(pc.fill_null(indices, 0) if indices.null_count else indices)


def _rows_of(chunk: pa.MapArray, offsets: Offsets, entries: Rows) -> Offsets:
    """The rows of a chunk of maps that its ascending ``entries`` (as :func:`_children`
    lists them) belong to: a binary search each where they are few, else the row of
    every entry, numbered once."""
    if len(entries) * 16 < len(offsets):
        found = np.searchsorted(offsets, entries.astype(np.int32), side="right") - 1
        return found.astype(np.int32, copy=False)
    every: Offsets = np.asarray(pc.list_parent_indices(_entry_list(chunk)), dtype=np.int32)
    return every[entries]


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


def rows_with(maps: pa.ChunkedArray, key: str, wanted: Test) -> Rows:
    """The rows of ``maps`` holding an entry under ``key`` whose value (not null) satisfies
    ``wanted``, which is asked once per distinct value; a row may appear more than once."""
    if not _encoded(maps):
        keys, values, rows = entries(maps)
        chosen = np.asarray(pc.fill_null(pc.equal(keys, key), False), dtype=bool)
        picked = pc.filter(values, pa.array(chosen))
        if not len(picked):
            return np.zeros(0, np.int64)
        distinct = pc.unique(picked)
        good = distinct.filter(pa.array(_strings_where(distinct, wanted)))
        matched: Rows = rows[chosen][np.asarray(pc.is_in(picked, value_set=good), dtype=bool)]
        return matched
    out: list[Rows] = []
    offset = 0
    for chunk in maps.chunks:
        keys, values, offsets = _children(chunk)
        hit = _in_dictionary(keys, pa.array([key])) & codes_where(values, wanted)
        out.append(_rows_of(chunk, offsets, np.flatnonzero(hit)).astype(np.int64) + offset)
        offset += len(chunk)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def matching(values: pa.Array | pa.ChunkedArray, wanted: Test) -> Mask:
    """Whether each of the plain strings ``values`` (null: ``""``) satisfies ``wanted``,
    which is asked once per distinct string."""
    filled = pc.fill_null(values, "")
    distinct = plain(pc.unique(filled))
    chosen = distinct.filter(pa.array(_strings_where(distinct, wanted)))
    hits: Mask = np.asarray(pc.is_in(filled, value_set=chosen), dtype=bool)
    return hits


def codes_where(encoded: pa.DictionaryArray, wanted: Test) -> Mask:
    """Whether each entry of ``encoded`` is a string (not null) that satisfies ``wanted``,
    asked once per string of the dictionary."""
    ok = _strings_where(encoded.dictionary, wanted)
    indices = encoded.indices
    if not len(ok):
        return np.zeros(len(encoded), dtype=bool)
    mask: Mask = ok[_codes(encoded)]
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
    if not len(wanted):
        return np.zeros(len(encoded), dtype=bool)
    codes = _codes(encoded)
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
            hit = np.flatnonzero(_in_dictionary(keys, pa.array([key])))
            rows = _rows_of(chunk, offsets, hit)
        else:
            keys, values, every_row = _chunk_entries(chunk)
            hit = np.flatnonzero(np.asarray(pc.fill_null(pc.equal(keys, key), False)))
            rows = every_row[hit]
        first = np.r_[True, rows[1:] != rows[:-1]]  # rows ascend: a row's first entry
        if not first.all():
            if once:
                return None
            rows, hit = rows[first], hit[first]
        at = np.full(len(chunk), -1, dtype=np.int64)
        at[rows] = hit
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


_SLOTS = 1 << 22
"""At most this many combinations are numbered through a table of one slot each; more
are renumbered densely by a hash first."""


def distinct_rows(table: pa.Table, names: Sequence[str]) -> tuple[Rows, Rows]:
    """The first row of each distinct combination of the values of columns ``names``
    (null a value of its own), in the order they first appear, and each row's
    combination by its number in that order. Values are compared as the table holds
    them (dictionary-encoded strings by code, so one dictionary per column): each
    column's codes are combined into one number per row, without a sort or a Python
    step per row."""
    key = np.zeros(table.num_rows, dtype=np.int64)
    space = 1
    for name in names:
        column = table.column(name)
        if column.null_count == len(column):
            continue  # null in every row
        coded, count = _column_codes(column)
        if space >= (1 << 62) // count:
            key, space = _numbered(key)
        key *= count
        key += coded
        space *= count
    if space > _SLOTS:
        key, space = _numbered(key)
    return _first_rows(key, space)


def _column_codes(column: pa.ChunkedArray) -> tuple[Codes, int]:
    """A code per row, from 0 (equal values, equal codes; null a code of its own), and
    how many codes there may be: read from the values where they are booleans, small
    integers or dictionary-encoded, else numbered by a hash."""
    if pa.types.is_dictionary(column.type) and column.num_chunks > 1:
        column = column.unify_dictionaries()
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    t = chunk.type
    if pa.types.is_dictionary(t):
        indices = chunk.indices
        count = len(chunk.dictionary)
        if indices.null_count:
            return np.asarray(pc.fill_null(indices, count)), count + 1
        return np.asarray(indices), count
    if pa.types.is_boolean(t):
        if chunk.null_count:
            return np.asarray(pc.fill_null(pc.cast(chunk, pa.int8()), 2)), 3
        return np.asarray(chunk.to_numpy(zero_copy_only=False)).view(np.uint8), 2
    if pa.types.is_integer(t) and len(chunk):
        nulls = chunk.null_count
        values = chunk
        low, high = pc.min_max(values).values()
        low_v, high_v = int(low.as_py() or 0), int(high.as_py() or 0)
        if high_v - low_v < _SLOTS:
            count = high_v - low_v + 1
            filled = pc.fill_null(values, high_v + 1) if nulls else values
            coded = np.asarray(filled).astype(np.int64) - low_v
            return coded, count + (1 if nulls else 0)
    encoded = pc.dictionary_encode(chunk)
    count = len(encoded.dictionary)
    return np.asarray(pc.fill_null(encoded.indices, count)), count + 1


def _numbered(key: Rows) -> tuple[Rows, int]:
    """``key`` renumbered densely, and how many numbers."""
    encoded = pc.dictionary_encode(pa.array(key))
    return np.asarray(encoded.indices).astype(np.int64), len(encoded.dictionary)


def _first_rows(key: Rows, space: int) -> tuple[Rows, Rows]:
    """Where each value of ``key`` (each in ``range(space)``) first appears, in order,
    and each row's value numbered so."""
    rows = len(key)
    first = np.full(space, rows, dtype=np.int64)
    np.minimum.at(first, key, np.arange(rows, dtype=np.int64))
    firsts: Rows = np.sort(first[first < rows])
    number = np.zeros(space, dtype=np.int64)
    number[key[firsts]] = np.arange(len(firsts), dtype=np.int64)
    numbered: Rows = number[key]
    return firsts, numbered
