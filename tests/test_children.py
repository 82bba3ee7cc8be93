"""Processes a test starts are stopped by its fixtures even when the test fails first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import subprocess
import sys
from pathlib import Path

from loadtest.ingest import ServerProcess
from tests.conftest import children  # noqa: F401  (the fixture under test)


def test_fails_before_its_own_cleanup(children, tmp_path):
    sleeper = children(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
    server = ServerProcess(tmp_path / "data", log_path=tmp_path / "server.log")
    server.start(wait=False)
    children(server.proc)
    server.wait_ready()
    Path({pids!r}).write_text(f"{{sleeper.pid}} {{server.proc.pid}}")
    raise AssertionError("failing with two children running")
"""


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_children_of_a_failed_test_are_stopped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER.format(pids=str(pids)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(inner), "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-o", "addopts=", "-W", "error"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failing with two children running" in done.stdout
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    assert not any(_alive(pid) for pid in started)


def test_no_test_names_a_virtualenv_path() -> None:
    """Tests run with the interpreter running them (sys.executable), whatever its venv."""
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "loadtest")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__) and ".venv/bin" in path.read_text()
    ]
    assert offenders == []
