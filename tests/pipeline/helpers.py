"""Running the ``shoal`` CLI as a child process (crash and cluster tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shoal_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "shoal.cli", *args]


def child_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SHOAL_DATA_DIR=str(data_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in its own process group (so its JVM can be killed with it)."""
    out = open(log, "ab")  # the child keeps it open; closed when it exits
    return subprocess.Popen(
        args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child and everything it started (the Spark JVM, Python workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
