"""1.0 requests of series seen before, read from their samples and their labels' bytes.

The labels' encoded bytes key the series cache (:class:`~shoal.rows.known.KnownSeries`);
the C scanner (``_scan.c``) reads them without the interpreter lock when it was built,
ptars otherwise. A request this does not cover goes to the full decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.errors import DecodeError
from shoal.promwrite import proto
from shoal.promwrite.labels import Meta, Samples, has_entries, raw_keys, v1_labels
from shoal.promwrite.proto import DECODER, V1
from shoal.promwrite.rows import Written, sample_rows, series_columns
from shoal.rows.known import KnownSeries


def decode_cached_v1(body: bytes, known: KnownSeries) -> Written | None:
    """A 1.0 request decoded from its samples and the encoded bytes of its labels, which
    key the series cache; a series not yet cached is worked out from the request decoded
    in full. None for a request this does not cover (no series, metadata, exemplars,
    histograms, or bytes that are not a request): the full decoder takes it.

    The C scanner (:data:`SCAN_V1`) does the reading without the interpreter lock when it
    was built; else ptars does, with the lock."""
    if SCAN_V1 is not None:
        scanned = SCAN_V1(body)
        if scanned is None:
            return None
        keys, samples = scanned_keys(scanned)
    else:
        try:
            batch = DECODER.batch(proto.V1_RAW, body, "")
        except DecodeError:
            return None
        series = batch.column("timeseries").flatten()
        if (
            not len(series)
            or has_entries(batch.column("metadata"))
            or has_entries(series.field("exemplars"))
            or has_entries(series.field("histograms"))
        ):
            return None
        keys, samples = raw_keys(series.field("labels"), len(series)), Samples.of(series)
    n = len(keys)

    def build(positions: np.ndarray[Any, Any]) -> pa.Table:
        full = DECODER.batch(V1, body, f"body is not a valid {V1}")
        subset = v1_labels(full.column("timeseries").flatten()).subset(positions, n)
        return series_columns(subset, len(positions), lambda names: [Meta()] * len(names))

    table, rows, named = known.rows(keys, build)
    return sample_rows(samples, table, rows, named, None, None, None)


Scanned = tuple[int, bytes, bytes, bytes, bytes, bytes]
"""What ``_scan.scan_v1`` returns: series count, key offsets, keys, sample offsets,
values, timestamps (see ``shoal/promwrite/_scan.c``)."""


def _load_scanner() -> Callable[[bytes], Scanned | None] | None:
    try:
        from shoal.promwrite._scan import scan_v1
    except ImportError:  # built without a C compiler: ptars does the same work
        return None
    return scan_v1


SCAN_V1 = _load_scanner()


def scanned_keys(scanned: Scanned) -> tuple[pa.Array, Samples]:
    """The cache keys and samples of a scanned request, as views of the scanner's bytes."""
    n, key_offsets, keys, sample_offsets, values, times = scanned
    key_array = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(key_offsets), pa.py_buffer(keys)]
    )
    counts = np.diff(np.frombuffer(sample_offsets, np.int32)).astype(np.int64)
    return key_array, Samples(
        counts, np.frombuffer(values, np.float64), np.frombuffer(times, np.int64)
    )
