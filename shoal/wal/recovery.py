"""Reading the state of a WAL directory, and repairing it on open.

:func:`inspect_directory` only reads (``shoal wal verify`` uses it);
:func:`recover` also acts: it cuts torn tails, copies damaged segments aside
as ``<name>.broken`` and reports them.

Torn tail or corruption? Scanning a segment stops at the first frame that is
not valid. The rest of the segment is then searched for any valid frame
(:func:`~shoal.wal.codec.find_next_frame`):

* a valid frame follows: records were lost in the middle of the log, which a
  crash cannot cause (frames are only ever appended): **mid-log corruption**;
* nothing valid follows, and the segment is the last one: the end of an
  interrupted write: **torn tail**, cut off;
* nothing valid follows, in an earlier segment: a torn tail only if the next
  segment's header says the log ended exactly at our last valid record when it
  was created (a write failed, could not be cut back, and the writer rotated);
  otherwise acknowledged records are missing: **mid-log corruption**.

Besides, a segment whose header's previous LSN does not match the end of the
segment before it means records are missing between the two (corruption).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from shoal.errors import WalCorruptionError, WalError
from shoal.wal.codec import (
    FRAME_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    FrameScanner,
    decode_segment_header,
    find_next_frame,
)
from shoal.wal.fileops import FileOps
from shoal.wal.reporting import WalMetrics
from shoal.wal.segment import (
    BROKEN_SUFFIX,
    TMP_SUFFIX,
    SegmentMeta,
    list_segments,
    parse_segment_name,
)

logger = logging.getLogger(__name__)

OK = "ok"
TORN = "torn"
DAMAGED = "damaged"

POLICIES = ("skip-segment", "stop")


@dataclass(frozen=True, slots=True)
class SegmentStatus:
    """What a segment holds and what is wrong with it.

    ``valid_end`` is the offset where the valid prefix ends (the header and
    ``records`` intact frames); ``problem`` says what is at that offset (None
    when the segment is intact to its end). ``kind`` is ``ok``, ``torn`` or
    ``damaged``; ``reason`` explains a ``damaged`` verdict. ``after_records``
    counts valid frames found beyond the damage, up to LSN ``after_last_lsn``.
    """

    path: Path
    first_lsn: int
    prev_lsn: int | None
    size: int
    valid_end: int
    records: int
    problem: str | None
    kind: str = OK
    reason: str | None = None
    after_records: int = 0
    after_last_lsn: int | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def last_lsn(self) -> int:
        """LSN of the last record of the valid prefix (first_lsn - 1 if none)."""
        return self.first_lsn + self.records - 1

    @property
    def max_lsn(self) -> int:
        """The highest LSN this segment is known to hold, damage included."""
        return max(self.last_lsn, self.after_last_lsn or 0)

    @property
    def header_ok(self) -> bool:
        return self.prev_lsn is not None


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What :meth:`Wal.open` found and did."""

    segments: tuple[SegmentStatus, ...]
    torn_tails_cut: tuple[SegmentStatus, ...]
    damaged: tuple[SegmentStatus, ...]
    broken_copies: tuple[Path, ...]
    records_kept: int
    policy: str
    stopped_after_lsn: int | None = None

    @property
    def clean(self) -> bool:
        return not self.damaged


def scan_segment(path: Path, name_lsn: int, max_record_bytes: int) -> SegmentStatus:
    """Read one segment and find its valid prefix and any damage (no verdict yet)."""
    data = path.read_bytes()
    size = len(data)
    problem: str | None = None
    try:
        header = decode_segment_header(data, path.name)
        if header.first_lsn != name_lsn:
            problem = f"header says first LSN {header.first_lsn}, file name says {name_lsn}"
    except WalCorruptionError as exc:
        problem = exc.reason
    if problem is not None:
        # Records behind a bad header are counted (not replayed), so their
        # LSNs are never handed out again.
        start = SEGMENT_HEADER_SIZE - 1
        after, after_last = _frames_after(data, start, name_lsn, max_record_bytes)
        status = SegmentStatus(path, name_lsn, None, size, 0, 0, problem)
        return replace(status, after_records=after, after_last_lsn=after_last)
    scanner = FrameScanner(data, SEGMENT_HEADER_SIZE, name_lsn, max_record_bytes)
    records = 0
    for _ in scanner:
        records += 1
    status = SegmentStatus(
        path, name_lsn, header.prev_lsn, size, scanner.offset, records, scanner.problem
    )
    if scanner.problem is None:
        return status
    after, after_last = _frames_after(data, scanner.offset, scanner.next_lsn, max_record_bytes)
    return replace(status, after_records=after, after_last_lsn=after_last)


