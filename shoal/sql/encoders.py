"""Result encoders: JSON, CSV, NDJSON and the Arrow IPC stream.

Each encoder turns a stream of record batches into a stream of byte chunks,
so large results are never held whole. Conventions shared by the text
formats:

* timestamps are ISO 8601 at the column's precision (``2026-01-05T10:00:00.123456Z``;
  ``Z`` for UTC, ``+hh:mm`` for another zone, no suffix for zone-less);
* dates ISO 8601; decimals as strings (exact); binary as base64;
* NaN and infinities as null (JSON has no spelling for them);
* maps as JSON objects, lists as arrays, structs as objects (in CSV, nested
  values are JSON text in the cell).

When the row cap cuts a result, JSON carries ``"truncated": true`` and a
``"message"``; NDJSON ends with one ``{"truncated": true, "message": ...}``
line; the Arrow stream ends with an empty batch whose custom metadata holds
``shoal.truncated``; CSV has no in-band marker (the HTTP headers carry it when
known before the first byte).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import io
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

FORMATS: dict[str, str] = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "ndjson": "application/x-ndjson",
    "arrow": "application/vnd.apache.arrow.stream",
}

TRUNCATED_KEY = b"shoal.truncated"


@dataclasses.dataclass
class StreamStatus:
    """Filled in by the producer as the stream ends: truncation and a late error."""

    truncated_message: str | None = None
    error: str | None = None


# -- values -------------------------------------------------------------------


def _iso_offset(text: str) -> str:
    # %z renders +0200; ISO 8601 extended format wants +02:00.
    if len(text) >= 5 and text[-5] in "+-" and text[-4:].isdigit():
        return text[:-2] + ":" + text[-2:]
    return text


def _timestamp_strings(arr: pa.Array) -> list[str | None]:
    tz = arr.type.tz
    if tz is None:
        out: list[str | None] = pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S").to_pylist()
        return out
    if tz.upper() in {"UTC", "Z", "+00:00", "ETC/UTC"}:
        return [
            None if s is None else s + "Z"
            for s in pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S").to_pylist()
        ]
    return [
        None if s is None else _iso_offset(s)
        for s in pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S%z").to_pylist()
    ]


def _plain(value: Any) -> Any:
    """A Python value from ``to_pylist`` as something ``json.dumps`` writes faithfully."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and value.utcoffset() == dt.timedelta(0):
            return value.replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            # a map renders as a list of (key, value) pairs
            return {str(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    return str(value)


def column_values(arr: pa.Array) -> list[Any]:
    """One column as JSON-ready Python values."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return _timestamp_strings(arr)
    if pa.types.is_date(t):
        return pc.strftime(arr, format="%Y-%m-%d").to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_string(t):
        return arr.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return arr.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_map(t):
        return [None if v is None else {str(k): _plain(x) for k, x in v} for v in arr.to_pylist()]
    return [_plain(v) for v in arr.to_pylist()]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def type_name(t: pa.DataType) -> str:
    return str(t)


# -- encoders -------------------------------------------------------------------


async def encode_json(
    schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch], status: StreamStatus
) -> AsyncIterator[bytes]:
    columns = [{"name": f.name, "type": type_name(f.type)} for f in schema]
    yield ('{"columns":' + _dumps(columns) + ',"rows":[').encode()
    first = True
    count = 0
    async for batch in batches:
        cols = [column_values(c) for c in batch.columns]
        rows = [_dumps(list(r)) for r in zip(*cols, strict=True)]
        if not rows:
            continue
        chunk = ",\n".join(rows)
        yield (chunk if first else ",\n" + chunk).encode()
        first = False
        count += len(rows)
    tail: dict[str, Any] = {
        "row_count": count,
        "truncated": status.truncated_message is not None,
        "message": status.truncated_message,
    }
    if status.error is not None:
        tail["error"] = status.error
    yield ("]," + _dumps(tail)[1:]).encode()


async def encode_ndjson(
    schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch], status: StreamStatus
) -> AsyncIterator[bytes]:
    names = schema.names
    async for batch in batches:
        cols = [column_values(c) for c in batch.columns]
        lines = [_dumps(dict(zip(names, r, strict=True))) for r in zip(*cols, strict=True)]
        if lines:
            yield ("\n".join(lines) + "\n").encode()
    if status.error is not None:
        yield (_dumps({"error": status.error}) + "\n").encode()
    elif status.truncated_message is not None:
        yield (_dumps({"truncated": True, "message": status.truncated_message}) + "\n").encode()


def _csv_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    arrays: list[pa.Array] = []
    for col in batch.columns:
        t = col.type
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            arrays.append(pa.array(column_values(col), pa.string()))
        elif pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            values = column_values(col)
            arrays.append(
                pa.array(
                    [
                        None if v is None else (v if isinstance(v, str) else _dumps(v))
                        for v in values
                    ],
                    pa.string(),
                )
            )
        else:
            arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


async def encode_csv(
    schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch], status: StreamStatus
) -> AsyncIterator[bytes]:
    header = io.StringIO()
    header.write(",".join(_csv_name(n) for n in schema.names) + "\n")
    yield header.getvalue().encode()
    options = pacsv.WriteOptions(include_header=False)
    async for batch in batches:
        if not batch.num_rows:
            continue
        sink = io.BytesIO()
        pacsv.write_csv(_csv_batch(batch), sink, write_options=options)
        yield sink.getvalue()


def _csv_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def encode_arrow(
    schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch], status: StreamStatus
) -> AsyncIterator[bytes]:
    sink = io.BytesIO()
    writer = pa.ipc.new_stream(sink, schema)

    def drain() -> bytes:
        data = sink.getvalue()
        sink.seek(0)
        sink.truncate()
        return data

    yield drain()
    async for batch in batches:
        writer.write_batch(batch)
        yield drain()
    note = status.error or status.truncated_message
    if note is not None:
        key = b"shoal.error" if status.error is not None else TRUNCATED_KEY
        writer.write_batch(
            pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={key: note.encode()}
        )
    writer.close()
    yield drain()


Encoder = Callable[[pa.Schema, AsyncIterator[pa.RecordBatch], StreamStatus], AsyncIterator[bytes]]

ENCODERS: dict[str, Encoder] = {
    "json": encode_json,
    "csv": encode_csv,
    "ndjson": encode_ndjson,
    "arrow": encode_arrow,
}
