"""Shared fixtures of the pipeline tests: one SparkSession per module, tables in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from shoal import config as config_mod
from shoal.storage.store import TableStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# 2026-11-20T00:00:00Z
T0_US = 1_795_132_800_000_000
HOUR_US = 3_600_000_000


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[SparkSession]:
    """A local Spark session. Its JVM, started once per process and kept by PySpark across
    sessions, passes its environment to every Python task it forks; the S3 server's AWS
    variables are set first, so tasks of a test on the bucket sign their requests."""
    from shoal.pipeline.session import create_session

    logs = tmp_path_factory.mktemp("spark")  # Spark's own log goes to <data_dir>/logs
    cfg = config_mod.default().replace(data_dir=str(logs))
    session = create_session(cfg, "local[2]", app_name="shoal-tests")
    yield session
    session.stop()


@pytest.fixture()
def cfg(tmp_path: Path) -> config_mod.Config:
    return config_mod.default().replace(data_dir=str(tmp_path / "data"))


@pytest.fixture()
def store(cfg: config_mod.Config) -> TableStore:
    return TableStore(Path(cfg.data_dir))


def rows_multiset(table: pa.Table) -> list[str]:
    """Every row as canonical text, sorted: equal lists mean equal multisets of rows."""
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


def delta_rows(path: Path | str, columns: list[str] | None = None) -> pa.Table:
    """The table's rows as delta-rs (an independent reader) sees them."""
    return DeltaTable(str(path)).to_pyarrow_table(columns=columns)


def datafusion_answers(paths: list[str], queries: list[str]) -> list[Any]:
    """Run queries with DataFusion over an explicit file list registered as table ``m``."""
    from datafusion import SessionContext

    ctx = SessionContext()
    names = []
    for i, p in enumerate(paths):
        ctx.register_parquet(f"f{i}", p)
        names.append(f"SELECT * FROM f{i}")
    ctx.sql(f"CREATE VIEW m AS {' UNION ALL '.join(names)}")
    return [_rounded(ctx.sql(q).to_arrow_table().to_pylist()) for q in queries]


def _rounded(value: Any) -> Any:
    """Floats to 12 significant digits: sums of doubles depend on the order they are added."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value
