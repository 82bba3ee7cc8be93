"""Coverage: roaring bitmaps of the time buckets that hold data.

A bucket is ``floor(time_us / (bucket_s * 1e6))``: bucket 0 starts at the
epoch. Each data file of a table has one coverage file, written and fsynced
before the commit that adds the data file, holding a bitmap for the whole
file and one per series (the value of the table's series column as text;
null is the empty string).

File format (little endian)::

    b"SHCOV1\\n"  u32 header_len  header (JSON)  bitmaps...  u32 crc32

The header is ``{"bucket_s": int, "sizes": [int, ...], "series": [str, ...]}``;
``sizes[0]`` is the length of the serialized whole-file bitmap, ``sizes[i+1]``
that of ``series[i]``. The CRC covers every byte before it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, FrozenBitMap

from shoal.arrays import unique
from shoal.errors import StorageError
from shoal.storage import faults
from shoal.storage.place import Place

MAGIC = b"SHCOV1\n"
_U32 = struct.Struct("<I")
MAX_BUCKET = 2**32 - 1


class CoverageFormatError(StorageError):
    """A coverage file is damaged or not a coverage file."""


@dataclasses.dataclass(frozen=True, eq=False)
class Coverage:
    """The buckets one file (or a union of files) covers, overall and per series."""

    bucket_s: int
    buckets: FrozenBitMap
    series: Mapping[str, FrozenBitMap]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Coverage):
            return NotImplemented
        return (
            self.bucket_s == other.bucket_s
            and self.buckets == other.buckets
            and dict(self.series) == dict(other.series)
        )


_LOW = np.uint64(0xFFFFFFFF)


def series_keys(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A series column as text keys (null becomes the empty string)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = pc.cast(arr, pa.string())
    return pc.fill_null(pc.cast(arr, pa.string()), "")


def to_buckets(time_us: np.ndarray[Any, np.dtype[np.int64]], bucket_s: int) -> np.ndarray[Any, Any]:
    """Bucket numbers of microsecond times; raises for times before 1970 or too far ahead."""
    buckets = time_us // (bucket_s * 1_000_000)
    if buckets.size and (buckets.min() < 0 or buckets.max() > MAX_BUCKET):
        raise StorageError(
            f"time outside the range coverage can record with {bucket_s}s buckets "
            "(1970 onwards, 2^32 buckets)"
        )
    return buckets.astype(np.uint32)


def _codes(series: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray[Any, Any], pa.Array]:
    """Integer codes per row (-1 for null) and the values they index."""
    arr = series.combine_chunks() if isinstance(series, pa.ChunkedArray) else series
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    codes = pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, arr.dictionary


def compute(
    time_us: np.ndarray[Any, np.dtype[np.int64]],
    series: pa.ChunkedArray | pa.Array | None,
    bucket_s: int,
) -> Coverage:
    """Coverage of rows given their times (µs) and, optionally, their series column.

    Each series value is turned into text once, not once per row: rows become
    (series code, bucket) integers, and since rows are mostly sorted by series
    and time, only the first of each run of equal pairs goes on to ``unique``,
    several times faster than grouping text keys.
    """
    buckets = to_buckets(time_us, bucket_s)
    if series is None or not len(buckets):
        return Coverage(bucket_s, FrozenBitMap(unique(buckets)), {})
    codes, values = _codes(series)
    pairs = ((codes + 1).astype(np.uint64) << np.uint64(32)) | buckets.astype(np.uint64)
    first = np.ones(len(pairs), dtype=bool)
    first[1:] = pairs[1:] != pairs[:-1]
    distinct = unique(pairs[first])
    code_of = (distinct >> np.uint64(32)).astype(np.int64) - 1
    bucket_of = (distinct & _LOW).astype(np.uint32)
    whole = FrozenBitMap(unique(bucket_of))  # every bucket is some series' bucket
    cuts = np.flatnonzero(np.diff(code_of)) + 1
    starts = np.concatenate([[0], cuts]).astype(np.int64)
    group_codes = code_of[starts]
    # text of each group's series value, as storage names series (null is ""), the groups
    # in the order of their texts, which :func:`encode` writes them in: its sort is then
    # one pass, not a sort of a flush's every series in one call that holds the
    # interpreter lock (a quarter of a million series: about 0.1 s)
    text_array = series_keys(values.take(pa.array(group_codes, mask=group_codes < 0)))
    by_text = pc.sort_indices(text_array)
    texts: list[str] = text_array.take(by_text).to_pylist()
    order = by_text.to_numpy()
    ends = np.append(starts[1:], len(distinct))
    shared = _shared_bitmaps(bucket_of, starts, ends - starts)
    starts, ends = starts[order], ends[order]
    per_series: dict[str, FrozenBitMap] = {}
    if shared is not None:
        per_series = dict(zip(texts, [shared[i] for i in order.tolist()], strict=True))
        if len(per_series) == len(texts):
            return Coverage(bucket_s, whole, per_series)
        per_series = {}  # two series with the same text (null and ""): merged below
    for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        bitmap = FrozenBitMap(bucket_of[lo:hi])
        known = per_series.get(texts[i])
        per_series[texts[i]] = bitmap if known is None else known | bitmap
    return Coverage(bucket_s, whole, per_series)


SHARED_CELLS = 1 << 20
"""Most cells (series x the most buckets of one series, 8 bytes each) that
:func:`_shared_bitmaps` lays out at once; wider coverage (a backfill of many hours)
gets a bitmap per series."""


def _shared_bitmaps(
    bucket_of: np.ndarray[Any, Any],
    starts: np.ndarray[Any, np.dtype[np.int64]],
    lengths: np.ndarray[Any, np.dtype[np.int64]],
) -> list[FrozenBitMap] | None:
    """Per series (its buckets ``bucket_of[start:start + length]``), its bitmap, one per
    distinct set of buckets and shared by the series that have that set (frozen, so
    sharing is safe); None when the sets are too wide to lay out side by side.

    The series of a flush mostly cover the same one or two buckets: building a bitmap
    per series instead cost a flush 16,000 bitmaps, under the interpreter lock."""
    width = int(lengths.max())
    if len(starts) * width > SHARED_CELLS:
        return None
    grid = np.full((len(starts), width), -1, dtype=np.int64)  # -1: past the series' end
    rows = np.repeat(np.arange(len(starts)), lengths)
    grid[rows, np.arange(len(bucket_of)) - starts[rows]] = bucket_of
    # each row as one opaque value: several times faster to unique than by axis=0
    keys = grid.view(np.dtype((np.void, grid.itemsize * width))).reshape(-1)
    distinct, which = np.unique(keys, return_inverse=True)
    rows_of = distinct.view(np.int64).reshape(-1, width)
    bitmaps = [FrozenBitMap(row[row >= 0].astype(np.uint32)) for row in rows_of]
    return [bitmaps[i] for i in which.reshape(-1).tolist()]


def union(items: Iterable[Coverage], bucket_s: int) -> Coverage:
    """The union of several coverages with the same bucket width."""
    whole = BitMap()
    per_series: dict[str, BitMap] = {}
    for cov in items:
        if cov.bucket_s != bucket_s:
            raise StorageError(f"coverage bucket {cov.bucket_s}s differs from {bucket_s}s")
        whole |= cov.buckets
        for key, bm in cov.series.items():
            target = per_series.get(key)
            if target is None:
                per_series[key] = BitMap(bm)
            else:
                target |= bm
    return Coverage(
        bucket_s,
        FrozenBitMap(whole),
        {k: FrozenBitMap(v) for k, v in per_series.items()},
    )


# -- codec ---------------------------------------------------------------------


def encode(cov: Coverage) -> bytes:
    keys = sorted(cov.series)
    serialized: dict[int, bytes] = {}  # shared bitmaps (see compute) serialized once
    blobs = [cov.buckets.serialize()]
    for k in keys:
        bitmap = cov.series[k]
        blob = serialized.get(id(bitmap))
        if blob is None:
            blob = serialized[id(bitmap)] = bitmap.serialize()
        blobs.append(blob)
    sizes, series = _json_list([len(b) for b in blobs]), _json_list(keys)
    header = b'{"bucket_s":%d,"sizes":%b,"series":%b}' % (int(cov.bucket_s), sizes, series)
    body = b"".join([MAGIC, _U32.pack(len(header)), header, *blobs])
    return body + _U32.pack(zlib.crc32(body))


_JSON_SLICE = 8192
"""Items :func:`_json_list` encodes at once."""


def _json_list(items: list[Any]) -> bytes:
    """``items`` as a JSON array, encoded by msgspec (a third of ``json.dumps``' time)
    a slice at a time: one call over a flush's quarter of a million series held the
    interpreter lock for about 0.15 s, and ingest waited for it."""
    parts = (
        msgspec.json.encode(items[i : i + _JSON_SLICE])[1:-1]
        for i in range(0, len(items), _JSON_SLICE)
    )
    return b"[" + b",".join(parts) + b"]"


def decode(data: bytes) -> Coverage:
    if len(data) < len(MAGIC) + 8 or not data.startswith(MAGIC):
        raise CoverageFormatError("not a coverage file")
    body, trailer = data[:-4], data[-4:]
    if _U32.unpack(trailer)[0] != zlib.crc32(body):
        raise CoverageFormatError("coverage file checksum mismatch")
    pos = len(MAGIC)
    (hlen,) = _U32.unpack_from(body, pos)
    pos += 4
    try:
        header = json.loads(body[pos : pos + hlen])
        bucket_s = int(header["bucket_s"])
        sizes = [int(s) for s in header["sizes"]]
        keys = [str(k) for k in header["series"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CoverageFormatError(f"bad coverage header: {exc}") from None
    pos += hlen
    if len(sizes) != len(keys) + 1 or pos + sum(sizes) != len(body):
        raise CoverageFormatError("coverage sizes do not match the file")
    maps: list[FrozenBitMap] = []
    for size in sizes:
        maps.append(FrozenBitMap.deserialize(body[pos : pos + size]))
        pos += size
    return Coverage(bucket_s, maps[0], dict(zip(keys, maps[1:], strict=True)))


def write(place: Place, rel: str, cov: Coverage) -> None:
    """Write a coverage file and fsync it (the caller fsyncs the directory)."""
    place.write(rel, encode(cov), halfway=lambda: faults.point("coverage-partial"))


def read(path: Path) -> Coverage:
    return decode(path.read_bytes())


# -- answering questions -------------------------------------------------------


def bucket_range(start: dt.datetime, end: dt.datetime, bucket_s: int) -> tuple[int, int]:
    """Buckets ``[lo, hi)`` that intersect the time range ``[start, end)``."""
    s_us = to_us(start)
    e_us = to_us(end)
    width = bucket_s * 1_000_000
    lo = max(0, s_us // width)
    hi = max(lo, -(-e_us // width))
    return lo, min(hi, MAX_BUCKET + 1)


def to_us(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)


def runs(bm: BitMap | FrozenBitMap) -> list[tuple[int, int]]:
    """Maximal runs ``[first, last + 1)`` of consecutive set buckets."""
    if not bm:
        return []
    values = np.asarray(bm.to_array(), dtype=np.int64)
    cuts = np.flatnonzero(np.diff(values) != 1) + 1
    starts = values[np.r_[0, cuts]]
    ends = values[np.r_[cuts - 1, len(values) - 1]] + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def coarsen(bm: BitMap | FrozenBitMap, factor: int) -> BitMap:
    """Re-bucket to buckets ``factor`` times wider (a wide bucket is covered if any part is)."""
    if factor == 1:
        return BitMap(bm)
    values = np.asarray(bm.to_array(), dtype=np.int64) // factor
    return BitMap(unique(values).astype(np.uint32))
