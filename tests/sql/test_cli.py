"""``shoal sql --local`` reads a data dir's committed Parquet, read-only."""

from __future__ import annotations

import json

import pytest

from shoal.cli import main

from .helpers import Harness, metric_rows, tree_state


def test_local_query_prints_a_table_and_writes_nothing(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.ingest("acme", "metrics", metric_rows(120, seed=1))
    harness.flush("acme", "metrics")
    harness.ingest("acme", "metrics", metric_rows(5, seed=2))  # not committed: invisible
    before = tree_state(harness.data_dir)
    sql = "SELECT metric_name, count(*) AS n FROM metrics GROUP BY 1 ORDER BY 1"
    code = main(["sql", "--local", "--data-dir", str(harness.data_dir), "--tenant", "acme", sql])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["metric_name", "|", "n"]
    assert lines[-1] == "(5 rows)"
    assert sum(int(line.split("|")[1]) for line in lines[2:-1]) == 120
    code = main(
        [
            "sql",
            "--local",
            "--data-dir",
            str(harness.data_dir),
            "--tenant",
            "acme",
            "--format",
            "json",
            "SELECT count(*) AS n FROM metrics",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [[120]]
    code = main(["sql", "--local", "--data-dir", str(harness.data_dir), "SELEC 1"])
    assert code == 1
    assert "ParserError" in capsys.readouterr().err
    assert tree_state(harness.data_dir) == before
