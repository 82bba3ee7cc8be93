"""Schemas of the derived tables ``metrics_1m`` and ``metrics_1h``.

One row per series, bucket (start of the minute or hour) and, for explicit
histograms, bucket bounds. The columns and the rule for cumulative data are
documented in docs/pipeline.md ("Rollups").
"""

from __future__ import annotations

import pyarrow as pa

from shoal.schema import ATTRS, UTC_US, TableSpec

ROLLUP_SCHEMA = pa.schema(
    [
        pa.field("timestamp", UTC_US, nullable=False),
        pa.field("metric_name", pa.string(), nullable=False),
        pa.field("metric_type", pa.string(), nullable=False),
        pa.field("metric_unit", pa.string()),
        pa.field("aggregation_temporality", pa.int32()),
        pa.field("is_monotonic", pa.bool_()),
        pa.field("series_id", pa.int64(), nullable=False),
        pa.field("service_name", pa.string()),
        pa.field("attributes", ATTRS, nullable=False),
        pa.field("resource_attributes", ATTRS, nullable=False),
        # raw points that fell in the bucket
        pa.field("points", pa.int64(), nullable=False),
        # gauge/sum: points; histogram/summary: observations (increase when cumulative)
        pa.field("count", pa.int64()),
        pa.field("sum", pa.float64()),
        pa.field("min", pa.float64()),
        pa.field("max", pa.float64()),
        pa.field("last", pa.float64()),
        pa.field("last_timestamp", UTC_US, nullable=False),
        # sums only: what the counter grew by in the bucket (rate = increase / width)
        pa.field("increase", pa.float64()),
        pa.field("bucket_counts", pa.list_(pa.int64())),
        pa.field("explicit_bounds", pa.list_(pa.float64())),
    ]
)

ROLLUP_WIDTHS_S: dict[str, int] = {"metrics_1m": 60, "metrics_1h": 3600}
"""Derived table name -> bucket width in seconds."""

ROLLUP_SOURCE = "metrics"


def rollup_spec(name: str) -> TableSpec:
    """The TableSpec a derived rollup table is created with."""
    if name not in ROLLUP_WIDTHS_S:
        raise ValueError(f"not a rollup table: {name}")
    return TableSpec(
        name=name,
        schema=ROLLUP_SCHEMA,
        time_column="timestamp",
        sort_columns=("metric_name", "series_id", "timestamp"),
        series_columns=("series_id",),
    )
