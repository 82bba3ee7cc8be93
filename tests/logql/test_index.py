"""Counting metric queries answered from the log index alone (the summaries beside each
logs file), shown by deleting the data files after the flush: a query the index can
answer still gets the answer counted from the pushed entries; one that needs the rows
no longer can. Ranges that start on a whole minute, and ranges that do not but whose
windows cut no minute's entries apart (sparse streams, as Grafana's volume histogram
sees them at night)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest import loki as push
from tests.lokipush.conftest import Loki, get, push_streams, serve
from tests.server.conftest import delta_rows

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
T0 = (time.time_ns() // MINUTE - 90) * MINUTE
MINUTES = 30
SPARSE = {"a": (5,), "b": (5, 10)}
"""Per app, the seconds of each minute its entries are at."""


@pytest.fixture(scope="module")
def flushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loki]:
    """A server whose logs are all flushed to files, with their summaries beside them."""
    gen = serve(tmp_path_factory.mktemp("index"), {"SHOAL_FLUSH_MAX_AGE_S": "1"})
    loki = next(gen)
    try:
        streams: list[push.Stream] = [
            (
                {"app": app, "env": "prod"},
                [
                    (T0 + m * MINUTE + s * SECOND, f"{app} {m} {s}")
                    for m in range(MINUTES)
                    for s in seconds
                ],
            )
            for app, seconds in SPARSE.items()
        ]
        push_streams(loki, streams)
        total = sum(len(entries) for _, entries in streams)
        deadline = time.monotonic() + 60
        while delta_rows(loki.server.data_dir, "acme", "logs").num_rows < total:
            assert time.monotonic() < deadline, "the flush did not come"
            time.sleep(0.2)
        yield loki
    finally:
        gen.close()


def volume(loki: Loki, start: int, end: int, step_s: int = 60) -> tuple[int, Any]:
    status, found = get(
        loki.url,
        "/loki/api/v1/query_range",
        {
            "query": 'sum by (app) (count_over_time({env="prod"}[1m]))',
            "start": str(start),
            "end": str(end),
            "step": str(step_s),
        },
        loki.token,
    )
    if status != 200:
        return status, found
    return status, {
        s["metric"]["app"]: {int(t) * SECOND: int(v) for t, v in s["values"]}
        for s in found["data"]["result"]
    }


def expected(start: int, end: int, step: int) -> dict[str, dict[int, int]]:
    """Per app and step t, its entries in (t - 1 m, t], counted from what was pushed."""
    out: dict[str, dict[int, int]] = {}
    for app, seconds in SPARSE.items():
        times = [T0 + m * MINUTE + s * SECOND for m in range(MINUTES) for s in seconds]
        for t in range(start, end + 1, step):
            n = sum(1 for ts in times if t - MINUTE < ts <= t)
            if n:
                out.setdefault(app, {})[t] = n
    return out


def test_counts_come_from_the_index_alone(flushed: Loki) -> None:
    aligned = (T0 + 2 * MINUTE, T0 + 20 * MINUTE)
    unaligned = (T0 + 2 * MINUTE + 30 * SECOND, T0 + 20 * MINUTE + 30 * SECOND)
    cutting = (T0 + 2 * MINUTE + 7 * SECOND, T0 + 20 * MINUTE + 7 * SECOND)  # b's 5 | 10
    before = {span: volume(flushed, *span) for span in (aligned, unaligned, cutting)}
    for (start, end), (status, found) in before.items():
        assert status == 200 and found == expected(start, end, MINUTE), (start, found)
    # the data files go; their summaries stay
    root = Path(flushed.server.data_dir) / "tenants" / "acme" / "logs"
    files = [f for f in root.rglob("*.parquet") if "_logindex" not in f.parts]
    assert files and all((root / "_logindex").glob("*.parquet"))
    for f in files:
        f.unlink()
    for span in (aligned, unaligned):
        assert volume(flushed, *span) == before[span], span
    # where a window's edge falls between a minute's entries, the rows must be read
    assert volume(flushed, *cutting)[0] != 200
