"""The SparkSession every maintenance job runs in.

``local[*]`` (the default) runs the driver and executors in one JVM sized for a
small VPS; any other master URL (``spark://``, ``yarn``, ``k8s://``) works
unchanged, with the ``shoal`` package shipped to the executors as a zip
(``spark.submit.pyFiles``) because executors run shoal's Arrow writer.

Spark's own log (log4j) goes to ``<data_dir>/logs/spark.log`` at INFO, rolled at
10 MiB; only its errors reach the terminal, so a job's output is its progress and
its result.
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


LOG4J2 = """\
status = error
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 5
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{{1}}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
# PySpark's gateway counts as a shell: without a level of its own, Spark lowers the
# console to WARN and says so on stderr
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = info
"""


def log_config(config: Config) -> Path | None:
    """Write the log4j2 configuration that sends Spark's log to ``<data_dir>/logs``.

    None when that directory cannot be written: Spark then logs at its default WARN
    to the terminal."""
    logs = config.data_path.resolve() / "logs"
    path = logs / "spark-log4j2.properties"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path.write_text(LOG4J2.format(log=logs / "spark.log"))
    except OSError as exc:
        logger.warning("Spark logs to the terminal: cannot write %s (%s)", path, exc)
        return None
    return path


def spark_conf(config: Config, master: str) -> dict[str, str]:
    """The Spark properties shoal sets, as plain strings (also used by the docs)."""
    cores = _local_cores(master) if is_local_master(master) else 8
    log4j = log_config(config)
    driver_java = "-Duser.timezone=UTC"
    if log4j is not None:
        driver_java += f" -Dlog4j2.configurationFile=file:{log4j}"
    conf = {
        "spark.master": master,
        "spark.driver.memory": str(config.spark_driver_memory),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": driver_java,
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
    if not is_local_master(url):
        staging = Path(tempfile.mkdtemp(prefix="shoal-pyfiles-"))
        spark.sparkContext.addPyFile(str(package_zip(staging)))
        logger.info("shipped the shoal package to executors from %s", staging)
    return spark
