"""Synthetic rows with the frozen schemas, built directly as Arrow."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa

from shoal.schema import LOGS_SCHEMA, METRICS_SCHEMA

BASE = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
BASE_US = int(BASE.timestamp()) * 1_000_000


def _empty_maps(n: int) -> pa.Array:
    return pa.array([[] for _ in range(n)], pa.map_(pa.string(), pa.string()))


def logs_table(times_us: list[int], services: list[str | None], first_id: int = 0) -> pa.Table:
    """Log rows; ``body`` holds a unique id so readers can check exactly-once."""
    n = len(times_us)
    cols: dict[str, pa.Array] = {}
    for field in LOGS_SCHEMA:
        name = field.name
        if name == "timestamp":
            cols[name] = pa.array(times_us, pa.int64()).cast(field.type)
        elif name == "time_unix_nano":
            cols[name] = pa.array([t * 1000 for t in times_us], pa.int64())
        elif name == "body":
            cols[name] = pa.array([f"row-{first_id + i}" for i in range(n)], pa.string())
        elif name == "service_name":
            cols[name] = pa.array(services, pa.string())
        elif name == "severity_number":
            cols[name] = pa.array([9] * n, pa.int32())
        elif pa.types.is_map(field.type):
            cols[name] = _empty_maps(n)
        elif not field.nullable:
            cols[name] = pa.array([0] * n, field.type)
        else:
            cols[name] = pa.nulls(n, field.type)
    return pa.table(cols, schema=LOGS_SCHEMA)


def random_logs(rng: random.Random, n: int, first_id: int = 0, hours: int = 3) -> pa.Table:
    times = [BASE_US + rng.randrange(hours * 3_600_000_000) for _ in range(n)]
    services = [rng.choice(["api", "web", "db", None]) for _ in range(n)]
    return logs_table(times, services, first_id)


def metrics_table(times_us: list[int], series: list[int], names: list[str]) -> pa.Table:
    n = len(times_us)
    cols: dict[str, pa.Array] = {}
    for field in METRICS_SCHEMA:
        name = field.name
        if name == "timestamp":
            cols[name] = pa.array(times_us, pa.int64()).cast(field.type)
        elif name == "series_id":
            cols[name] = pa.array(series, pa.int64())
        elif name == "time_unix_nano":
            cols[name] = pa.array([t * 1000 for t in times_us], pa.int64())
        elif name == "metric_name":
            cols[name] = pa.array(names, pa.string())
        elif name == "metric_type":
            cols[name] = pa.array(["gauge"] * n, pa.string())
        elif name == "value":
            cols[name] = pa.array([float(i) for i in range(n)], pa.float64())
        elif pa.types.is_map(field.type):
            cols[name] = _empty_maps(n)
        elif not field.nullable:
            cols[name] = pa.array([0] * n, field.type)
        else:
            cols[name] = pa.nulls(n, field.type)
    return pa.table(cols, schema=METRICS_SCHEMA)
