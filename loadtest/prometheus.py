"""A real Prometheus (Debian's ``prometheus`` binary) on a loopback port, for the PromQL
comparison test and benchmark (remote-write receiver on, no scrape targets) and as a
remote-write sender (a configuration of the caller's)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from loadtest.ingest import directory_bytes, free_port


class Prometheus:
    def __init__(
        self,
        tmp: Path,
        config: str | None = None,
        admin: bool = False,
        features: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.config = config
        """prometheus.yml's text; ``{port}`` stands for this server's own port."""
        self.admin = admin
        """Whether the admin API (TSDB snapshots) is on."""
        self.features = features
        """``--enable-feature`` names (``native-histograms``: store, scrape and send them)."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed (apt-get install prometheus)"
        config = self.tmp / "prometheus.yml"
        text = self.config or "global:\n  scrape_interval: 1h\nscrape_configs: []\n"
        config.write_text(text.replace("{port}", str(self.port)))
        log = (self.tmp / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver",
                "--storage.tsdb.retention.time=30d",
                *(["--web.enable-admin-api"] if self.admin else []),
                *([f"--enable-feature={','.join(self.features)}"] if self.features else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.tmp / "prometheus.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def snapshot_bytes(self) -> int:
        """Write the in-memory head to disk as a block (a TSDB snapshot, admin API) and
        return the snapshot's size in bytes."""
        request = urllib.request.Request(self.url + "/api/v1/admin/tsdb/snapshot", method="POST")
        with urllib.request.urlopen(request, timeout=300) as resp:
            name = json.loads(resp.read())["data"]["name"]
        return directory_bytes(self.tmp / "tsdb" / "snapshots" / name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
