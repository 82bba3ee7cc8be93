"""The maintenance timers and services verify and run the right commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
JOBS = {"compact": ["compact"], "rollup": ["rollup"], "retention": ["retention", "vacuum"]}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_service_runs_real_commands(job: str) -> None:
    text = (ROOT / "systemd" / f"shoal-{job}.service").read_text()
    commands = [
        line.split("=", 1)[1].split() for line in text.splitlines() if line.startswith("ExecStart=")
    ]
    assert [c[1] for c in commands] == JOBS[job]
    for command in commands:
        args = build_parser().parse_args(command[1:])  # the CLI accepts exactly these arguments
        assert args.command == command[1]
    assert "Type=oneshot" in text and "ReadWritePaths=/var/lib/shoal" in text
    timer = (ROOT / "systemd" / f"shoal-{job}.timer").read_text()
    assert f"Unit=shoal-{job}.service" in timer and "Persistent=true" in timer


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    shoal = Path(sys.executable).with_name("shoal")
    units = []
    for src in sorted((ROOT / "systemd").glob("shoal-*")):
        dest = tmp_path / src.name
        dest.write_text(src.read_text().replace("/opt/shoal/venv/bin/shoal", str(shoal)))
        units.append(str(dest))
    assert len(units) == 6
    done = subprocess.run(
        ["systemd-analyze", "verify", *units],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shoal-" not in done.stderr, done.stderr
