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


HARDENING_NOT_FOR_JOBS = {
    # the JVM reads /proc/meminfo and /proc/cpuinfo to size itself
    "ProcSubset",
    # the jobs need no lock on their address families beyond the server's plus netlink
    "RestrictAddressFamilies",
}


def _directives(text: str, section: str = "[Service]") -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip()
        elif current == section and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


@pytest.mark.parametrize("job", sorted(JOBS))
def test_jobs_have_the_server_units_sandbox(job: str) -> None:
    server = _directives((ROOT / "systemd" / "shoal.service").read_text())
    unit = _directives((ROOT / "systemd" / f"shoal-{job}.service").read_text())
    sandbox = [
        key
        for key in server
        if key.startswith(("Protect", "Restrict", "Private", "SystemCall", "Capability"))
        or key in {"NoNewPrivileges", "AmbientCapabilities", "LockPersonality", "RemoveIPC"}
    ]
    assert len(sandbox) > 20
    for key in sandbox:
        if key in HARDENING_NOT_FOR_JOBS:
            continue
        assert unit.get(key) == server[key], key


@pytest.mark.parametrize("job", sorted(JOBS))
def test_systemd_analyze_security_scores_jobs_like_the_server(job: str) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")

    def exposure(name: str) -> float:
        done = subprocess.run(
            ["systemd-analyze", "security", "--offline=true", "--no-pager", name],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT / "systemd",
        )
        last = done.stdout.strip().splitlines()[-1]
        assert "Overall exposure level" in last, done.stdout + done.stderr
        return float(last.split(":")[1].split()[0])

    assert exposure(f"shoal-{job}.service") <= exposure("shoal.service") + 0.2
