"""Reading acknowledged records back, in LSN order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from shoal.errors import WalCorruptionError
from shoal.wal.codec import SEGMENT_HEADER_SIZE, FrameScanner
from shoal.wal.segment import SegmentMeta


class WalRecord(NamedTuple):
    """One record as replay returns it."""

    lsn: int
    rtype: int
    payload: bytes


def read_records(
    metas: Sequence[SegmentMeta],
    after_lsn: int,
    limit_lsn: int | None,
    max_record_bytes: int,
) -> Iterator[WalRecord]:
    """Yield records with ``after_lsn < lsn <= limit_lsn`` from the given segments.

    Each segment is read in one piece up to its acknowledged end (a segment is
    at most ``segment_bytes`` plus one record), and payloads are sliced from
    that buffer. Recovery has already validated these bytes, so a bad frame
    here means the file changed under us: :class:`WalCorruptionError`. A
    segment removed meanwhile by ``truncate_before`` only held records the
    caller declared unneeded and is skipped.
    """
    for index, meta in enumerate(metas):
        if limit_lsn is not None and meta.first_lsn > limit_lsn:
            return
        if index + 1 < len(metas) and metas[index + 1].first_lsn - 1 <= after_lsn:
            continue  # every record of this segment is at or below after_lsn
        end = meta.end
        if end <= SEGMENT_HEADER_SIZE:
            continue
        try:
            with meta.path.open("rb") as fh:
                data = fh.read(end)
        except FileNotFoundError:
            continue
        if len(data) < end:
            raise WalCorruptionError(
                meta.path.name, len(data), f"segment shorter than its {end} acknowledged bytes"
            )
        scanner = FrameScanner(data, SEGMENT_HEADER_SIZE, meta.first_lsn, max_record_bytes)
        for lsn, rtype, start, stop in scanner:
            if lsn <= after_lsn:
                continue
            if limit_lsn is not None and lsn > limit_lsn:
                return
            yield WalRecord(lsn, rtype, data[start:stop])
        if scanner.problem is not None:
            raise WalCorruptionError(meta.path.name, scanner.offset, scanner.problem)
