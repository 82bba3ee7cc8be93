"""Freshness: once an OpenTelemetry SDK export returns, the very next SQL query sees its rows.

How soon it sees them is a figure of ``make bench-freshness`` (docs/benchmarks.md), not
of this test: a time limit here would fail on a busy machine, not on a regression.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.bench_freshness import ack_to_visible
from loadtest.ingest import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "data", env={"SHOAL_LOG_LEVEL": "warning"}, log_path=tmp_path / "server.log"
    )
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.kill()


def test_every_acknowledged_export_is_counted_by_the_next_query(server: ServerProcess) -> None:
    # ack_to_visible raises NotVisibleError when a query's count misses an acknowledged record
    delays = ack_to_visible(server.url, exports=40, warm_up=5)
    assert len(delays) == 40
