"""Vectorised helpers shared by the per-signal decoders: lists, ids, times, hashes."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from shoal.rows.cache import DecodeCache
from shoal.schema import ATTRS, UTC_US

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

INT64_MAX = 2**63 - 1
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_HEX_PAIRS = np.stack([_HEX[np.arange(256) >> 4], _HEX[np.arange(256) & 15]], axis=1)
# byte -> its two hex digits as one little-endian uint16 (first digit in the low byte)
_HEX16 = (_HEX_PAIRS[:, 0].astype("<u2") | (_HEX_PAIRS[:, 1].astype("<u2") << 8)).astype("<u2")


_CONSTANT_ARRAYS: DecodeCache[tuple[str, int, pa.DataType], pa.Array] = DecodeCache(
    max_bytes=64 << 20, max_entries=1024
)
"""All-null and all-empty columns by length and type (arrays are immutable)."""


def empty_lists(n: int, list_type: pa.DataType) -> pa.Array:
    """``n`` empty values of a list or map type (cached)."""
    key = ("empty", n, list_type)
    array = _CONSTANT_ARRAYS.get(key)
    if array is None:
        offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
        if isinstance(list_type, pa.MapType):
            keys, items = pa.array([], list_type.key_type), pa.array([], list_type.item_type)
            array = pa.MapArray.from_arrays(offsets, keys, items, type=list_type)
        else:
            values = pa.array([], list_type.value_type)
            array = pa.ListArray.from_arrays(offsets, values, type=list_type)
        _CONSTANT_ARRAYS.put(key, array, array.nbytes)
    return array


def empty_maps(n: int) -> pa.MapArray:
    """``n`` empty attribute maps."""
    maps: pa.MapArray = empty_lists(n, ATTRS)
    return maps


def nulls(n: int, type_: pa.DataType) -> pa.Array:
    """``pa.nulls(n, type_)``, cached (a metrics request has a dozen all-null columns)."""
    key = ("null", n, type_)
    array = _CONSTANT_ARRAYS.get(key)
    if array is None:
        array = pa.nulls(n, type_)
        _CONSTANT_ARRAYS.put(key, array, array.nbytes)
    return array


class Broadcast:
    """Columns of a few owner rows (scopes, metrics) to repeat for the rows they own.

    Each Arrow kernel call costs several microseconds whatever its size, so
    columns that need no gather are built directly: maps without any entry
    become cached empty maps, all-null columns cached null arrays, integer
    columns holding a single value a numpy fill. The others are taken
    together in one ``Table.take``.
    """

    def __init__(self, columns: dict[str, pa.Array]) -> None:
        self._empty: list[str] = []
        self._null: list[tuple[str, pa.DataType]] = []
        self._constant: list[tuple[str, pa.DataType, int]] = []
        gathered: dict[str, pa.Array] = {}
        for name, column in columns.items():
            if isinstance(column, pa.MapArray) and len(column.keys) == 0:
                self._empty.append(name)
            elif column.null_count == len(column):
                self._null.append((name, column.type))
            elif pa.types.is_integer(column.type) and column.null_count == 0:
                values = column.to_numpy()
                if (values == values[0]).all():
                    self._constant.append((name, column.type, int(values[0])))
                else:
                    gathered[name] = column
            else:
                gathered[name] = column
        self._table = pa.table(gathered) if gathered else None

    @property
    def nbytes(self) -> int:
        """Arrow bytes held (for caches that budget their memory)."""
        return 0 if self._table is None else int(self._table.nbytes)

    def take(self, indices: I64) -> dict[str, pa.Array | pa.ChunkedArray]:
        n = len(indices)
        out: dict[str, pa.Array | pa.ChunkedArray] = {}
        if self._table is not None:
            taken = self._table.take(pa.array(indices, type=pa.int64()))
            out.update(zip(taken.column_names, taken.columns, strict=True))
        for name in self._empty:
            out[name] = empty_maps(n)
        for name, type_ in self._null:
            out[name] = nulls(n, type_)
        for name, type_, value in self._constant:
            out[name] = pa.array(np.full(n, value, dtype=type_.to_pandas_dtype()), type=type_)
        return out


def flatten(lists: pa.Array) -> tuple[pa.Array, I64]:
    """Child values of a list array and, for each child, the index of its parent row."""
    values = lists.flatten()
    if lists.null_count:
        parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        return values, parents
    offsets = lists.offsets.to_numpy(zero_copy_only=False)
    return values, np.repeat(np.arange(len(lists), dtype=np.int64), np.diff(offsets))


def distinct(*arrays: pa.Array) -> tuple[I64, I64]:
    """For rows of equal-length ``arrays``: per row, the number of its combination of
    values among the distinct ones, numbered in the order they first come (a null is a
    value), and the row where each first stands. Arrow's hash tables do the work, not a
    Python loop over the rows (nor ``np.unique``, which sorts and, in numpy 2.4, costs
    several times a sort)."""
    codes: I64 | None = None
    for array in arrays:
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        indices = encoded.indices.to_numpy().astype(np.int64)
        codes = indices if codes is None else codes * len(encoded.dictionary) + indices
    assert codes is not None
    if len(arrays) > 1:
        codes = pc.dictionary_encode(pa.array(codes)).indices.to_numpy().astype(np.int64)
    # numbers come in first-seen order: a row is a first sighting where the number grows
    first: I64 = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    return codes, first


def list_offsets(lists: pa.Array) -> I64:
    """Offsets of a list array, rebased to start at 0 (length ``len(lists) + 1``)."""
    offsets: I64 = lists.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    rebased: I64 = offsets - offsets[0]
    return rebased


def u64(array: pa.Array) -> U64:
    """A uint64 (or other integer) Arrow array as a numpy uint64 array (nulls as 0)."""
    if array.null_count:
        array = array.fill_null(0)
    values: U64 = array.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    return values


def owned(array: pa.Array) -> pa.Array:
    """``array`` copied into buffers of its own.

    A column taken as it is from the protobuf decoder's output must be copied before it
    goes into rows: those buffers come through Arrow's C interface, where one buffer still
    in use keeps the whole decoded request alive, and rows wait in the snapshot until
    their flush."""
    return pa.concat_arrays([array])


def over_int64(values: U64) -> BOOL:
    """Which unsigned values do not fit in int64."""
    return values > np.uint64(INT64_MAX)


def as_int64(values: U64) -> pa.Array:
    """uint64 values known to fit in int64 (others clamped to 0) as an Arrow int64 array."""
    return pa.array(np.where(over_int64(values), 0, values).astype(np.int64))


def u32_as_int64(array: pa.Array) -> pa.Array:
    """A uint32 column (flags, dropped counts) as int64, nulls as 0: one cast, no numpy trip."""
    if array.null_count:
        array = array.fill_null(0)
    return array.cast(pa.int64())


def timestamps(nanos: I64, valid: BOOL | None = None) -> pa.Array:
    """Microsecond UTC timestamps (floor of the nanoseconds); rows not ``valid`` are null."""
    micros = nanos // 1000
    # built as int64 and viewed as timestamps: half the time of building timestamps
    if valid is None:
        return pa.array(micros).view(UTC_US)
    return pa.array(micros, mask=~valid).view(UTC_US)


def hex_ids(ids: pa.Array, size: int) -> tuple[pa.Array, BOOL]:
    """Binary ids to lowercase hex strings.

    Returns the string array (null where the id is empty or all zeros, which
    OTLP treats as absent) and a mask of rows whose length is neither 0 nor
    ``size`` (invalid ids).
    """
    n = len(ids)
    buffers = ids.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[ids.offset : ids.offset + n + 1]
    if ids.null_count:
        lengths = pc.binary_length(ids).fill_null(0).to_numpy(zero_copy_only=False)
    else:
        lengths = np.diff(offsets)
    good = lengths == size
    bad = (lengths != 0) & ~good
    if not good.any():
        return pa.nulls(n, pa.string()), bad
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else None
    assert data is not None
    if good.all() and ids.null_count == 0:  # the common case: a contiguous n x size block
        matrix = data[offsets[0] : offsets[0] + n * size].reshape(n, size)
    else:
        starts = offsets[:-1][good].astype(np.int64)
        matrix = data[starts[:, None] + np.arange(size)]
    nonzero = matrix.any(axis=1)
    present = good.copy()
    present[good] = nonzero
    text = np.take(_HEX16, matrix if nonzero.all() else matrix[nonzero])
    out_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(present, 2 * size, 0), out=out_offsets[1:])
    validity = pa.py_buffer(np.packbits(present, bitorder="little").tobytes())
    array = pa.Array.from_buffers(
        pa.string(),
        n,
        [validity, pa.py_buffer(out_offsets.tobytes()), pa.py_buffer(text.tobytes())],
    )
    return array, bad


# -- stable hashing ---------------------------------------------------------------

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(x: U64) -> U64:
    """MurmurHash3's 64-bit finaliser (wrapping uint64 arithmetic)."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    return x ^ (x >> _S33)


def hash_text(*parts: str) -> int:
    """64-bit BLAKE2b of the parts joined by NUL bytes: stable across processes and runs."""
    digest = hashlib.blake2b("\0".join(parts).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def sum_per_list(entry_hashes: U64, offsets: I64) -> U64:
    """Per list, the wrapping sum of its entries' hashes (order-independent)."""
    sums = np.zeros(len(entry_hashes) + 1, dtype=np.uint64)
    np.cumsum(entry_hashes, out=sums[1:])
    result: U64 = sums[offsets[1:]] - sums[offsets[:-1]]
    return result


_POINT_SALT = np.uint64(0x5BD1E9955BD1E995)
_RESOURCE_SALT = np.uint64(0x27D4EB2F165667C5)


def series_ids(name_hash: U64, point_hash: U64, resource_hash: U64) -> pa.Array:
    """``series_id`` from the per-row hashes of name, point attributes, resource attributes."""
    point = fmix64(point_hash ^ _POINT_SALT)
    resource = fmix64(resource_hash ^ _RESOURCE_SALT)
    mixed = fmix64(name_hash ^ point ^ resource)
    return pa.array(mixed.view(np.int64))
