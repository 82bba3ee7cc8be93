"""Directories of symbolic links that let one DataFusion scan read an exact set of files.

DataFusion's Python API reads a single path per scan (a file or a
directory), and a table's directory holds more than its committed files
(files compaction removed but vacuum has not deleted yet, files the flusher
wrote but has not committed). One scan per file in a UNION ALL costs a
partition (and a task) per file and, since each file declares its sort
order, a sort-preserving merge above them. So a set of committed files is
given to DataFusion as a private directory holding one symbolic link per
file, read by a single listing scan that spreads the files over the session's
partitions.

A directory is named after the set it holds, so the same set gets the same
directory, and DataFusion's per-runtime Parquet metadata cache (keyed by
path) stays warm across table versions for every set that did not change:
:func:`chunks` groups a version's files by day, with the newest hour apart,
so a flush only changes the newest chunk.

Directories live under a private temporary root, outside the data dir, named
after the process; a process killed before its exit handler ran leaves its
root behind, and the next :class:`LinkDirs` deletes it.
Released directories linger for ``linger_s`` (longer than any query may run)
before they are deleted, because a query planned on them opens the files
through the links while it executes. The root is deleted on :meth:`close`
or when the process exits (not when the object is collected: views built on
its directories may outlive it).
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from shoal.storage.types import ScanFile

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US

_ROOTS: set[str] = set()
_ROOTS_LOCK = threading.Lock()


@atexit.register
def _remove_roots() -> None:
    with _ROOTS_LOCK:
        roots = list(_ROOTS)
        _ROOTS.clear()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


_PREFIX = "shoal-query-"


def remove_orphans(parent: str | None = None) -> list[str]:
    """Delete link roots left by processes that no longer run (killed before their
    exit handler); the roots carry their process id. Returns what was deleted."""
    base = Path(parent or tempfile.gettempdir())
    removed: list[str] = []
    for root in base.glob(f"{_PREFIX}*-*"):
        pid_text = root.name[len(_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or not root.is_dir():
            continue
        pid = int(pid_text)
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(root, ignore_errors=True)
        removed.append(str(root))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def chunks(files: Sequence[ScanFile]) -> list[list[ScanFile]]:
    """``files`` grouped by UTC day of their first row, the newest hour's files apart.

    Sorted by time within each group; groups in time order.
    """
    if not files:
        return []
    newest_hour = max(f.min_time_us for f in files) // HOUR_US
    groups: dict[tuple[int, int], list[ScanFile]] = collections.defaultdict(list)
    for f in files:
        hour = f.min_time_us // HOUR_US
        key = (hour, 1) if hour == newest_hour else (f.min_time_us // DAY_US * 24, 0)
        groups[key].append(f)
    return [sorted(groups[k], key=lambda f: (f.min_time_us, f.path)) for k in sorted(groups)]


class LinkDirs:
    """Reference-counted link directories, one per distinct file set. Thread-safe."""

    def __init__(self, linger_s: float = 600.0, parent: str | None = None) -> None:
        remove_orphans(parent)
        self.root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=parent))
        with _ROOTS_LOCK:
            _ROOTS.add(str(self.root))
        self._linger = linger_s
        self._lock = threading.Lock()
        self._refs: dict[str, int] = {}
        self._retired: dict[str, float] = {}
        self.created = 0

    @staticmethod
    def _key(paths: Sequence[str]) -> str:
        return hashlib.sha256("\0".join(paths).encode()).hexdigest()[:32]

    def acquire(self, files: Sequence[ScanFile]) -> str:
        """The directory (with a trailing slash) linking exactly ``files``; counts a reference.

        Raises FileNotFoundError when a file does not exist.
        """
        paths = [os.path.abspath(f.path) for f in files]
        key = self._key(paths)
        target = self.root / key
        with self._lock:
            if key in self._refs or key in self._retired:
                self._retired.pop(key, None)
                self._refs[key] = self._refs.get(key, 0) + 1
                return f"{target}/"
        # DataFusion's listing skips a dangling link without a word: check every target first.
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"committed file missing: {missing[0]}")
        staging = self.root / f".{key}.{uuid.uuid4().hex}"
        staging.mkdir()
        for i, path in enumerate(paths):
            os.symlink(path, staging / f"{i:06d}.parquet")
        with self._lock:
            if key in self._refs or key in self._retired:  # built concurrently
                shutil.rmtree(staging, ignore_errors=True)
                self._retired.pop(key, None)
            else:
                staging.rename(target)
                self.created += 1
            self._refs[key] = self._refs.get(key, 0) + 1
        return f"{target}/"

    def release(self, directory: str) -> None:
        """Drop a reference; an unreferenced directory is deleted ``linger_s`` later."""
        key = Path(directory).name
        with self._lock:
            left = self._refs.get(key, 0) - 1
            if left > 0:
                self._refs[key] = left
            else:
                self._refs.pop(key, None)
                self._retired[key] = time.monotonic()
        self.sweep()

    def sweep(self, now: float | None = None) -> None:
        """Delete directories released more than ``linger_s`` ago."""
        now = time.monotonic() if now is None else now
        doomed: list[Path] = []
        with self._lock:
            for key in [k for k, t in self._retired.items() if now - t >= self._linger]:
                del self._retired[key]
                # renamed under the lock, so a concurrent acquire builds a fresh directory
                grave = self.root / f".dead.{key}.{uuid.uuid4().hex}"
                os.rename(self.root / key, grave)
                doomed.append(grave)
        for grave in doomed:
            shutil.rmtree(grave, ignore_errors=True)

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._refs) + len(self._retired)

    def close(self) -> None:
        with _ROOTS_LOCK:
            _ROOTS.discard(str(self.root))
        shutil.rmtree(self.root, ignore_errors=True)
