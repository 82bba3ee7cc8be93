"""A table's committed files as a Spark DataFrame, read in the tasks through Arrow.

Spark's own Parquet reader opens paths through Hadoop's filesystems, so a table in a
bucket would need the Hadoop S3 connector jars on every executor (docs/pipeline.md
says how to use them where they can be had). Instead the files are dealt into one
batch per Spark slot, balanced by bytes; each task reads its batch through the
table's :class:`~shoal.storage.place.Place` (pyarrow's filesystems: local disk, or
the bucket with the executor's own credentials), keeps the rows of the hours asked
for, and hands them to Spark as Arrow record batches (``mapInArrow``). Local tables
take the same path, so one code path runs on a laptop and on a cluster.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shoal.pipeline.plan import task_batches
from shoal.storage import layout
from shoal.storage.place import Place
from shoal.storage.types import ScanFile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCH_ROWS = 65_536
"""Rows per Arrow batch handed to Spark (``spark.sql.execution.arrow.maxRecordsPerBatch``)."""


def read_task(
    place: Place,
    groups: Sequence[Sequence[str]],
    schema: pa.Schema,
    time_column: str,
    hours: tuple[int, ...],
    ids: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the rows of ``hours`` of the files of each task id in ``ids``."""
    wanted = np.asarray(hours, dtype=np.int64)
    for batch in ids:
        for task in batch.column(0).to_pylist():
            for rel in groups[int(task)]:
                with place.open_input(rel) as source:
                    data = pq.read_table(source, columns=schema.names)
                data = data.select(schema.names).cast(schema)
                hour = layout.time_as_us(data.column(time_column)) // layout.HOUR_US
                keep = np.isin(hour, wanted)
                if not keep.any():
                    continue
                if not keep.all():
                    data = data.filter(pa.array(keep))
                yield from data.to_batches(max_chunksize=BATCH_ROWS)


def read_hours(
    spark: SparkSession,
    place: Place,
    files: Sequence[ScanFile],
    schema: pa.Schema,
    time_column: str,
    hours: Sequence[int],
) -> DataFrame:
    """The rows of ``files`` (columns of ``schema``) whose time lies in one of ``hours``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    spark_schema = from_arrow_schema(schema)
    wanted = sorted(set(hours))

    def needed(f: ScanFile) -> bool:  # a wanted hour within the file's time range
        at = bisect.bisect_left(wanted, layout.hour_index(f.min_time_us))
        return at < len(wanted) and wanted[at] <= layout.hour_index(f.max_time_us)

    chosen = [f for f in files if needed(f)]
    if not chosen:
        return spark.createDataFrame([], spark_schema)
    slots = spark.sparkContext.defaultParallelism
    groups = [
        [place.rel(chosen[i].path) for i in batch]
        for batch in task_batches([f.size for f in chosen], slots)
    ]
    body = functools.partial(read_task, place, groups, schema, time_column, tuple(wanted))
    return spark.range(0, len(groups), 1, len(groups)).mapInArrow(body, spark_schema)
