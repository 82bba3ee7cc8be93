"""Arrow columns as PostgreSQL values, text and binary, and PostgreSQL parameters as SQL.

Each Arrow type of a result maps to one PostgreSQL type (:func:`pg_type`);
:func:`column_encoder` turns a whole column into the wire values of a
``DataRow`` (``None`` for SQL NULL) in text (format 0) or binary (format 1).
Maps, structs and lists of anything but scalars are ``json``; lists of
scalars are PostgreSQL arrays; timestamps with a zone are ``timestamptz`` in
UTC. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import math
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shoal.text import double_text

# PostgreSQL type OIDs (src/include/catalog/pg_type.dat)
BOOL, BYTEA, INT8, INT2, INT4, TEXT, JSON = 16, 17, 20, 21, 23, 25, 114
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR, NAME, OID, CHAR = 700, 701, 705, 1043, 1042, 19, 26, 18
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC = 1082, 1083, 1114, 1184, 1186, 1700
UUID, JSONB = 2950, 3802

ARRAY_OF = {
    BOOL: 1000,
    INT2: 1005,
    INT4: 1007,
    INT8: 1016,
    TEXT: 1009,
    FLOAT4: 1021,
    FLOAT8: 1022,
    NUMERIC: 1231,
    TIMESTAMP: 1115,
    TIMESTAMPTZ: 1185,
    DATE: 1182,
    BYTEA: 1001,
}

TYPE_NAMES = {
    BOOL: "bool",
    BYTEA: "bytea",
    INT8: "int8",
    INT2: "int2",
    INT4: "int4",
    TEXT: "text",
    JSON: "json",
    FLOAT4: "float4",
    FLOAT8: "float8",
    DATE: "date",
    TIME: "time",
    TIMESTAMP: "timestamp",
    TIMESTAMPTZ: "timestamptz",
    INTERVAL: "interval",
    NUMERIC: "numeric",
    JSONB: "jsonb",
    VARCHAR: "varchar",
    NAME: "name",
    OID: "oid",
    CHAR: "char",
    UUID: "uuid",
}

SIZES = {BOOL: 1, INT2: 2, INT4: 4, INT8: 8, FLOAT4: 4, FLOAT8: 8, DATE: 4, TIME: 8}
SIZES |= {TIMESTAMP: 8, TIMESTAMPTZ: 8, INTERVAL: 16, OID: 4, CHAR: 1, NAME: 64}

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
PG_EPOCH_DATE = dt.date(2000, 1, 1)
_UNIX_TO_PG_US = 946_684_800_000_000


@dataclasses.dataclass(frozen=True)
class PgType:
    oid: int
    size: int

    @property
    def name(self) -> str:
        return TYPE_NAMES.get(self.oid, "text")


def _scalar_oid(t: pa.DataType) -> int | None:
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return INT2
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return INT4
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return INT8
    if pa.types.is_uint64(t) or pa.types.is_decimal(t):
        return NUMERIC
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return FLOAT4
    if pa.types.is_float64(t):
        return FLOAT8
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return TEXT
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return BYTEA
    if pa.types.is_timestamp(t):
        return TIMESTAMPTZ if t.tz is not None else TIMESTAMP
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_time(t):
        return TIME
    if pa.types.is_duration(t) or pa.types.is_interval(t):
        return INTERVAL
    if pa.types.is_null(t):
        return TEXT
    return None


def _is_list(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
    )


def pg_type(t: pa.DataType) -> PgType:
    """The PostgreSQL type a column of Arrow type ``t`` is sent as."""
    if pa.types.is_dictionary(t):
        return pg_type(t.value_type)
    oid = _scalar_oid(t)
    if oid is None and _is_list(t):
        inner = _scalar_oid(t.value_type)
        if inner in ARRAY_OF and inner != INTERVAL:
            return PgType(ARRAY_OF[inner], -1)
    if oid is None:
        return PgType(JSON, -1)
    return PgType(oid, SIZES.get(oid, -1))


# -- text ---------------------------------------------------------------------------


def _text_timestamp(v: dt.datetime) -> str:
    text = v.strftime("%Y-%m-%d %H:%M:%S")
    if v.microsecond:
        text += f".{v.microsecond:06d}".rstrip("0")
    if v.year < 1 or v.year > 9999:
        return text
    if v.tzinfo is not None:
        text += "+00"
    return text


def _text_interval(v: Any) -> str:
    if isinstance(v, dt.timedelta):
        sign = "-" if v < dt.timedelta(0) else ""
        v = abs(v)
        hours, rest = divmod(v.seconds, 3600)
        minutes, seconds = divmod(rest, 60)
        frac = f".{v.microseconds:06d}" if v.microseconds else ""
        days = f"{sign}{v.days} days " if v.days else ""
        return f"{days}{sign}{hours:02d}:{minutes:02d}:{seconds:02d}{frac}"
    months, days, nanos = v.months, v.days, v.nanoseconds
    return f"{months} mons {days} days {nanos / 1e9} seconds"


def _jsonable(v: Any, t: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_dictionary(t):
        return _jsonable(v, t.value_type)
    if pa.types.is_map(t):
        return {str(k): _jsonable(x, t.item_type) for k, x in v}
    if _is_list(t):
        return [_jsonable(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return {f.name: _jsonable(v.get(f.name), f.type) for f in t}
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _json_text(v: Any, t: pa.DataType) -> str:
    return json.dumps(_jsonable(v, t), separators=(",", ":"), ensure_ascii=False)


def _scalar_text(oid: int) -> Callable[[Any], str]:
    if oid == BOOL:
        return lambda v: "t" if v else "f"
    if oid in (FLOAT4, FLOAT8):
        return double_text
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return _text_timestamp
    if oid in (DATE, TIME):
        return lambda v: str(v.isoformat())
    if oid == BYTEA:
        return lambda v: "\\x" + bytes(v).hex()
    if oid == INTERVAL:
        return _text_interval
    return str


def _array_item_text(item: str) -> str:
    if item == "" or item.upper() == "NULL" or any(c in item for c in '{},"\\ \t\n'):
        return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return item


def _array_text(inner: Callable[[Any], str]) -> Callable[[Any], str]:
    def encode(values: Any) -> str:
        items = ["NULL" if x is None else _array_item_text(inner(x)) for x in values]
        return "{" + ",".join(items) + "}"

    return encode


# -- binary -------------------------------------------------------------------------


def numeric_binary(value: decimal.Decimal) -> bytes:
    """A decimal in PostgreSQL's binary numeric form (base-10000 digits)."""
    if value.is_nan():
        return struct.pack("!hhHH", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack("!hhHH", 0, 0, 0xD000 if value > 0 else 0xF000, 0)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    dscale = max(0, -exponent)
    if exponent >= 0:
        whole, frac = text + "0" * exponent, ""
    else:
        cut = len(text) + exponent
        whole, frac = (text[:cut], text[cut:]) if cut > 0 else ("", text.rjust(-exponent, "0"))
    whole = whole.lstrip("0")
    whole = whole.rjust((len(whole) + 3) // 4 * 4, "0")
    frac = frac.ljust((len(frac) + 3) // 4 * 4, "0")
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)]
    weight = len(groups) - 1
    groups += [int(frac[i : i + 4]) for i in range(0, len(frac), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(
        f"!hhHH{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups
    )


def _binary_timestamp(v: dt.datetime) -> bytes:
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    delta = v - PG_EPOCH
    return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _binary_time(v: dt.time) -> bytes:
    us = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return struct.pack("!q", us)


def _binary_interval(v: Any) -> bytes:
    if isinstance(v, dt.timedelta):
        return struct.pack("!qii", v.seconds * 1_000_000 + v.microseconds, v.days, 0)
    return struct.pack("!qii", v.nanoseconds // 1000, v.days, v.months)


def _scalar_binary(oid: int) -> Callable[[Any], bytes]:
    if oid == BOOL:
        return lambda v: b"\x01" if v else b"\x00"
    fixed = {INT2: "!h", INT4: "!i", INT8: "!q", FLOAT4: "!f", FLOAT8: "!d"}
    if oid in fixed:
        packer = struct.Struct(fixed[oid]).pack
        return lambda v: packer(v)
    if oid == NUMERIC:
        return lambda v: numeric_binary(decimal.Decimal(v))
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return _binary_timestamp
    if oid == DATE:
        return lambda v: struct.pack("!i", (v - PG_EPOCH_DATE).days)
    if oid == TIME:
        return _binary_time
    if oid == INTERVAL:
        return _binary_interval
    if oid == BYTEA:
        return bytes
    return lambda v: str(v).encode("utf-8")


def _array_binary(inner_oid: int) -> Callable[[Any], bytes]:
    inner = _scalar_binary(inner_oid)

    def encode(values: Any) -> bytes:
        items = list(values)
        has_null = any(x is None for x in items)
        parts = [struct.pack("!iiIii", 1, 1 if has_null else 0, inner_oid, len(items), 1)]
        if not items:
            return struct.pack("!iiI", 0, 0, inner_oid)
        for x in items:
            if x is None:
                parts.append(b"\xff\xff\xff\xff")
            else:
                raw = inner(x)
                parts.append(struct.pack("!i", len(raw)) + raw)
        return b"".join(parts)

    return encode


# -- columns ------------------------------------------------------------------------

Encoder = Callable[[pa.Array | pa.ChunkedArray], list[bytes | None]]


def _normalise(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    t = column.type
    if pa.types.is_dictionary(t):
        return _normalise(column.cast(t.value_type))
    if pa.types.is_timestamp(t) and (t.unit == "ns" or t.tz not in (None, "UTC")):
        # microseconds, and a zoned timestamp in UTC (it goes out as timestamptz in UTC)
        return pc.cast(column, pa.timestamp("us", None if t.tz is None else "UTC"), safe=False)
    if pa.types.is_string_view(t):
        return column.cast(pa.string())
    if pa.types.is_binary_view(t):
        return column.cast(pa.binary())
    if pa.types.is_float16(t):
        return column.cast(pa.float32())
    if pa.types.is_duration(t) and t.unit == "ns":
        return pc.cast(column, pa.duration("us"), safe=False)
    return column


def value_encoder(t: pa.DataType, fmt: int) -> Callable[[Any], bytes]:
    """Encodes one non-null Python value (as ``to_pylist`` gives it) of Arrow type ``t``."""
    if pa.types.is_dictionary(t):
        return value_encoder(t.value_type, fmt)
    kind = pg_type(t)
    if kind.oid == JSON:
        return lambda v: _json_text(v, t).encode("utf-8")
    if kind.oid in ARRAY_OF.values():
        inner = _scalar_oid(t.value_type)
        assert inner is not None
        if fmt == 1:
            return _array_binary(inner)
        text = _array_text(_scalar_text(inner))
        return lambda v: text(v).encode("utf-8")
    if fmt == 1:
        return _scalar_binary(kind.oid)
    if kind.oid == BYTEA:
        return lambda v: b"\\x" + bytes(v).hex().encode("ascii")
    if kind.oid == TEXT:
        return lambda v: str(v).encode("utf-8")
    scalar = _scalar_text(kind.oid)
    return lambda v: scalar(v).encode("utf-8")


def column_encoder(t: pa.DataType, fmt: int) -> Encoder:
    """Encodes a whole column of Arrow type ``t`` in ``fmt`` (0 text, 1 binary)."""
    encode = value_encoder(_normalise(pa.nulls(0, t)).type, fmt)

    def run(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
        return [None if v is None else encode(v) for v in _normalise(column).to_pylist()]

    return run
