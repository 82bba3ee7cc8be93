"""The systemd unit verifies, and deploy/install.sh installs into a throwaway root."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "shoal.service"
INSTALL = ROOT / "deploy" / "install.sh"


def test_unit_file_has_the_required_hardening() -> None:
    text = UNIT.read_text()
    for line in (
        "User=shoal",
        "Restart=always",
        "MemoryMax=1G",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/shoal",
        "NoNewPrivileges=true",
        "KillSignal=SIGTERM",
    ):
        assert f"\n{line}\n" in text, line


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    # verify checks that ExecStart exists: point it at this checkout's real entry point
    unit = tmp_path / "shoal.service"
    shoal = Path(sys.executable).with_name("shoal")
    unit.write_text(UNIT.read_text().replace("/opt/shoal/venv/bin/shoal", str(shoal)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shoal.service" not in done.stderr, done.stderr  # no warnings about the unit


def test_install_script_dry_run_lists_every_step() -> None:
    done = subprocess.run(
        ["bash", str(INSTALL), "--dry-run"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for step in (
        "apt-get install",
        "-m venv /opt/shoal/venv",
        "/etc/shoal/shoal.toml",
        "/etc/systemd/system/shoal.service",
        "systemctl enable --now shoal.service",
        "openjdk-17-jre-headless",
        "[spark]",
        "/etc/systemd/system/shoal-compact.timer",
        "systemctl enable --now shoal-retention.timer",
        "systemctl enable --now shoal-rollup.timer",
    ):
        assert step in out, step
    bare = subprocess.run(
        ["bash", str(INSTALL), "--dry-run", "--no-spark"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode == 0, bare.stderr
    for absent in ("openjdk", "timer", "[spark]"):
        assert absent not in bare.stdout, absent
    assert not Path("/opt/shoal/venv").exists() or "keeping" in out


def test_install_script_into_a_throwaway_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    python = shutil.which("python3") or sys.executable
    done = subprocess.run(
        ["bash", str(INSTALL), "--root", str(root), "--no-deps", "--python", python],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "etc/systemd/system/shoal.service").read_text() == UNIT.read_text()
    for job in ("compact", "retention", "rollup"):
        for kind in ("service", "timer"):
            name = f"shoal-{job}.{kind}"
            installed = root / "etc/systemd/system" / name
            assert installed.read_text() == (ROOT / "systemd" / name).read_text()
    config = (root / "etc/shoal/shoal.toml").read_text()
    assert 'data_dir = "/var/lib/shoal"' in config
    assert (root / "var/lib/shoal").is_dir()
    shoal = root / "opt/shoal/venv/bin/shoal"
    assert shoal.is_file()
    # the installed config loads and is valid
    from shoal import config as config_mod

    assert config_mod.load(root / "etc/shoal/shoal.toml", env={}).data_dir == "/var/lib/shoal"
    # a second run keeps the operator's config
    (root / "etc/shoal/shoal.toml").write_text(config + 'log_level = "debug"\n')
    again = subprocess.run(
        ["bash", str(INSTALL), "--root", str(root), "--no-deps", "--python", python],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert "keeping existing" in again.stdout
    assert 'log_level = "debug"' in (root / "etc/shoal/shoal.toml").read_text()
