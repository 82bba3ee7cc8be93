"""Which files of a table may hold a value of its lookup column, from metadata alone.

A trace is asked for by its id, and its spans may sit in any file of the table: trace
ids are random, so the files' min/max statistics of ``trace_id`` span the whole range
and rule nothing out. Each data file of a table whose spec names a ``lookup_column``
(the spans' ``trace_id``) therefore gets a Bloom filter of that column's values,
written beside it as ``_lookup/<file>.bloom`` when the file is written (like its
coverage and series summary), and kept in memory per table once read. Finding a
trace's files is then a few bit tests per file, whatever the table's size; a file the
filter admits by mistake (about 1 in 100 at ten bits per value) is read and yields
nothing, and a file without a filter (written by a Spark job, imported, or whose
filter is damaged) gets one built from its data when the index first meets it.

The filter: ``m`` bits (a power of two, about :data:`BITS_PER_VALUE` per distinct
value), :data:`HASHES` positions per value by double hashing of two 64-bit words of the
value (a 32-digit hex id is its own 128 bits; any other text is hashed with BLAKE2b),
mixed by splitmix64's finaliser so that each depends on all 128 bits. The file holds a
magic, ``k``, ``m``, the bits and their CRC32: a torn or damaged file is detected and
rebuilt, never read as a filter that could miss a value.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.schema import TableSpec
from shoal.storage import layout
from shoal.storage.lru import Lru
from shoal.storage.place import Place
from shoal.storage.types import ScanFile

logger = logging.getLogger(__name__)

BITS_PER_VALUE = 10
HASHES = 7
MAGIC = b"shoalbf1"
_HEADER = struct.Struct("<8sIQ")
_U64 = np.ndarray[Any, np.dtype[np.uint64]]


def _mix(x: _U64) -> _U64:
    """splitmix64's finaliser (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_NIBBLE = np.full(256, 255, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def _hex_rows(data: np.ndarray[Any, np.dtype[np.uint8]]) -> tuple[_U64, _U64, Any]:
    """Rows of 32 characters as two 64-bit words each (when hex), and which rows are hex."""
    nibbles = _NIBBLE[data]
    hexes = ~(nibbles == 255).any(axis=1)
    wide = nibbles.astype(np.uint64)
    shifts = np.arange(60, -4, -4, dtype=np.uint64)
    hi = np.bitwise_or.reduce(wide[:, :16] << shifts, axis=1)
    lo = np.bitwise_or.reduce(wide[:, 16:] << shifts, axis=1)
    return hi, lo, hexes


def _text_words(text: str) -> tuple[int, int]:
    """A value's two words: a 32-digit hex id is its own 128 bits, other text is hashed."""
    if len(text) == 32 and set(text) <= _HEX_DIGITS:
        return int(text[:16], 16), int(text[16:], 16)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    hi, lo = struct.unpack(">QQ", digest)
    return int(hi), int(lo)


