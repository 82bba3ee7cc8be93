"""Bound parameters as SQL literals, and the types of a statement's parameters.

A parameter of the extended protocol arrives as bytes in text or binary
format with a type OID (0 when the client left it to the server). It is
decoded and checked here, then written into the statement as a literal of its
type: strings are quoted (a quote doubled), numbers are re-formatted from
their parsed value, so a parameter never becomes SQL of its own. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import struct
import uuid
from collections.abc import Sequence

from shoal.errors import ShoalError
from shoal.pgwire import types as t
from shoal.pgwire.sqltext import placeholders, quote_literal
from shoal.text import double_text


class ParameterError(ShoalError):
    """A parameter value that does not decode as its type (SQLSTATE 22P02)."""


CAST_NAMES: dict[str, int] = {
    "bool": t.BOOL,
    "boolean": t.BOOL,
    "int2": t.INT2,
    "smallint": t.INT2,
    "int": t.INT4,
    "int4": t.INT4,
    "integer": t.INT4,
    "int8": t.INT8,
    "bigint": t.INT8,
    "float4": t.FLOAT4,
    "real": t.FLOAT4,
    "float8": t.FLOAT8,
    "float": t.FLOAT8,
    "double": t.FLOAT8,
    "double precision": t.FLOAT8,
    "numeric": t.NUMERIC,
    "decimal": t.NUMERIC,
    "text": t.TEXT,
    "varchar": t.VARCHAR,
    "string": t.TEXT,
    "bytea": t.BYTEA,
    "timestamp": t.TIMESTAMP,
    "timestamp without time zone": t.TIMESTAMP,
    "timestamptz": t.TIMESTAMPTZ,
    "timestamp with time zone": t.TIMESTAMPTZ,
    "date": t.DATE,
    "json": t.JSON,
    "jsonb": t.JSONB,
    "uuid": t.UUID,
}

_INTS = {t.INT2: 16, t.INT4: 32, t.INT8: 64, t.OID: 33}


def parameter_types(sql: str, declared: Sequence[int]) -> list[int]:
    """The OID of each ``$n`` of ``sql``: declared by the client in Parse, else the type of
    a ``$n::type`` cast, else text."""
    found = placeholders(sql)
    count = max([p.index for p in found] + [len(declared)], default=0)
    oids = [declared[i] if i < len(declared) else 0 for i in range(count)]
    for p in found:
        if oids[p.index - 1] == 0 and p.cast is not None and p.cast in CAST_NAMES:
            oids[p.index - 1] = CAST_NAMES[p.cast]
    for m in _COUNT_PARAM.finditer(sql):
        index = int(m.group(1))
        if 0 < index <= count and oids[index - 1] == 0:
            oids[index - 1] = t.INT8  # LIMIT $n / OFFSET $n take a count
    return [oid or t.TEXT for oid in oids]


_COUNT_PARAM = re.compile(r"\b(?:LIMIT|OFFSET)\s+\$([0-9]+)\b", re.IGNORECASE)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParameterError("a text parameter is not UTF-8") from None


def _int(text: str, bits: int) -> str:
    try:
        value = int(text.strip())
    except ValueError:
        raise ParameterError(f"invalid input syntax for type integer: {text!r}") from None
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise ParameterError(f"value {value} is out of range for a {bits}-bit integer")
    return str(value)


def _float(value: float) -> str:
    text = double_text(value)
    return text if math.isfinite(value) else f"CAST('{text}' AS DOUBLE)"


def _float_text(text: str) -> str:
    try:
        return _float(float(text.strip()))
    except ValueError:
        raise ParameterError(f"invalid input syntax for type double precision: {text!r}") from None


def _numeric(value: decimal.Decimal) -> str:
    if not value.is_finite():
        return _float(float(value))
    return str(value)


def _bool_text(text: str) -> str:
    lowered = text.strip().lower()
    if lowered in {"t", "true", "1", "yes", "y", "on"}:
        return "TRUE"
    if lowered in {"f", "false", "0", "no", "n", "off"}:
        return "FALSE"
    raise ParameterError(f"invalid input syntax for type boolean: {text!r}")


def _timestamp(when: str, zone: bool) -> str:
    text = when.strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text else text)
    except ValueError:
        raise ParameterError(f"invalid input syntax for type timestamp: {when!r}") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.UTC)
        return f"CAST('{parsed.replace(tzinfo=None).isoformat()}Z' AS TIMESTAMP)"
    suffix = "Z" if zone else ""
    return f"CAST('{parsed.isoformat()}{suffix}' AS TIMESTAMP)"


def _date(when: str) -> str:
    try:
        parsed = dt.date.fromisoformat(when.strip())
    except ValueError:
        raise ParameterError(f"invalid input syntax for type date: {when!r}") from None
    return f"CAST('{parsed.isoformat()}' AS DATE)"


def _bytes(value: bytes) -> str:
    return f"X'{value.hex()}'"


def _from_binary(raw: bytes, oid: int) -> str:
    def need(size: int) -> None:
        if len(raw) != size:
            raise ParameterError(f"binary parameter of type {oid} must be {size} bytes")

    if oid in _INTS:
        size = {t.INT2: 2, t.INT4: 4, t.INT8: 8, t.OID: 4}[oid]
        need(size)
        fmt = {2: "!h", 4: "!I" if oid == t.OID else "!i", 8: "!q"}[size]
        return str(struct.unpack(fmt, raw)[0])
    if oid == t.BOOL:
        need(1)
        return "TRUE" if raw != b"\x00" else "FALSE"
    if oid == t.FLOAT4:
        need(4)
        return _float(struct.unpack("!f", raw)[0])
    if oid == t.FLOAT8:
        need(8)
        return _float(struct.unpack("!d", raw)[0])
    if oid in (t.TIMESTAMP, t.TIMESTAMPTZ):
        need(8)
        us = struct.unpack("!q", raw)[0]
        try:
            when = t.PG_EPOCH + dt.timedelta(microseconds=us)
        except OverflowError:
            raise ParameterError("timestamp parameter out of range") from None
        return _timestamp(when.isoformat(), oid == t.TIMESTAMPTZ)
    if oid == t.DATE:
        need(4)
        try:
            day = t.PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", raw)[0])
        except OverflowError:
            raise ParameterError("date parameter out of range") from None
        return _date(day.isoformat())
    if oid == t.NUMERIC:
        return _numeric(decode_numeric(raw))
    if oid == t.BYTEA:
        return _bytes(raw)
    if oid == t.UUID:
        need(16)
        return quote_literal(str(uuid.UUID(bytes=raw)))
    if oid == t.JSONB:
        if not raw or raw[0] != 1:
            raise ParameterError("binary jsonb parameter must start with version 1")
        return quote_literal(_text(raw[1:]))
    return quote_literal(_text(raw))


def decode_numeric(raw: bytes) -> decimal.Decimal:
    if len(raw) < 8:
        raise ParameterError("binary numeric parameter is truncated")
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHH", raw)
    if ndigits < 0 or len(raw) != 8 + 2 * ndigits:
        raise ParameterError("binary numeric parameter has a wrong length")
    if sign == 0xC000:
        return decimal.Decimal("NaN")
    if sign in (0xD000, 0xF000):
        return decimal.Decimal("Infinity" if sign == 0xD000 else "-Infinity")
    if sign not in (0, 0x4000):
        raise ParameterError("binary numeric parameter has an invalid sign")
    digits = struct.unpack_from(f"!{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise ParameterError("binary numeric parameter has an invalid digit")
    value = decimal.Decimal(0)
    with decimal.localcontext() as ctx:
        ctx.prec = 4 * max(ndigits, 1) + 40
        for i, d in enumerate(digits):
            value += decimal.Decimal(d).scaleb(4 * (weight - i))
        value = value.quantize(decimal.Decimal(1).scaleb(-min(dscale, 1000)))
        return value.copy_negate() if sign == 0x4000 else value


def literal(raw: bytes | None, oid: int, fmt: int) -> str:
    """The SQL literal for one bound parameter."""
    if raw is None:
        return "NULL"
    if fmt == 1:
        return _from_binary(raw, oid)
    text = _text(raw)
    if oid in _INTS:
        return _int(text, _INTS[oid])
    if oid in (t.FLOAT4, t.FLOAT8):
        return _float_text(text)
    if oid == t.NUMERIC:
        try:
            return _numeric(decimal.Decimal(text.strip()))
        except decimal.InvalidOperation:
            raise ParameterError(f"invalid input syntax for type numeric: {text!r}") from None
    if oid == t.BOOL:
        return _bool_text(text)
    if oid in (t.TIMESTAMP, t.TIMESTAMPTZ):
        return _timestamp(text, oid == t.TIMESTAMPTZ)
    if oid == t.DATE:
        return _date(text)
    if oid == t.BYTEA:
        if text.startswith("\\x"):
            try:
                return _bytes(bytes.fromhex(text[2:]))
            except ValueError:
                raise ParameterError("invalid hex in a bytea parameter") from None
        return _bytes(text.encode("utf-8"))
    return quote_literal(text)


def literals(
    values: Sequence[bytes | None], oids: Sequence[int], formats: Sequence[int]
) -> list[str]:
    """Each bound value as a literal; ``formats`` has 0, 1 or one entry per value."""
    if len(values) != len(oids):
        raise ParameterError(
            f"bind message supplies {len(values)} parameters, "
            f"but the prepared statement requires {len(oids)}"
        )
    out: list[str] = []
    for i, raw in enumerate(values):
        fmt = formats[0] if len(formats) == 1 else (formats[i] if formats else 0)
        out.append(literal(raw, oids[i], fmt))
    return out
