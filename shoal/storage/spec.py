"""A table's spec kept in its Delta configuration, so reopening needs no spec."""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pyarrow as pa

from shoal.errors import StorageError
from shoal.schema import SIGNAL_TABLES, TableSpec

KEY_TIME = "shoal.timeColumn"
KEY_SORT = "shoal.sortColumns"
KEY_SERIES = "shoal.seriesColumns"
KEY_BUCKET = "shoal.coverageBucketSeconds"
KEY_SCHEMA = "shoal.arrowSchema"


def to_configuration(spec: TableSpec, bucket_s: int) -> dict[str, str | None]:
    return {
        KEY_TIME: spec.time_column,
        KEY_SORT: ",".join(spec.sort_columns),
        KEY_SERIES: ",".join(spec.series_columns),
        KEY_BUCKET: str(bucket_s),
        KEY_SCHEMA: base64.b64encode(spec.schema.serialize().to_pybytes()).decode(),
    }


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(part for part in (text or "").split(",") if part)


def from_configuration(name: str, config: Mapping[str, str | None]) -> tuple[TableSpec, int]:
    """The spec and coverage bucket width stored with a table."""
    if name in SIGNAL_TABLES:
        spec = SIGNAL_TABLES[name]
    else:
        raw = config.get(KEY_SCHEMA)
        time_column = config.get(KEY_TIME)
        if not raw or not time_column:
            raise StorageError(f"{name}: table has no shoal spec in its Delta configuration")
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw)))
        spec = TableSpec(
            name=name,
            schema=schema,
            time_column=time_column,
            sort_columns=_split(config.get(KEY_SORT)) or (time_column,),
            series_columns=_split(config.get(KEY_SERIES)),
        )
    bucket = config.get(KEY_BUCKET)
    return spec, int(bucket) if bucket else 60


def validate(spec: TableSpec) -> None:
    """Check a spec before a table is created from it."""
    names = spec.schema.names
    if spec.time_column not in names:
        raise StorageError(f"{spec.name}: time column {spec.time_column!r} is not in the schema")
    typ = spec.schema.field(spec.time_column).type
    if typ != pa.timestamp("us", tz="UTC"):
        raise StorageError(
            f"{spec.name}: time column {spec.time_column!r} must be timestamp[us, tz=UTC], "
            f"not {typ}"
        )
    for col in (*spec.sort_columns, *spec.series_columns):
        if col not in names:
            raise StorageError(f"{spec.name}: column {col!r} is not in the schema")
    if len(spec.series_columns) > 1:
        raise StorageError(f"{spec.name}: at most one series column is supported")


def schema_differences(actual: pa.Schema, expected: pa.Schema) -> list[str]:
    """Human-readable differences between a data schema and a table schema (empty: equal)."""
    diffs: list[str] = []
    actual_fields = {f.name: f for f in actual}
    for field in expected:
        got = actual_fields.get(field.name)
        if got is None:
            diffs.append(f"missing column {field.name!r} ({field.type})")
        elif not got.type.equals(field.type):
            diffs.append(f"column {field.name!r} is {got.type}, table has {field.type}")
        elif got.nullable and not field.nullable and got.type == field.type:
            diffs.append(f"column {field.name!r} is nullable, table requires values")
    expected_names = set(expected.names)
    diffs.extend(f"unexpected column {n!r}" for n in actual.names if n not in expected_names)
    if not diffs and actual.names != expected.names:
        diffs.append("columns are in a different order")
    return diffs
