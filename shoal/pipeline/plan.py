"""What each job would change, decided from a table's committed file list alone.

Pure functions over :class:`~shoal.storage.types.ScanFile` lists, so the rules
(which hours compaction rewrites, which files retention drops, which hours a
rollup recomputes) are tested without Spark.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from shoal.storage.layout import HOUR_US, hour_index
from shoal.storage.types import ScanFile


@dataclasses.dataclass(frozen=True)
class HourGroup:
    """Files of one hour that compaction merges into fewer, sorted files."""

    hour: int
    files: tuple[ScanFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def file_hour(f: ScanFile) -> int | None:
    """The hour a file's rows lie in, or None when they span more than one hour."""
    first, last = hour_index(f.min_time_us), hour_index(f.max_time_us)
    return first if first == last else None


def compaction_groups(
    files: Iterable[ScanFile],
    *,
    target_file_bytes: int,
    since_us: int | None = None,
    until_us: int | None = None,
) -> list[HourGroup]:
    """Per hour, the small files worth merging.

    A file is small when it is under half the target size. An hour is
    compacted when it holds at least two small files; only its small files are
    rewritten (in runs of about the target size, one task each), so a second
    run finds at most one small file per hour (the remainder of the last run)
    and does nothing: the job is idempotent, and
    large files are never rewritten for one late small file. Files whose rows
    span several hours (imports) are left alone. ``since_us``/``until_us``
    select hours whose start lies in ``[since_us, until_us)``.
    """
    small_limit = target_file_bytes // 2
    by_hour: dict[int, list[ScanFile]] = {}
    for f in files:
        hour = file_hour(f)
        if hour is None or f.size >= small_limit:
            continue
        if since_us is not None and hour * HOUR_US < hour_index(since_us) * HOUR_US:
            continue
        if until_us is not None and hour * HOUR_US >= until_us:
            continue
        by_hour.setdefault(hour, []).append(f)
    groups: list[HourGroup] = []
    for hour, found in sorted(by_hour.items()):
        if len(found) < 2:
            continue
        for chunk in _chunks(sorted(found, key=lambda f: f.path), target_file_bytes):
            groups.append(HourGroup(hour, tuple(chunk)))
    return groups


def _chunks(files: list[ScanFile], cap: int) -> list[list[ScanFile]]:
    """Consecutive runs of files of about ``cap`` bytes in all, none of a single file.

    One task merges one run in memory, so the cap bounds a task's input.
    """
    chunks: list[list[ScanFile]] = [[]]
    size = 0
    for f in files:
        if len(chunks[-1]) >= 2 and size + f.size > cap:
            chunks.append([])
            size = 0
        chunks[-1].append(f)
        size += f.size
    if len(chunks) > 1 and len(chunks[-1]) == 1:
        chunks[-2].extend(chunks.pop())
    return chunks


def task_batches(sizes: Sequence[int], slots: int) -> list[list[int]]:
    """Indexes of ``sizes`` dealt into at most ``slots`` batches of about equal total size.

    Largest first, each to the batch with the least so far; each batch lists its
    indexes in ascending order. A Spark task per batch instead of per item
    keeps every core busy without paying a task's start for every item.
    """
    count = max(1, min(slots, len(sizes)))
    totals = [0] * count
    batches: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        least = min(range(count), key=lambda b: (totals[b], b))
        batches[least].append(index)
        totals[least] += sizes[index]
    return [sorted(b) for b in batches if b]


def retention_cutoff_us(now_us: int, retention_days: int) -> int:
    """Start of the first hour kept: rows before it are in wholly expired hours."""
    return hour_index(now_us - retention_days * 86_400 * 1_000_000) * HOUR_US


def expired_files(files: Iterable[ScanFile], cutoff_us: int) -> list[ScanFile]:
    """Files all of whose rows lie before ``cutoff_us`` (an hour boundary)."""
    return sorted((f for f in files if f.max_time_us < cutoff_us), key=lambda f: f.path)


def changed_hours(current: Sequence[ScanFile], previous: Sequence[ScanFile] | None) -> list[int]:
    """Hours touched by files in ``current`` that ``previous`` did not have.

    With no previous file list (first run, or its version is gone) every hour
    of ``current`` counts as changed.
    """
    before = {f.path for f in previous} if previous is not None else set()
    hours: set[int] = set()
    for f in current:
        if f.path in before:
            continue
        hours.update(range(hour_index(f.min_time_us), hour_index(f.max_time_us) + 1))
    return sorted(hours)
