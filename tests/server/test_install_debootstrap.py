"""deploy/install.sh on a clean Debian root made with debootstrap (slow: minutes each).

Bookworm (Debian 12: Python 3.11, OpenJDK 17) and trixie (Debian 13: Python 3.13,
OpenJDK 21): the installer runs in a chroot as on a fresh host (apt, the user, the
venv from PyPI at the locked versions, Java, the units), the installed server starts
and answers, and a second run upgrades in place. systemd does not run in a chroot:
install.sh enables the units, says it started nothing, and the test starts the server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS, free_port
from tests.conftest import Track

ROOT = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
EXPECTED = {"bookworm": ("3.11", "17"), "trixie": ("3.13", "21")}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def _mirror_serves(suite: str) -> bool:
    try:
        with urllib.request.urlopen(f"{MIRROR}/dists/{suite}/Release", timeout=20) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture
def debian_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    suite: str = request.param
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("needs root and debootstrap (apt-get install debootstrap)")
    if not _mirror_serves(suite):
        pytest.skip(f"the Debian mirror does not serve {suite} here")
    root = tmp_path / suite
    done = subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=systemd", suite, str(root), MIRROR],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    # the host's own certificate authorities (a TLS proxy on some networks), which the
    # chroot's ca-certificates adds when install.sh installs it
    local_cas = Path("/usr/local/share/ca-certificates")
    if local_cas.is_dir():
        shutil.copytree(local_cas, root / "usr/local/share/ca-certificates", dirs_exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")]).returncode == 0
    try:
        yield root
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(root / "proc")], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _copy_source(dest: Path) -> None:
    for name in ("shoal", "systemd", "deploy", "docs"):
        # built extensions stay behind: the install builds its own for the chroot's Python
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    for name in ("pyproject.toml", "setup.py", "README.md", "requirements.lock"):
        shutil.copy(ROOT / name, dest / name)


def _chroot(root: Path, *command: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        # pip trusts the system store (with the host's CAs), not only its own bundle
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
    }
    return subprocess.run(
        ["chroot", str(root), *command], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.parametrize("debian_root", sorted(EXPECTED), indirect=True)
def test_install_on_a_clean_debian_root(debian_root: Path, children: Track) -> None:
    root = debian_root
    suite = root.name
    python_version, java_version = EXPECTED[suite]
    _copy_source(root / "src" / "shoal")

    first = _chroot(root, "bash", "/src/shoal/deploy/install.sh")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "shoal 0.1.0 installed in /opt/shoal/venv" in first.stdout
    # the installer brought a C compiler and the headers: both scanners are built
    assert "= the scanners in C are built" in first.stdout, first.stderr[-4000:]
    scanners = _chroot(
        root,
        "/opt/shoal/venv/bin/python",
        "-c",
        "from shoal.otlp import scanned; from shoal.promwrite import cached;"
        " print(scanned.SCAN_METRICS is not None, cached.SCAN_V1 is not None)",
    )
    assert scanners.stdout.split() == ["True", "True"], scanners.stdout + scanners.stderr
    assert "--role ingest,query" in first.stdout
    version = _chroot(root, "/opt/shoal/venv/bin/python", "-c", "import sys; print(sys.version)")
    assert version.stdout.startswith(python_version), version.stdout
    java = _chroot(root, "java", "-version")
    assert f'version "{java_version}.' in java.stderr, java.stderr
    assert (root / "etc/systemd/system/multi-user.target.wants/shoal.service").is_symlink()
    assert (root / "etc/systemd/system/timers.target.wants/shoal-compact.timer").is_symlink()

    # the installed server, as the unit runs it (user shoal, /etc/shoal, /var/lib/shoal)
    http, grpc = free_port(), free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "SHOAL_DATA_DIR": "/var/lib/shoal",
        "SHOAL_HTTP_PORT": str(http),
        "SHOAL_GRPC_PORT": str(grpc),
    }
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    command = [chroot, "--userspec=shoal:shoal", str(root), "/opt/shoal/venv/bin/shoal"]
    log_path = root.parent / f"{suite}-server.log"
    with log_path.open("wb") as log:
        server = children(
            subprocess.Popen(
                [*command, "serve", "--config", "/etc/shoal/shoal.toml"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    url = f"http://127.0.0.1:{http}"
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, log_path.read_text()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                break
        assert time.monotonic() < deadline, "the installed server did not get ready"
        time.sleep(0.5)
    body = payloads.logs_request(records=7, series=1, start_ns=BASE_NS).SerializeToString()
    sent = httpx.post(
        url + "/v1/logs", content=body, headers={"Content-Type": "application/x-protobuf"}
    )
    assert sent.status_code == 200
    answer = httpx.post(url + "/api/v1/sql", content="SELECT count(*) AS n FROM logs")
    assert answer.json()["rows"] == [[7]], answer.text
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0

    # a second run from a newer tree upgrades in place, keeping the config
    (root / "etc/shoal/shoal.toml").write_text(
        (root / "etc/shoal/shoal.toml").read_text() + 'log_level = "warning"\n'
    )
    init = root / "src/shoal/shoal/__init__.py"
    init.write_text(init.read_text() + "UPGRADE_MARKER = 1\n")
    second = _chroot(root, "bash", "/src/shoal/deploy/install.sh")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert "upgraded in place: 0.1.0 -> 0.1.0" in second.stdout
    # systemd does not run in a chroot: enabled, not (re)started
    assert "systemd is not running here, not run: systemctl try-restart" in second.stdout
    marker = _chroot(
        root, "/opt/shoal/venv/bin/python", "-c", "import shoal; print(shoal.UPGRADE_MARKER)"
    )
    assert marker.stdout.strip() == "1", marker.stderr
    assert 'log_level = "warning"' in (root / "etc/shoal/shoal.toml").read_text()
