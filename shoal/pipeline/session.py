"""The SparkSession every maintenance job runs in.

``local[*]`` (the default) runs the driver and executors in one JVM sized for a
small VPS; any other master URL (``spark://``, ``yarn``, ``k8s://``) works
unchanged, with the ``shoal`` package shipped to the executors as a zip
(``spark.submit.pyFiles``) because executors run shoal's Arrow writer.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from shoal.config import Config

logger = logging.getLogger(__name__)

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def is_local_master(master: str) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]`` and ``local[N,F]``."""
    return master == "local" or master.startswith("local[")


def package_zip(dest_dir: Path) -> Path:
    """Zip the ``shoal`` package (Python sources only) for shipping to executors."""
    dest = dest_dir / "shoal.zip"
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(_PACKAGE_DIR.rglob("*")):
            if (
                path.is_file()
                and path.suffix in {".py", ".typed"}
                and "__pycache__" not in path.parts
            ):
                zf.write(path, Path("shoal") / path.relative_to(_PACKAGE_DIR))
    return dest


def _local_cores(master: str) -> int:
    inside = master[len("local[") : -1] if master.startswith("local[") else "1"
    first = inside.split(",", 1)[0]
    return (os.cpu_count() or 1) if first == "*" else max(1, int(first))


def spark_conf(config: Config, master: str) -> dict[str, str]:
    """The Spark properties shoal sets, as plain strings (also used by the docs)."""
    cores = _local_cores(master) if is_local_master(master) else 8
    conf = {
        "spark.master": master,
        "spark.driver.memory": str(config.spark_driver_memory),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.default.parallelism": str(max(2, 2 * cores)),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.sql.sources.ignoreMissingFiles": "false",
        "spark.python.worker.reuse": "true",
    }
    # Executors run shoal's Arrow writer, so they need a Python with pyarrow:
    # this interpreter unless PYSPARK_PYTHON names another.
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    conf["spark.pyspark.python"] = python
    conf["spark.pyspark.driver.python"] = sys.executable
    if is_local_master(master):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def create_session(
    config: Config, master: str | None = None, app_name: str = "shoal"
) -> SparkSession:
    """Start (or reuse) a SparkSession for a maintenance job.

    ``master`` defaults to the ``spark_master`` setting. On a non-local master the
    ``shoal`` package is zipped and added with ``addPyFile`` so executors can
    import it; the Python interpreter on the executors must have pyarrow.
    """
    from pyspark.sql import SparkSession

    url = master or str(config.spark_master)
    # pyspark picks the executors' interpreter from this variable only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if is_local_master(url):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(config, url).items():
        builder = builder.config(key, value)
    logger.info("starting Spark (master %s, driver memory %s)", url, config.spark_driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not is_local_master(url):
        staging = Path(tempfile.mkdtemp(prefix="shoal-pyfiles-"))
        spark.sparkContext.addPyFile(str(package_zip(staging)))
        logger.info("shipped the shoal package to executors from %s", staging)
    return spark
