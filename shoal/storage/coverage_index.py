"""Which time buckets a table version covers, answered from coverage files alone.

Each committed data file has a coverage file (:mod:`shoal.storage.coverage`);
this reads them with a bounded cache, unions them per version (the overlap
requirement of an import needs that union on every attempt), and answers
coverage questions over a time range. A damaged or missing coverage file is
recomputed from its data file.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from pyroaring import BitMap

from shoal.errors import StorageError
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.files import TableFiles
from shoal.storage.lru import Lru
from shoal.storage.types import CoverageResult, ScanFile, TableSnapshot

logger = logging.getLogger(__name__)

_CACHE_FILES = 8192


class CoverageIndex:
    """Coverage of one table's committed files. Thread-safe."""

    def __init__(self, files: TableFiles) -> None:
        self._files = files
        self.bucket_s = files.bucket_s
        self._lock = threading.Lock()
        self._by_file: Lru[str, cov.Coverage] = Lru(_CACHE_FILES)
        self._union: tuple[int, cov.Coverage] | None = None

    def of_file(self, file: ScanFile) -> cov.Coverage:
        """A committed file's coverage (cached; recomputed from the file if unusable)."""
        with self._lock:
            hit = self._by_file.get(file.path)
        if hit is not None:
            return hit
        place = self._files.place
        rel = place.rel(file.path)
        try:
            result = cov.decode(place.read(layout.coverage_path(rel)))
        except (FileNotFoundError, cov.CoverageFormatError) as exc:
            logger.warning(
                "%s: coverage of %s unusable (%s); recomputing", self._files.label, rel, exc
            )
            result = self._files.coverage_of_file(rel)
        if result.bucket_s != self.bucket_s:
            raise StorageError(
                f"{self._files.label}: {rel} has {result.bucket_s}s coverage, "
                f"table uses {self.bucket_s}s"
            )
        with self._lock:
            self._by_file.put(file.path, result)
        return result

    def covered(self, snapshot: TableSnapshot) -> cov.Coverage:
        """The union of the coverage of every file of ``snapshot`` (cached per version)."""
        with self._lock:
            cached = self._union
            if cached is not None and cached[0] == snapshot.version:
                return cached[1]
        result = cov.union((self.of_file(f) for f in snapshot.files), self.bucket_s)
        with self._lock:
            self._union = (snapshot.version, result)
        return result

    def query(
        self,
        snapshot: TableSnapshot,
        start: dt.datetime,
        end: dt.datetime,
        series: str | None = None,
        bucket_s: int | None = None,
    ) -> CoverageResult:
        """Covered buckets and gaps in ``[start, end)`` of ``snapshot``."""
        width = bucket_s or self.bucket_s
        if width % self.bucket_s:
            raise StorageError(
                f"{self._files.label}: bucket of {width}s is not a multiple of the table's "
                f"{self.bucket_s}s coverage bucket"
            )
        if end <= start:
            raise ValueError("end must be after start")
        s_us, e_us = cov.to_us(start), cov.to_us(end)
        lo, hi = cov.bucket_range(start, end, width)
        unit = width * 1_000_000
        merged = BitMap()
        for f in snapshot.files_between(lo * unit, hi * unit):
            fc = self.of_file(f)
            if series is None:
                merged |= fc.buckets
            else:
                bm = fc.series.get(series)
                if bm is not None:
                    merged |= bm
        window = BitMap()
        window.add_range(lo, hi)
        hits = cov.coarsen(merged, width // self.bucket_s) & window
        gaps = window - hits

        def spans(bm: BitMap) -> tuple[tuple[dt.datetime, dt.datetime], ...]:
            return tuple(
                (cov.from_us(max(a * unit, s_us)), cov.from_us(min(b * unit, e_us)))
                for a, b in cov.runs(bm)
            )

        return CoverageResult(
            start=start,
            end=end,
            bucket_s=width,
            series=series,
            covered_buckets=len(hits),
            total_buckets=hi - lo,
            covered=spans(hits),
            gaps=spans(gaps),
        )
