"""The planning rules, on generated file lists (no Spark, no disk)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shoal.pipeline.plan import (
    changed_hours,
    compaction_groups,
    expired_files,
    file_hour,
    retention_cutoff_us,
    task_batches,
)
from shoal.storage.layout import HOUR_US
from shoal.storage.types import ScanFile

T0 = 1_795_132_800_000_000


@st.composite
def scan_files(draw: st.DrawFn) -> list[ScanFile]:
    count = draw(st.integers(0, 40))
    files = []
    for i in range(count):
        start = T0 + draw(st.integers(0, 6 * HOUR_US))
        length = draw(st.one_of(st.integers(0, HOUR_US // 4), st.integers(0, 3 * HOUR_US)))
        files.append(
            ScanFile(f"/t/f{i}.parquet", draw(st.integers(1, 1000)), 10, start, start + length)
        )
    return files


@given(scan_files(), st.integers(2, 2000))
def test_compaction_groups_partition_small_single_hour_files(
    files: list[ScanFile], target: int
) -> None:
    groups = compaction_groups(files, target_file_bytes=target)
    chosen = [f for g in groups for f in g.files]
    assert len(chosen) == len(set(chosen))  # no file in two groups
    for g in groups:
        assert len(g.files) >= 2
        assert all(file_hour(f) == g.hour and f.size < target // 2 for f in g.files)
    # every hour with two or more small files is compacted entirely
    small: dict[int, int] = {}
    for f in files:
        hour = file_hour(f)
        if hour is not None and f.size < target // 2:
            small[hour] = small.get(hour, 0) + 1
    expected = sum(n for n in small.values() if n >= 2)
    assert len(chosen) == expected


@given(scan_files(), st.integers(0, 8))
def test_expired_files_lie_wholly_before_the_cutoff(files: list[ScanFile], hours: int) -> None:
    cutoff = T0 + hours * HOUR_US
    gone = expired_files(files, cutoff)
    assert all(f.max_time_us < cutoff for f in gone)
    assert all(f in gone for f in files if f.max_time_us < cutoff)


def test_retention_cutoff_is_an_hour_boundary() -> None:
    now = T0 + 5 * 86_400_000_000 + 3 * HOUR_US + 1234
    assert retention_cutoff_us(now, 2) == T0 + 3 * 86_400_000_000 + 3 * HOUR_US


def test_changed_hours_are_the_hours_of_new_files() -> None:
    a = ScanFile("/t/a", 1, 1, T0, T0 + 10)
    b = ScanFile("/t/b", 1, 1, T0 + HOUR_US, T0 + 3 * HOUR_US - 1)
    base = T0 // HOUR_US
    assert changed_hours([a, b], [a]) == [base + 1, base + 2]
    assert changed_hours([a, b], None) == [base, base + 1, base + 2]
    assert changed_hours([a], [a]) == []


@given(st.lists(st.integers(0, 10_000), max_size=60), st.integers(1, 12))
def test_task_batches_deal_every_item_once_and_balance(sizes: list[int], slots: int) -> None:
    batches = task_batches(sizes, slots)
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))
    assert len(batches) <= max(1, slots)
    assert all(b == sorted(b) and b for b in batches)
    if sizes:
        totals = [sum(sizes[i] for i in b) for b in batches]
        # greedy largest-first: no batch exceeds the mean by more than the largest item
        assert max(totals) <= sum(sizes) / len(batches) + max(sizes)
