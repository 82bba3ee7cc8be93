"""The systemd unit verifies, and deploy/install.sh installs into a throwaway root."""

from __future__ import annotations

import re
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
    # Java 17 or 21: the one already installed, else the distribution's package
    assert re.search(r"= java (17|21) is installed|openjdk-(21|17)-jre-headless", out), out
    assert "--role ingest,query" in out and "Next steps" in out
    for step in (
        "apt-get install",
        " gcc libc6-dev python3-dev",  # the scanners in C are built with shoal
        "-m venv /opt/shoal/venv",
        "/etc/shoal/shoal.toml",
        "/etc/systemd/system/shoal.service",
        "systemctl enable --now shoal.service",
        "--constraint " + str(ROOT / "requirements.lock"),
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


def _copy_source(dest: Path) -> Path:
    for name in ("shoal", "systemd", "deploy", "docs"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "requirements.lock"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def test_install_script_into_a_throwaway_root_then_a_rerun_upgrades_in_place(
    tmp_path: Path,
) -> None:
    source = _copy_source(tmp_path / "src")
    root = tmp_path / "root"
    python = shutil.which("python3") or sys.executable
    command = ["bash", str(source / "deploy/install.sh"), "--root", str(root), "--no-deps"]
    first = subprocess.run(
        [*command, "--python", python], capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "shoal 0.1.0 installed" in first.stdout
    assert "not run: systemctl enable --now shoal.service" in first.stdout
    assert "try-restart" not in first.stdout
    assert (root / "etc/systemd/system/shoal.service").read_text() == UNIT.read_text()
    for job in ("compact", "retention", "rollup"):
        for kind in ("service", "timer"):
            name = f"shoal-{job}.{kind}"
            installed = root / "etc/systemd/system" / name
            assert installed.read_text() == (ROOT / "systemd" / name).read_text()
    config = (root / "etc/shoal/shoal.toml").read_text()
    assert 'data_dir = "/var/lib/shoal"' in config
    assert (root / "var/lib/shoal").is_dir()
    assert (root / "opt/shoal/venv/bin/shoal").is_file()
    # the installed config loads and is valid
    from shoal import config as config_mod

    assert config_mod.load(root / "etc/shoal/shoal.toml", env={}).data_dir == "/var/lib/shoal"

    # the operator edits the config; a newer tree has changed code and a changed unit,
    # same version number
    (root / "etc/shoal/shoal.toml").write_text(config + 'log_level = "debug"\n')
    (source / "shoal" / "__init__.py").write_text(
        (source / "shoal" / "__init__.py").read_text() + "UPGRADE_MARKER = 1\n"
    )
    unit = source / "systemd" / "shoal.service"
    unit.write_text(unit.read_text().replace("TasksMax=512", "TasksMax=600"))
    second = subprocess.run(
        [*command, "--python", python], capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "keeping existing" in second.stdout
    assert 'log_level = "debug"' in (root / "etc/shoal/shoal.toml").read_text()
    assert "upgraded in place: 0.1.0 -> 0.1.0" in second.stdout
    assert "not run: systemctl try-restart shoal.service" in second.stdout
    venv_python = root / "opt/shoal/venv/bin/python"
    check = subprocess.run(
        [str(venv_python), "-I", "-c", "import shoal; print(shoal.UPGRADE_MARKER)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert check.stdout.strip() == "1", check.stderr
    assert "TasksMax=600" in (root / "etc/systemd/system/shoal.service").read_text()
