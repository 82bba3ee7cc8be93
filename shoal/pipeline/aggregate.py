"""The rollup aggregation, in Spark SQL.

Two steps. :func:`with_increments` gives every raw point its *increment*: what
it adds to its series since the previous point, so that cumulative data can be
summed over any window without double counting (the rule is in the module's
constants and in docs/pipeline.md). :func:`rollup` then groups points by
series and bucket: count, sum, min, max, last, the increase of sums, and
explicit-histogram buckets merged element-wise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.pipeline.schema import ROLLUP_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LOOKBACK_S = 3600
"""How far back the previous point of a cumulative series is looked for.

A rollup run over hours [a, b) reads raw data from a - LOOKBACK_S, so a point's
increment never depends on which run computed it.
"""

DELTA = 1
CUMULATIVE = 2
_HIST_TYPES = "('histogram', 'exponential_histogram', 'summary')"


def with_increments(raw: DataFrame) -> DataFrame:
    """Add ``inc_value``, ``inc_count``, ``inc_sum`` and ``inc_buckets`` to raw metric rows.

    * gauge: no increment (``inc_value`` null).
    * delta temporality: the point's own value, count, sum and buckets.
    * cumulative temporality, against the series' previous point no more than
      LOOKBACK_S earlier: the difference; on a reset (start time changed, or a
      monotonic value / a histogram count went down) the point's own values,
      which count from the new start; with no previous point in the lookback,
      the point's own values when the series started within the lookback, else
      zero (its baseline is unknown).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lookback_ns = LOOKBACK_S * 1_000_000_000
    order = ["time_unix_nano", "start_time_unix_nano", "value", "count", "sum"]
    w = Window.partitionBy("series_id").orderBy(*order)
    df = raw.select(
        "*",
        F.lag("time_unix_nano").over(w).alias("_p_time"),
        F.lag("start_time_unix_nano").over(w).alias("_p_start"),
        F.lag("value").over(w).alias("_p_value"),
        F.lag("count").over(w).alias("_p_count"),
        F.lag("sum").over(w).alias("_p_sum"),
        F.lag("bucket_counts").over(w).alias("_p_buckets"),
        F.lag("explicit_bounds").over(w).alias("_p_bounds"),
    )
    df = df.withColumn(
        "_state",
        F.expr(
            f"""
            CASE
              WHEN aggregation_temporality IS NULL OR aggregation_temporality != {CUMULATIVE}
                THEN 'own'
              WHEN _p_time IS NULL OR time_unix_nano - _p_time > {lookback_ns}
                THEN CASE WHEN start_time_unix_nano > 0
                           AND start_time_unix_nano >= time_unix_nano - {lookback_ns}
                          THEN 'own' ELSE 'zero' END
              WHEN start_time_unix_nano != _p_start THEN 'own'
              WHEN metric_type = 'sum' AND is_monotonic AND value < _p_value THEN 'own'
              WHEN metric_type IN {_HIST_TYPES} AND count < _p_count THEN 'own'
              WHEN metric_type = 'histogram'
                   AND (size(bucket_counts) != size(_p_buckets)
                        OR NOT (explicit_bounds <=> _p_bounds)) THEN 'own'
              ELSE 'diff'
            END
            """
        ),
    )
    return df.selectExpr(
        "*",
        """CASE WHEN metric_type != 'sum' THEN NULL
                WHEN _state = 'own' THEN value
                WHEN _state = 'zero' THEN 0D
                ELSE value - _p_value END AS inc_value""",
        """CASE WHEN metric_type NOT IN ('histogram', 'exponential_histogram', 'summary')
                  THEN NULL
                WHEN _state = 'own' THEN count
                WHEN _state = 'zero' THEN 0L
                ELSE count - _p_count END AS inc_count""",
        """CASE WHEN metric_type NOT IN ('histogram', 'exponential_histogram', 'summary')
                  THEN NULL
                WHEN _state = 'own' THEN sum
                WHEN _state = 'zero' THEN 0D
                ELSE sum - _p_sum END AS inc_sum""",
        """CASE WHEN metric_type != 'histogram' OR bucket_counts IS NULL THEN NULL
                WHEN _state = 'own' THEN bucket_counts
                WHEN _state = 'zero' THEN transform(bucket_counts, x -> 0L)
                ELSE zip_with(bucket_counts, _p_buckets, (a, b) -> a - b) END AS inc_buckets""",
    ).drop("_p_time", "_p_start", "_p_value", "_p_count", "_p_sum", "_p_buckets", "_p_bounds")


def rollup(points: DataFrame, width_s: int) -> DataFrame:
    """Aggregate points (from :func:`with_increments`) into buckets of ``width_s`` seconds.

    The result has exactly the columns of ``ROLLUP_SCHEMA`` in its order.
    """
    from pyspark.sql import functions as F

    width_us = width_s * 1_000_000
    is_value = "metric_type IN ('gauge', 'sum')"
    bucketed = points.withColumn(
        "_bucket",
        F.expr(f"timestamp_micros(floor(unix_micros(timestamp) / {width_us}) * {width_us})"),
    ).withColumn("_bounds", F.expr("CASE WHEN metric_type = 'histogram' THEN explicit_bounds END"))
    last = "struct(time_unix_nano, start_time_unix_nano, value, count, sum)"
    grouped = bucketed.groupBy("series_id", "_bucket", "_bounds").agg(
        F.expr(f"max_by(metric_name, {last})").alias("metric_name"),
        F.expr(f"max_by(metric_type, {last})").alias("metric_type"),
        F.expr(f"max_by(metric_unit, {last})").alias("metric_unit"),
        F.expr(f"max_by(aggregation_temporality, {last})").alias("aggregation_temporality"),
        F.expr(f"max_by(is_monotonic, {last})").alias("is_monotonic"),
        F.expr(f"max_by(service_name, {last})").alias("service_name"),
        F.expr(f"max_by(attributes, {last})").alias("attributes"),
        F.expr(f"max_by(resource_attributes, {last})").alias("resource_attributes"),
        F.count(F.lit(1)).alias("points"),
        F.expr(f"sum(CASE WHEN {is_value} THEN 1L ELSE inc_count END)").alias("count"),
        F.expr(f"sum(CASE WHEN {is_value} THEN value ELSE inc_sum END)").alias("sum"),
        F.expr(f"min(CASE WHEN {is_value} THEN value ELSE min END)").alias("min"),
        F.expr(f"max(CASE WHEN {is_value} THEN value ELSE max END)").alias("max"),
        F.expr(f"max_by(CASE WHEN {is_value} THEN value END, {last})").alias("last"),
        F.max("timestamp").alias("last_timestamp"),
        F.sum("inc_value").alias("increase"),
        F.expr(
            "aggregate(collect_list(inc_buckets), CAST(array() AS array<bigint>),"
            " (acc, x) -> zip_with(acc, x, (a, b) -> coalesce(a, 0L) + coalesce(b, 0L)))"
        ).alias("_merged"),
    )
    out = grouped.selectExpr(
        "_bucket AS timestamp",
        "*",
        "CASE WHEN metric_type = 'histogram' THEN _merged END AS bucket_counts",
        "_bounds AS explicit_bounds",
    )
    return out.select(*ROLLUP_SCHEMA.names)
