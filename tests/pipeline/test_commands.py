"""``shoal retention`` and ``shoal vacuum`` end to end (no Spark: they only touch metadata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.pipeline_data import metrics_table
from shoal.cli import main
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US


def test_retention_and_vacuum_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    table = TableStore(data).open("acme", "metrics")
    table.flush(metrics_table(100, start_us=T0_US, span_s=600, series=4), wal_lsn=1)
    monkeypatch.setenv("SHOAL_RETENTION_DAYS_METRICS", "1")
    assert main(["retention", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "acme/metrics: version 2: dropped 1 files, 100 rows before" in out
    assert TableStore(data).open("acme", "metrics").snapshot().files == ()
    # the removed file stays until the vacuum window has passed
    assert main(["vacuum", "--data-dir", str(data)]) == 0
    assert "deleted 0 files older than 24 h" in capsys.readouterr().out
    assert len(list((table.path).glob("hour=*/*.parquet"))) == 1
    # a second retention run has nothing to do
    assert main(["retention", "--data-dir", str(data), "--tenant", "acme"]) == 0
    assert "nothing before" in capsys.readouterr().out


def test_unknown_table_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    TableStore(tmp_path).open("acme", "metrics")
    code = main(["compact", "--data-dir", str(tmp_path), "--tenant", "acme", "--table", "nope"])
    assert code == 2
    assert "no table 'nope' for tenant 'acme'" in capsys.readouterr().err
    code = main(["rollup", "--data-dir", str(tmp_path), "--table", "logs"])
    assert code == 2
    assert "rollups read metrics" in capsys.readouterr().err
