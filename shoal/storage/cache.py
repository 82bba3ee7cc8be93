"""The local read cache: copies of committed Parquet files from object storage.

Every reader (SQL, PromQL, the PostgreSQL listener) reads committed files from local
disk: :class:`FileCache` hands each file of a table in a bucket as a local copy
(``<data_dir>/cache/``), fetched once, in parallel with the other files a read needs,
and kept while it fits ``storage_cache_bytes``. A committed file never changes (its
name is new for every write), so a copy is never stale; only the Delta log is asked
what the files are. Files of a table on local disk are handed as they are.

The flusher's own files are kept as they are uploaded (:meth:`FileCache.put`): the
first read after a flush downloads nothing, and a file committed while the store then
went down can still be read.

Bounded in bytes, least recently used out first, except a file used within the last
``pin_s`` (a query may still be opening it): the cache may stand over its bound
until those are released, and a reader whose file was evicted anyway gets it fetched
again on its next read (:meth:`FileCache.local` is called for every read).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from shoal.errors import StorageError
from shoal.storage.location import StorageLocation
from shoal.storage.types import ScanFile

logger = logging.getLogger(__name__)

_SUFFIX = ".parquet"


@dataclasses.dataclass
class _Entry:
    size: int
    used: float


class FileCache:
    """Local copies of a location's files, bounded in bytes. Thread-safe."""

    def __init__(
        self,
        location: StorageLocation,
        directory: Path,
        max_bytes: int,
        *,
        pin_s: float = 120.0,
        threads: int = 8,
    ) -> None:
        self.location = location
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.pin_s = pin_s
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._fetching: dict[str, concurrent.futures.Future[None]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="shoal-fetch"
        )
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.fetched_bytes = 0
        self.evicted = 0
        self.stored = 0
        """Files kept as this process wrote them (:meth:`put`)."""
        if not location.is_local:
            self._adopt()

    def _adopt(self) -> None:
        """Take over the copies a previous run left (oldest first out)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        found: list[tuple[float, str, int]] = []
        for sub in self.directory.iterdir():
            if not sub.is_dir():
                continue
            for item in sub.iterdir():
                if item.name.endswith(".tmp"):
                    item.unlink(missing_ok=True)
                elif item.name.endswith(_SUFFIX):
                    st = item.stat()
                    found.append((st.st_mtime, item.name[: -len(_SUFFIX)], st.st_size))
        for _, key, size in sorted(found):
            self._entries[key] = _Entry(size, 0.0)
            self.bytes += size
        self._evict()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    @staticmethod
    def _key(uri: str) -> str:
        return hashlib.sha256(uri.encode()).hexdigest()[:40]

    def local(self, files: Sequence[ScanFile]) -> list[ScanFile]:
        """``files`` with each path on local disk: the copy, fetched now if missing (the
        missing ones in parallel). Raises FileNotFoundError for a file the store no longer
        has (vacuumed), StorageError when the store cannot be read."""
        if self.location.is_local or not files:
            return list(files)
        now = time.monotonic()
        waits: list[concurrent.futures.Future[None]] = []
        keys = [self._key(f.path) for f in files]
        with self._lock:
            for f, key in zip(files, keys, strict=True):
                entry = self._entries.get(key)
                if entry is not None and key not in self._fetching:
                    entry.used = now
                    self._entries.move_to_end(key)
                    self.hits += 1
                    continue
                pending = self._fetching.get(key)
                if pending is None:
                    self.misses += 1
                    pending = self._pool.submit(self._fetch, f.path, key)
                    self._fetching[key] = pending
                waits.append(pending)
        for pending in waits:
            pending.result()
        out = []
        for f, key in zip(files, keys, strict=True):
            path = self._path(key)
            if not path.exists():  # evicted meanwhile: fetched again for this read
                self._fetch(f.path, key)
            out.append(dataclasses.replace(f, path=str(path)))
        return out

    def put(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Keep a copy of a file this process has just written to the store under ``uri``.

        Never fails the write: a copy that cannot be made is only a later download."""
        if self.location.is_local:
            return
        key = self._key(uri)
        target = self._path(key)
        tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(memoryview(data))
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            logger.warning("cannot keep a copy of %s in the read cache: %s", uri, exc)
            return
        self._record(key, len(memoryview(data)), stored=True)

    def _fetch(self, uri: str, key: str) -> None:
        try:
            target = self._path(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}.tmp")
            size = 0
            try:
                fs = self.location.filesystem
                with fs.open_input_stream(self.location.strip(uri)) as src, open(tmp, "wb") as out:
                    while chunk := src.read(8 << 20):
                        out.write(chunk)
                        size += len(chunk)
                os.replace(tmp, target)
            except FileNotFoundError:
                tmp.unlink(missing_ok=True)
                raise
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                if "not found" in str(exc).lower() or "NoSuchKey" in str(exc):
                    raise FileNotFoundError(f"committed file missing: {uri}") from None
                raise StorageError(f"cannot read {uri}: {exc}") from None
            self._record(key, size, stored=False)
        finally:
            with self._lock:
                self._fetching.pop(key, None)

    def _record(self, key: str, size: int, *, stored: bool) -> None:
        """A copy of ``size`` bytes now on disk under ``key`` (kept by the flusher, or
        fetched), then the bound kept."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old.size
            self._entries[key] = _Entry(size, time.monotonic())
            self.bytes += size
            if stored:
                self.stored += 1
            else:
                self.fetched_bytes += size
        self._evict()

    def _evict(self) -> None:
        """Delete least recently used copies until the cache fits (pinned ones stay)."""
        doomed: list[str] = []
        with self._lock:
            if self.bytes <= self.max_bytes:
                return
            cutoff = time.monotonic() - self.pin_s
            for key, entry in list(self._entries.items()):
                if self.bytes <= self.max_bytes:
                    break
                if entry.used > cutoff or key in self._fetching:
                    continue
                del self._entries[key]
                self.bytes -= entry.size
                self.evicted += 1
                doomed.append(key)
        for key in doomed:
            self._path(key).unlink(missing_ok=True)

    def stats(self) -> tuple[int, int, int]:
        """``(bytes, hits, misses)``."""
        return self.bytes, self.hits, self.misses

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