def words(values: Sequence[str] | pa.Array) -> tuple[_U64, _U64]:
    """Two mixed 64-bit words per value (distinct or not); a value gets the same words
    whatever other values it comes with."""
    array = values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())
    array = array.cast(pa.string())
    n = len(array)
    hi = np.zeros(n, dtype=np.uint64)
    lo = np.zeros(n, dtype=np.uint64)
    slow = np.ones(n, dtype=np.bool_)
    if n and array.null_count == 0:
        lengths = pc.binary_length(array).to_numpy(zero_copy_only=False)
        if (lengths == 32).all():  # ids: the common case, without a loop
            offsets = np.frombuffer(array.buffers()[1], np.int32)[
                array.offset : array.offset + n + 1
            ]
            raw = np.frombuffer(array.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
            hi, lo, hexes = _hex_rows(raw.reshape(n, 32))
            slow = ~hexes
    if slow.any():
        texts = array.to_pylist()
        for i in np.flatnonzero(slow):
            hi[i], lo[i] = _text_words(texts[i] or "")
    # each of the two hash words depends on all 128 bits (ids made by a counter differ
    # in their low bits alone)
    a = _mix(hi ^ np.uint64(0x9E3779B97F4A7C15))
    b = _mix(lo ^ a)
    return b, _mix(a ^ b ^ np.uint64(0xD1B54A32D192ED03))


def _positions(h1: _U64, h2: _U64, m: int, k: int) -> _U64:
    """``k`` bit positions per value, shape (n, k)."""
    steps = np.arange(k, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (h1[:, None] + steps[None, :] * (h2[:, None] | np.uint64(1))) & np.uint64(m - 1)


class Bloom:
    """A Bloom filter of ``m`` bits (a power of two) and ``k`` hash positions per value."""

    def __init__(self, m: int, k: int, bits: bytes) -> None:
        self.m = m
        self.k = k
        self.bits = np.frombuffer(bits, dtype=np.uint8)

    @classmethod
    def of(cls, values: pa.Array | pa.ChunkedArray) -> Bloom:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        distinct = pc.unique(values.drop_null()) if len(values) else values
        m = 64
        while m < BITS_PER_VALUE * max(len(distinct), 1):
            m *= 2
        h1, h2 = words(distinct)
        flags = np.zeros(m, dtype=np.bool_)
        flags[_positions(h1, h2, m, HASHES).ravel().astype(np.int64)] = True
        return cls(m, HASHES, np.packbits(flags, bitorder="little").tobytes())

    def may_hold(self, h1: int, h2: int) -> bool:
        """Whether a value with words ``(h1, h2)`` may have been added."""
        mask = self.m - 1
        step = h2 | 1
        for i in range(self.k):
            pos = (h1 + i * step) & mask
            if not self.bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True

    def to_bytes(self) -> bytes:
        body = self.bits.tobytes()
        return _HEADER.pack(MAGIC, self.k, self.m) + body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> Bloom:
        if len(data) < _HEADER.size + 4:
            raise ValueError("too short")
        magic, k, m = _HEADER.unpack_from(data)
        body = data[_HEADER.size : -4]
        if magic != MAGIC or m < 8 or m & (m - 1) or len(body) != m // 8 or not 0 < k <= 32:
            raise ValueError("not a Bloom filter of this format")
        (crc,) = struct.unpack("<I", data[-4:])
        if zlib.crc32(body) != crc:
            raise ValueError("checksum mismatch")
        return cls(m, k, body)


_M64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    """:func:`_mix` of one value, in Python integers (the same bits)."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def value_words(value: str) -> tuple[int, int]:
    """:func:`words` of one value (what a lookup hashes), without arrays."""
    hi, lo = _text_words(value)
    a = _mix_int(hi ^ 0x9E3779B97F4A7C15)
    b = _mix_int(lo ^ a)
    return b, _mix_int(a ^ b ^ 0xD1B54A32D192ED03)


def write_filter(place: Place, spec: TableSpec, rel: str, rows: pa.Table) -> None:
    """Write the filter of a data file's rows beside it (before the file is committed):
    whole or not at all, unsynced (derived data, rebuilt when missing or torn)."""
    assert spec.lookup_column is not None
    bloom = Bloom.of(rows.column(spec.lookup_column))
    place.replace(layout.lookup_path(rel), bloom.to_bytes())


class LookupIndex:
    """The filters of one table's files, read once and kept. Thread-safe."""

    def __init__(self, place: Place, spec: TableSpec, label: str) -> None:
        if spec.lookup_column is None:
            raise ValueError(f"{label}: the table has no lookup column")
        self.place = place
        self.column = spec.lookup_column
        self.label = label
        self._lock = threading.Lock()
        self._filters: dict[str, Bloom] = {}

    def _filter_of(self, file: ScanFile) -> Bloom:
        rel = self.place.rel(file.path)
        path = layout.lookup_path(rel)
        try:
            return Bloom.from_bytes(self.place.read(path))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            logger.warning(
                "%s: lookup filter of %s unusable (%s); rebuilding", self.label, rel, exc
            )
        data = self.place.parquet(rel).read(columns=[self.column])
        bloom = Bloom.of(data.column(self.column))
        try:
            self.place.replace(path, bloom.to_bytes())
        except OSError as exc:  # derived data: the answer stands without it
            logger.warning("%s: could not write the lookup filter of %s: %s", self.label, rel, exc)
        return bloom

    def files_holding(self, files: Sequence[ScanFile], value: str) -> list[ScanFile]:
        """Those of ``files`` that may hold rows whose lookup column is ``value``."""
        h1, h2 = value_words(value)
        with self._lock:
            known = dict(self._filters)
        out = []
        for file in files:
            bloom = known.get(file.path)
            if bloom is None:
                bloom = known[file.path] = self._filter_of(file)
            if bloom.may_hold(h1, h2):
                out.append(file)
        current = {f.path for f in files}
        with self._lock:
            # keep the filters of the files asked about; forget those no longer listed
            self._filters = {p: b for p, b in known.items() if p in current}
        return out


_FOOTERS: Lru[str, tuple[pq.FileMetaData, list[tuple[str | None, str | None]]]] = Lru(512)
"""Per data file (immutable once written): its Parquet footer and each row group's
min and max of the lookup column, so that a lookup parses no footer twice."""


_FOOTERS_LOCK = threading.Lock()


def _footer(path: str, column: str) -> tuple[pq.FileMetaData, list[tuple[str | None, str | None]]]:
    with _FOOTERS_LOCK:
        hit = _FOOTERS.get(path)
    if hit is None:
        meta = pq.read_metadata(path)
        index = meta.schema.to_arrow_schema().get_field_index(column)
        bounds: list[tuple[str | None, str | None]] = []
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(index).statistics
            if stats is None or not stats.has_min_max:
                bounds.append((None, None))
            else:
                bounds.append((stats.min, stats.max))
        hit = (meta, bounds)
        with _FOOTERS_LOCK:
            _FOOTERS.put(path, hit)
    return hit


def read_matching(path: str, column: str, value: str) -> tuple[pa.Table, int]:
    """The rows of the Parquet file ``path`` whose ``column`` is ``value``, reading only the
    row groups whose statistics admit it, and the bytes of those row groups."""
    meta, bounds = _footer(path, column)
    groups = [
        i for i, (lo, hi) in enumerate(bounds) if lo is None or hi is None or lo <= value <= hi
    ]
    if not groups:
        return meta.schema.to_arrow_schema().empty_table(), 0
    rows = pq.ParquetFile(path, metadata=meta).read_row_groups(groups)
    size = sum(meta.row_group(i).total_byte_size for i in groups)
    return rows.filter(pc.equal(rows.column(column), value)), size
