"""Retention and the commit/retry loop on real tables (metadata only: no Spark needed)."""

from __future__ import annotations

import datetime as dt

import pyarrow.compute as pc
import pytest

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.errors import JobConflictError
from shoal.pipeline.commit import run_with_retries
from shoal.pipeline.retention import apply_retention, retention_days
from shoal.storage.commit import Commit
from shoal.storage.store import TableStore
from shoal.storage.types import TableSnapshot
from tests.pipeline.conftest import HOUR_US, T0_US, delta_rows, rows_multiset

DAY_US = 24 * HOUR_US


def _fill(store: TableStore) -> None:
    table = store.open("acme", "metrics")
    for i in range(3):
        table.flush(
            metrics_table(300, start_us=T0_US, span_s=3 * 3600 - 1, series=10, seed=i), i + 1
        )


def test_retention_drops_whole_expired_hours(store: TableStore, cfg: config_mod.Config) -> None:
    _fill(store)
    table = store.open("acme", "metrics")
    before = delta_rows(table.path)
    now = T0_US + DAY_US + 2 * HOUR_US + 17_000_000  # cutoff: T0 + 2h
    result = apply_retention(table, cfg.replace(retention_days=1), now_us=now)
    assert result.cutoff_us == T0_US + 2 * HOUR_US
    assert result.files_removed == 6
    after = delta_rows(table.path)
    cutoff = pc.cast(before.column("timestamp"), "int64")
    kept = before.filter(pc.greater_equal(cutoff, T0_US + 2 * HOUR_US))
    assert 0 < after.num_rows == kept.num_rows == before.num_rows - result.rows_removed
    assert rows_multiset(after) == rows_multiset(kept)
    # the coverage of the dropped hours went with them
    t0 = dt.datetime.fromtimestamp(T0_US / 1e6, tz=dt.UTC)
    answer = table.coverage(t0, t0 + dt.timedelta(hours=3), bucket_s=3600)
    assert answer.covered == ((t0 + dt.timedelta(hours=2), t0 + dt.timedelta(hours=3)),)
    # idempotent
    version = table.snapshot().version
    again = apply_retention(table, cfg.replace(retention_days=1), now_us=now)
    assert again.version is None and table.snapshot().version == version


def test_per_table_retention_setting(tmp_path: object) -> None:
    cfg = config_mod.load(env={"SHOAL_RETENTION_DAYS": "30", "SHOAL_RETENTION_DAYS_LOGS": "7"})
    assert retention_days(cfg, "logs") == 7
    assert retention_days(cfg, "metrics") == 30


def test_conflict_rereads_and_retries(store: TableStore, cfg: config_mod.Config) -> None:
    _fill(store)
    table = store.open("acme", "metrics")
    calls: list[int] = []

    def attempt(snapshot: TableSnapshot) -> Commit | None:
        calls.append(snapshot.version)
        if not snapshot.files:
            return None
        victim = table.place.rel(snapshot.files[0].path)
        if len(calls) == 1:
            # another writer removes the same file first
            table.commit(
                Commit("TEST", (), (victim,), data_change=True, read_version=snapshot.version)
            )
        return Commit("TEST", (), (victim,), data_change=True)

    result = run_with_retries("test", table, attempt, attempts=3)
    assert result is not None
    assert len(calls) == 2 and calls[1] == calls[0] + 1
    assert result.version == calls[1] + 1
    assert result.files_removed == 1


def test_gives_up_with_a_clear_error(store: TableStore) -> None:
    _fill(store)
    table = store.open("acme", "metrics")

    def always_lose(snapshot: TableSnapshot) -> Commit | None:
        victim = table.place.rel(snapshot.files[0].path)
        table.commit(Commit("TEST", (), (victim,), data_change=True, read_version=snapshot.version))
        return Commit("TEST", (), (victim,), data_change=True)

    version = table.snapshot().version
    with pytest.raises(JobConflictError, match="conflicted 2 times; nothing was changed"):
        run_with_retries("test", table, always_lose, attempts=2)
    # only the competing commits landed
    assert table.snapshot().version == version + 2