def _frames_after(
    data: bytes, start: int, min_lsn: int, max_record_bytes: int
) -> tuple[int, int | None]:
    """Count the valid frames anywhere after a bad frame at ``start``."""
    count = 0
    last: int | None = None
    pos = start
    while True:
        found = find_next_frame(data, pos, min_lsn, max_record_bytes)
        if found is None:
            return count, last
        offset, lsn = found
        scanner = FrameScanner(data, offset, lsn, max_record_bytes)
        for frame in scanner:
            count += 1
            last = frame[0]
        if scanner.problem is None:
            return count, last
        pos = scanner.offset
        min_lsn = scanner.next_lsn


def classify(scans: list[SegmentStatus]) -> list[SegmentStatus]:
    """Decide for each scanned segment: ok, torn tail, or damaged (see module doc)."""
    result: list[SegmentStatus] = []
    for index, seg in enumerate(scans):
        nxt = scans[index + 1] if index + 1 < len(scans) else None
        prev = result[-1] if result else None
        kind, reason = OK, None
        if seg.problem is not None:
            following = (
                f", followed by {seg.after_records} valid record(s) up to LSN {seg.after_last_lsn}"
                if seg.after_records
                else ""
            )
            if not seg.header_ok:
                # Segments are created complete (temp file, fsync, rename), so
                # a bad header is never the trace of a crash.
                kind, reason = DAMAGED, f"unreadable header: {seg.problem}{following}"
            elif seg.after_records:
                kind, reason = DAMAGED, f"{seg.problem} at byte {seg.valid_end}{following}"
            elif nxt is None:
                kind = TORN
            elif nxt.prev_lsn == seg.last_lsn:
                kind = TORN  # the writer rotated away from a tail it could not cut
            else:
                kind = DAMAGED
                reason = (
                    f"{seg.problem} at byte {seg.valid_end}; the segment ends at LSN "
                    f"{seg.last_lsn} but the next segment starts after LSN {nxt.prev_lsn}"
                )
        if (
            kind != DAMAGED
            and prev is not None
            and prev.kind != DAMAGED
            and seg.prev_lsn is not None
            and prev.header_ok
            and seg.prev_lsn != prev.last_lsn
        ):
            kind = DAMAGED
            reason = (
                f"records missing before this segment: it follows LSN {seg.prev_lsn} "
                f"but the previous segment ends at LSN {prev.last_lsn}"
            )
        result.append(replace(seg, kind=kind, reason=reason))
    return result


def inspect_directory(directory: Path, max_record_bytes: int) -> list[SegmentStatus]:
    """Scan and classify every segment of a WAL directory without changing anything."""
    if not directory.is_dir():
        raise WalError(f"not a directory: {directory}")
    scans = [scan_segment(path, lsn, max_record_bytes) for lsn, path in list_segments(directory)]
    return classify(scans)


@dataclass(frozen=True, slots=True)
class Recovered:
    """Result of :func:`recover`: the report plus what the WAL needs to run."""

    report: RecoveryReport
    metas: list[SegmentMeta]
    max_lsn: int
    last: SegmentStatus | None  # the last live segment, if intact enough to append to


