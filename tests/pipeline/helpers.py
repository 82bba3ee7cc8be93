"""Running the ``shoal`` CLI as a child process (crash and cluster tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def spark_class() -> str:
    """pyspark's own ``bin/spark-class`` (the pip-installed jars, no Spark install)."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_free(port):
            return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def start_master(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A standalone master on loopback; its process and URL."""
    port = 7077 if port_free(7077) else free_port()
    args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    master = start([spark_class(), *args, "--webui-port", str(free_port())], env, log)
    try:
        wait_for_port(port, 60)
    except BaseException:
        kill_group(master)
        raise
    return master, f"spark://127.0.0.1:{port}"


def worker_args(url: str, cores: int, memory: str, work_dir: Path) -> list[str]:
    """The command line of a standalone worker with its own working directory."""
    return [
        spark_class(),
        "org.apache.spark.deploy.worker.Worker",
        url,
        "--host",
        "127.0.0.1",
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        str(work_dir),
        "--webui-port",
        str(free_port()),
    ]
