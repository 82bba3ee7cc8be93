"""Segment files: naming, creation, and the active segment the writer appends to."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shoal.wal.codec import SEGMENT_HEADER_SIZE, encode_segment_header
from shoal.wal.fileops import Buffer, FileOps

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".wal"
BROKEN_SUFFIX = ".broken"
TMP_SUFFIX = ".tmp"
_NAME_DIGITS = 20
_IOV_MAX = 512  # well under every platform's IOV_MAX


def segment_name(first_lsn: int) -> str:
    """``00000000000000000001.wal``: the first LSN, zero-padded so names sort."""
    return f"{first_lsn:0{_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first LSN a segment file name encodes, or None if it is no segment name."""
    stem, dot, suffix = name.partition(".")
    if dot + suffix != SEGMENT_SUFFIX or len(stem) != _NAME_DIGITS or not stem.isdigit():
        return None
    value = int(stem)
    return value if value >= 1 else None


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """``(first_lsn, path)`` of every segment file in ``directory``, in LSN order."""
    found: list[tuple[int, Path]] = []
    for entry in directory.iterdir():
        lsn = parse_segment_name(entry.name)
        if lsn is not None and entry.is_file():
            found.append((lsn, entry))
    found.sort()
    return found


@dataclass(slots=True)
class SegmentMeta:
    """A live segment: where it is and how many of its bytes are acknowledged.

    ``end`` covers the header and every acknowledged frame; replay reads
    exactly that far. The writer raises it for the active segment.
    """

    path: Path
    first_lsn: int
    end: int


@dataclass(eq=False)
class ActiveSegment:
    """The segment the writer thread appends to (only that thread uses it)."""

    ops: FileOps
    meta: SegmentMeta
    fd: int
    written: int
    poisoned: bool = field(init=False, default=False)
    """Set when a failed write could not be cut back: the writer must rotate."""
    unsynced: bool = field(init=False, default=False)

    def write(self, buffers: Sequence[Buffer], nbytes: int) -> None:
        """Write all of ``buffers`` at the end of the valid data.

        On failure the file is cut back to where the valid data ended, so a
        partial frame can never sit before later frames; if even that fails
        the segment is marked poisoned (the writer then rotates). The OSError
        is re-raised either way.
        """
        try:
            end = write_all(self.ops, self.fd, buffers, self.written)
        except OSError:
            try:
                self.ops.ftruncate(self.fd, self.written)
            except OSError:
                logger.exception(
                    "cannot cut %s back to %d bytes after a failed write; rotating",
                    self.meta.path.name,
                    self.written,
                )
                self.poisoned = True
            raise
        if end - self.written != nbytes:
            raise AssertionError(f"wrote {end - self.written} bytes, expected {nbytes}")
        self.written = end
        self.unsynced = True

    def sync(self) -> None:
        self.ops.fdatasync(self.fd)
        self.unsynced = False

    def close(self) -> None:
        try:
            self.ops.close(self.fd)
        except OSError:
            logger.exception("closing WAL segment %s failed", self.meta.path.name)


def write_all(ops: FileOps, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
    """Write every buffer at ``offset``, resuming after short writes; the end offset."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    index = 0
    while index < len(views):
        done = ops.pwritev(fd, views[index : index + _IOV_MAX], offset)
        if done <= 0:
            raise OSError(5, "write made no progress")
        offset += done
        while done > 0:
            view = views[index]
            if done >= len(view):
                done -= len(view)
                index += 1
            else:
                views[index] = view[done:]
                done = 0
    return offset


def create_segment(ops: FileOps, directory: Path, first_lsn: int, prev_lsn: int) -> ActiveSegment:
    """Create a segment durably: header into a temp file, fsync, rename, fsync the dir."""
    path = directory / segment_name(first_lsn)
    tmp = directory / (path.name + TMP_SUFFIX)
    header = encode_segment_header(first_lsn, prev_lsn)
    fd = ops.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(ops, fd, [header], 0)
        ops.fdatasync(fd)
        ops.rename(str(tmp), str(path))
    except BaseException:
        with contextlib.suppress(OSError):
            ops.close(fd)
        with contextlib.suppress(OSError):
            ops.unlink(str(tmp))
        raise
    try:
        ops.fsync_dir(str(directory))
    except BaseException:
        with contextlib.suppress(OSError):
            ops.close(fd)
        raise
    meta = SegmentMeta(path=path, first_lsn=first_lsn, end=SEGMENT_HEADER_SIZE)
    return ActiveSegment(ops, meta, fd, SEGMENT_HEADER_SIZE)


def open_segment(ops: FileOps, meta: SegmentMeta) -> ActiveSegment:
    """Reopen an existing, recovered segment to append after its valid data."""
    fd = ops.open(str(meta.path), os.O_WRONLY, 0o644)
    return ActiveSegment(ops, meta, fd, meta.end)


class SegmentSet:
    """The live segments in LSN order, shared by the writer, replay and truncation."""

    def __init__(self, ops: FileOps, directory: Path, metas: Sequence[SegmentMeta]) -> None:
        self.ops = ops
        self.directory = directory
        self._lock = threading.Lock()
        self._metas = list(metas)

    def snapshot(self) -> list[SegmentMeta]:
        with self._lock:
            return list(self._metas)

    def add(self, meta: SegmentMeta) -> None:
        with self._lock:
            self._metas.append(meta)

    def truncate_before(self, lsn: int) -> int:
        """Remove every segment (never the last) whose records are all below ``lsn``."""
        with self._lock:
            count = 0
            while count + 1 < len(self._metas) and self._metas[count + 1].first_lsn <= lsn:
                count += 1
            doomed = self._metas[:count]
            removed = 0
            try:
                for meta in doomed:
                    self.ops.unlink(str(meta.path))
                    removed += 1
            finally:
                del self._metas[:removed]
                if removed:
                    self.ops.fsync_dir(str(self.directory))
        for meta in doomed:
            logger.debug("removed WAL segment %s", meta.path.name)
        return removed