def recover(
    directory: Path,
    ops: FileOps,
    policy: str,
    max_record_bytes: int,
    metrics: WalMetrics,
) -> Recovered:
    """Repair the directory for appending and work out what replay may read."""
    if policy not in POLICIES:
        raise ValueError(f"corruption policy must be one of {POLICIES}, got {policy!r}")
    for entry in directory.iterdir():
        if entry.name.endswith(TMP_SUFFIX) and parse_segment_name(entry.name[:20] + ".wal"):
            ops.unlink(str(entry))  # an interrupted segment creation or .broken copy
    statuses = inspect_directory(directory, max_record_bytes)
    metas: list[SegmentMeta] = []
    torn: list[SegmentStatus] = []
    damaged: list[SegmentStatus] = []
    copies: list[Path] = []
    kept = 0
    stopped_after: int | None = None
    max_lsn = 0
    prev_last = statuses[0].first_lsn - 1 if statuses else 0
    last: SegmentStatus | None = None
    for seg in statuses:
        max_lsn = max(max_lsn, seg.max_lsn, seg.first_lsn - 1, seg.prev_lsn or 0)
        if seg.kind == TORN:
            torn.append(seg)
            _cut_tail(ops, seg)
            metrics.torn_tail_cut(seg.name, seg.size - seg.valid_end)
        elif seg.kind == DAMAGED:
            damaged.append(seg)
            if seg is statuses[-1]:
                # Whatever the damage hid, the last segment cannot have held
                # more frames than this; LSNs continue above them. (An
                # earlier segment's LSNs are bounded by the next one's.)
                room = max(0, seg.size - SEGMENT_HEADER_SIZE) // FRAME_HEADER_SIZE
                max_lsn = max(max_lsn, seg.first_lsn - 1 + max(room, 1))
            copy = _copy_aside(ops, directory, seg.path)
            copies.append(copy)
            logger.error(
                "WAL segment %s is damaged: %s; copied to %s; policy %s",
                seg.name,
                seg.reason,
                copy.name,
                policy,
            )
            metrics.corruption_found(seg.name, seg.reason or "damaged")
        metas.append(SegmentMeta(seg.path, seg.first_lsn, seg.valid_end))
        last = seg if seg.kind != DAMAGED and seg.header_ok else None
        if stopped_after is None:
            if seg.kind == DAMAGED and policy == "stop":
                # Replay keeps the valid prefix of this segment, if it has one
                # that follows the log so far, and nothing after it.
                in_segment = seg.problem is not None and seg.header_ok
                kept += seg.records if in_segment else 0
                stopped_after = seg.last_lsn if in_segment else prev_last
            else:
                kept += seg.records
        prev_last = seg.last_lsn
    report = RecoveryReport(
        segments=tuple(statuses),
        torn_tails_cut=tuple(torn),
        damaged=tuple(damaged),
        broken_copies=tuple(copies),
        records_kept=kept,
        policy=policy,
        stopped_after_lsn=stopped_after,
    )
    return Recovered(report=report, metas=metas, max_lsn=max_lsn, last=last)


def _cut_tail(ops: FileOps, seg: SegmentStatus) -> None:
    logger.warning(
        "WAL segment %s: cutting a torn tail of %d bytes at byte %d (%s)",
        seg.name,
        seg.size - seg.valid_end,
        seg.valid_end,
        seg.problem,
    )
    fd = ops.open(str(seg.path), os.O_WRONLY, 0o644)
    try:
        ops.ftruncate(fd, seg.valid_end)
        ops.fdatasync(fd)
    finally:
        ops.close(fd)


def _copy_aside(ops: FileOps, directory: Path, path: Path) -> Path:
    """Copy a damaged segment to ``<name>.broken`` (once; an existing copy is kept)."""
    target = path.with_name(path.name + BROKEN_SUFFIX)
    if target.exists():
        return target
    tmp = target.with_name(target.name + TMP_SUFFIX)
    shutil.copyfile(path, tmp)
    fd = ops.open(str(tmp), os.O_RDONLY, 0o644)
    try:
        ops.fdatasync(fd)
    finally:
        ops.close(fd)
    ops.rename(str(tmp), str(target))
    ops.fsync_dir(str(directory))
    return target
