"""Lists of serialized OTLP ``KeyValue`` slices to attribute map columns.

Each distinct ``KeyValue`` slice of a request is decoded once with upb and
rendered by :mod:`shoal.otlp.anyvalue`; the rows are then assembled with Arrow
``take`` and list offsets. Decoded entries are also kept in a process-wide cache
bounded in bytes (:mod:`shoal.rows.cache`), keyed by the slice bytes, since attribute
sets repeat from request to request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from shoal.errors import DecodeError
from shoal.otlp import anyvalue
from shoal.rows.cache import DecodeCache
from shoal.rows.columns import I64, U64, empty_maps, hash_text, list_offsets, sum_per_list
from shoal.schema import ATTRS

_Entry = tuple[str, str, str | None, int]
_cache: DecodeCache[bytes, _Entry] = DecodeCache(max_bytes=32 << 20, max_entries=200_000)
_U64_MASK = 2**64 - 1
_ENTRY_OVERHEAD = 200
"""Bytes of a cached entry besides its key and text (tuple, str headers, dict slot)."""
_lists: DecodeCache[tuple[bytes, bytes, bytes], Attributes] = DecodeCache(
    max_bytes=32 << 20, max_entries=1024
)


@dataclasses.dataclass(frozen=True)
class Attributes:
    """Attribute maps for ``n`` rows.

    ``values`` and ``types`` have type ``map<string, string>`` (never null);
    ``set_hash`` is, per row, the order-independent hash of its entries.
    """

    values: pa.MapArray
    types: pa.MapArray
    set_hash: U64

    def take(self, indices: I64) -> Attributes:
        idx = pa.array(indices, type=pa.int64())
        return Attributes(self.values.take(idx), self.types.take(idx), self.set_hash[indices])


def _decode_entry(raw: bytes, where: str) -> _Entry:
    try:
        kv = KeyValue.FromString(raw)
    except (ProtoDecodeError, RuntimeError) as exc:
        raise DecodeError(f"{where}: malformed attribute: {exc}") from None
    text, type_tag = anyvalue.encode(kv.value)
    return kv.key, text, type_tag, hash_text(kv.key, type_tag or "", text)


def _entry(raw: bytes, where: str) -> _Entry:
    hit = _cache.get(raw)
    if hit is None:
        hit = _decode_entry(raw, where)
        _cache.put(raw, hit, _ENTRY_OVERHEAD + 2 * len(raw))
    return hit


@dataclasses.dataclass(frozen=True)
class AttributeSet:
    """One decoded attribute list: map entries, type entries, order-independent hash."""

    entries: list[tuple[str, str]]
    types: list[tuple[str, str]]
    set_hash: int

    def first(self, key: str) -> str | None:
        """The text of the first entry with ``key`` (as SQL's map lookup returns it)."""
        for k, text in self.entries:
            if k == key:
                return text
        return None


def decode_set(kvs: Iterable[KeyValue]) -> AttributeSet:
    """An attribute list of an already decoded message (resource, scope)."""
    entries: list[tuple[str, str]] = []
    types: list[tuple[str, str]] = []
    total = 0
    for kv in kvs:
        text, type_tag = anyvalue.encode(kv.value)
        entries.append((kv.key, text))
        if type_tag is not None:
            types.append((kv.key, type_tag))
        total += hash_text(kv.key, type_tag or "", text)
    return AttributeSet(entries, types, total & _U64_MASK)


def empty(n: int) -> Attributes:
    maps = empty_maps(n)
    return Attributes(maps, maps, np.zeros(n, dtype=np.uint64))


def _maps(offsets: I64, keys: pa.Array, items: pa.Array) -> pa.MapArray:
    return pa.MapArray.from_arrays(pa.array(offsets.astype(np.int32)), keys, items, type=ATTRS)


def decode_lists(lists: pa.Array, where: str = "attributes") -> Attributes:
    """Decode a ``list<binary>`` array of serialized ``KeyValue`` lists.

    A sender that exports the same attribute sets in the same order again (an SDK's
    periodic export of the same instruments does) sends the same lists byte for byte:
    their maps are kept, keyed by those bytes, and given again (arrays are immutable,
    the hashes read-only)."""
    n = len(lists)
    offsets = list_offsets(lists)
    flat = lists.flatten()
    if len(flat) == 0:
        return empty(n)
    if flat.type != pa.binary():  # not as the reshaped descriptors decode: not kept
        return _decode_lists(lists, flat, offsets, where)
    bounds = np.frombuffer(flat.buffers()[1], np.int32)[flat.offset : flat.offset + len(flat) + 1]
    start = int(bounds[0])
    data = flat.buffers()[2]
    key = (
        data[start : int(bounds[-1])].to_pybytes() if data is not None else b"",
        (bounds - start).tobytes(),
        offsets.tobytes(),
    )
    hit = _lists.get(key)
    if hit is None:
        hit = _decode_lists(lists, flat, offsets, where)
        hit.set_hash.flags.writeable = False
        size = sum(map(len, key)) + hit.values.nbytes + hit.types.nbytes + hit.set_hash.nbytes
        _lists.put(key, hit, _ENTRY_OVERHEAD + size)
    return hit


def _decode_lists(lists: pa.Array, flat: pa.Array, offsets: I64, where: str) -> Attributes:
    n = len(lists)
    encoded = pc.dictionary_encode(flat)
    uniques = encoded.dictionary.to_pylist()
    indices = encoded.indices
    entries = [_entry(raw, where) for raw in uniques]
    keys_u = pa.array([e[0] for e in entries], pa.string())
    texts_u = pa.array([e[1] for e in entries], pa.string())
    hashes_u = np.array([e[3] for e in entries], dtype=np.uint64)
    keys = keys_u.take(indices)
    values = _maps(offsets, keys, texts_u.take(indices))
    idx = indices.to_numpy(zero_copy_only=False)
    set_hash = sum_per_list(hashes_u[idx], offsets)
    typed_u = np.array([e[2] is not None for e in entries], dtype=np.bool_)
    if not typed_u.any():
        types = empty(n).types
    else:
        typed = typed_u[idx]
        type_offsets = np.zeros(len(typed) + 1, dtype=np.int64)
        np.cumsum(typed, out=type_offsets[1:])
        types_u = pa.array([e[2] for e in entries], pa.string())
        keep = pa.array(np.nonzero(typed)[0])
        types = _maps(type_offsets[offsets], keys.take(keep), types_u.take(indices.take(keep)))
    return Attributes(values, types, set_hash)
