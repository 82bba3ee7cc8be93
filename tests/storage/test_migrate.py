"""``shoal storage migrate``: local tables to a bucket and back, resumable, verified."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from shoal.storage.location import StorageLocation
from shoal.storage.store import TableStore

from .helpers import random_logs


def _cli(*args: str, data: Path, url: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOAL_DATA_DIR": str(data), "SHOAL_STORAGE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli", "storage", "migrate", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_migrate_to_a_bucket_resumes_verifies_and_comes_back(tmp_path: Path, s3_url: str) -> None:
    data = tmp_path / "data"
    store = TableStore(data)
    rng = random.Random(9)
    for tenant in ("acme", "beta"):
        table = store.open(tenant, "logs")
        for lsn in range(1, 4):
            table.flush(random_logs(rng, 30, first_id=lsn * 100, hours=2), lsn)
    local = StorageLocation.local(data / "tenants")
    bucket = StorageLocation.parse(s3_url, data)
    # an earlier run stopped half way: one data file already there, resumed, not redone
    some = next(p for p in (data / "tenants" / "acme" / "logs").rglob("*.parquet"))
    rel = some.relative_to(data / "tenants").as_posix()
    with bucket.filesystem.open_output_stream(bucket.join(rel)) as out:
        out.write(some.read_bytes())
    done = _cli("--to", s3_url, data=data)
    assert done.returncode == 0, done.stderr
    assert "acme/logs: verified" in done.stdout and "beta/logs: verified" in done.stdout
    assert "2 verified" in done.stdout
    total = sum(1 for p in (data / "tenants").glob("*/logs/**/*") if p.is_file())
    assert f"{total - 1} file(s)" in done.stdout  # the one already there was not copied
    assert (data / "tenants").is_dir()  # kept without --remove-old
    # the copy is the same table, for delta-rs and for shoal
    remote = TableStore(data, location=bucket).open("acme", "logs")
    assert remote.committed_lsn() == 3
    assert remote.snapshot().rows == 90
    again = _cli("--to", s3_url, data=data)  # nothing left to copy
    assert again.returncode == 0 and "0 file(s)" in again.stdout
    # and back, removing the bucket's copy only after it verified
    back = tmp_path / "back"
    home = _cli("--to", f"file://{back}", "--remove-old", data=data, url=s3_url)
    assert home.returncode == 0, home.stderr
    assert "removed the old copy" in home.stdout
    assert DeltaTable(str(back / "beta" / "logs")).to_pyarrow_table().num_rows == 90
    gone = TableStore(data, location=bucket)
    assert gone.tables("acme") == [] and gone.tables("beta") == []
    assert local.root != str(back)


def test_a_copy_that_does_not_verify_keeps_the_old_one(tmp_path: Path, s3_url: str) -> None:
    data = tmp_path / "data"
    TableStore(data).open("acme", "logs").flush(random_logs(random.Random(1), 10, 0, 1), 1)
    bucket = StorageLocation.parse(s3_url, data)
    # the target holds a different table under the same name: versions differ
    other = TableStore(tmp_path / "x", location=bucket).open("acme", "logs")
    for lsn in range(1, 4):
        other.flush(random_logs(random.Random(lsn), 10, lsn * 10, 1), lsn)
    done = _cli("--to", s3_url, "--remove-old", data=data)
    assert done.returncode == 1
    assert "NOT verified" in done.stdout
    assert (data / "tenants" / "acme" / "logs" / "_delta_log").is_dir()
