"""Every `make bench-*` target runs, at its smallest size (the slow suite).

A benchmark is run by hand, rarely, on a quiet machine; one that stopped running (a
renamed module, a reference engine that no longer reads the files) would be found only
then. Each target of the Makefile is run here with arguments that make it small, as a
fresh clone would run it, and must exit 0 having printed its figures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# make target -> the loadtest module and the arguments that make it small
SMALLEST: dict[str, list[str]] = {
    "bench-wal": [
        "loadtest.bench_wal",
        "--seconds",
        "0.2",
        "--only",
        "16:8",
        "--kind",
        "threads",
        "--no-replay",
    ],
    "bench-otlp": ["loadtest.bench_otlp", "--seconds", "0.2", "--points", "100"],
    "bench-append": [
        "loadtest.bench_append",
        "--days",
        "1",
        "--rows-per-day",
        "2000",
        "--open-commits",
        "3",
    ],
    "bench-ingest": ["loadtest", "ingest", "--duration", "3", "--workers", "1"],
    "bench-replay": [
        "loadtest.bench_replay",
        "--mib",
        "1",
        "--series",
        "10",
        "--points",
        "10",
        "--repeat",
        "1",
        "--target-s",
        "60",
    ],
    "bench-query": [
        "loadtest.bench_query",
        "--points",
        "20000",
        "--snapshot-rows",
        "2000",
        "--repeat",
        "1",
        "--cache-dir",
        "{tmp}/query",
    ],
    "bench-freshness": ["loadtest.bench_freshness", "--exports", "3", "--warm-up", "1"],
    "bench-storm": ["loadtest.bench_storm", "--phase-s", "2"],
    "bench-pg": [
        "loadtest.bench_pg",
        "--points",
        "20000",
        "--large-rows",
        "2000",
        "--repeat",
        "1",
        "--cache-dir",
        "{tmp}/pg",
    ],
    "bench-pipeline": [
        "loadtest.bench_pipeline",
        "--points",
        "20000",
        "--hours",
        "2",
        "--files-per-hour",
        "2",
        "--series",
        "10",
        "--repeats",
        "1",
        "--dir",
        "{tmp}/pipeline",
    ],
    "bench-promql": ["loadtest.bench_promql", "--series", "40", "--hours", "0.1", "--repeat", "1"],
    "bench-browser": [
        "loadtest.bench_promql",
        "--series",
        "200",
        "--hours",
        "0.05",
        "--browser-only",
    ],
    "bench-logs": [
        "loadtest.bench_logs",
        "--lines",
        "5000",
        "--services",
        "3",
        "--hours",
        "1",
        "--batch",
        "1000",
        "--ingest-lines",
        "2000",
        "--repeat",
        "1",
    ],
    "bench-traces": [
        "loadtest.bench_traces",
        "--traces",
        "300",
        "--services",
        "3",
        "--hours",
        "1",
        "--lookups",
        "10",
        "--repeat",
        "1",
        "--batch",
        "50",
    ],
    "bench-storage": [
        "loadtest.bench_storage",
        "--sql-points",
        "20000",
        "--promql-series",
        "20",
        "--promql-hours",
        "0.1",
        "--days",
        "1",
        "--day-rows",
        "2000",
        "--repeat",
        "1",
        "--flushes",
        "2",
    ],
    "bench-peers": [
        "loadtest.bench_peers",
        "--duration",
        "2",
        "--repeat",
        "1",
        "--workers",
        "1",
        "--stages",
    ],
    "bench-cardinality": [
        "loadtest.bench_cardinality",
        "--size",
        "2000,4000",
        "--paced-from",
        "4000",
        "--duration",
        "2",
        "--paced-duration",
        "4",
        "--interval",
        "2",
        "--calls",
        "2",
        "--workers",
        "1",
        "--idle",
        "0.5",
    ],
}

# what each needs beyond the project's own install
NEEDS: dict[str, list[str]] = {
    "bench-promql": ["prometheus"],
    "bench-browser": ["prometheus"],
    "bench-peers": ["prometheus", "victoria-metrics"],
    "bench-cardinality": ["prometheus"],
}


# what a run must print besides figures
PRINTS: dict[str, list[str]] = {
    "bench-peers": ["CPU µs per sample by stage", "| decoding into rows |"],
}


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^(bench-[\w-]+):", makefile, re.MULTILINE))


def test_every_bench_target_has_a_smoke_run() -> None:
    assert make_targets() == set(SMALLEST), "add the new target's smallest run to SMALLEST"


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(SMALLEST))
def test_the_benchmark_runs_at_its_smallest_size(target: str, tmp_path: Path) -> None:
    import shutil

    missing = [tool for tool in NEEDS.get(target, []) if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{target} needs {', '.join(missing)} (installed by .ci/run)")
    module, *args = (arg.replace("{tmp}", str(tmp_path)) for arg in SMALLEST[target])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    # every benchmark prints its figures on standard output
    assert re.search(r"\d", run.stdout), output[-4000:]
    for text in PRINTS.get(target, []):
        assert text in run.stdout, output[-4000:]
