"""Text forms that every layer reads or writes the same way.

An RFC 3339 / ISO 8601 time (a trailing ``Z`` for UTC; no offset means UTC), the
exact microseconds of such a time, and the spelling of a double (shortest
round-trip; ``NaN``, ``Infinity`` and ``-Infinity``, as OTLP/JSON and PostgreSQL
both spell them).
"""

from __future__ import annotations

import datetime as dt
import math

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_utc(text: str) -> dt.datetime:
    """An aware datetime from RFC 3339 text; raises ValueError when it is not one."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    when = dt.datetime.fromisoformat(raw)
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def utc_micros(when: dt.datetime) -> int:
    """Microseconds since the Unix epoch, exactly (no float rounding)."""
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def double_text(value: float) -> str:
    """The shortest round-trip text of a double; non-finite values spelled out."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)
