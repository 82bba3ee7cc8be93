"""Times and durations as the Prometheus HTTP API accepts them, in milliseconds."""

from __future__ import annotations

import decimal
import math

import promql_parser

from shoal.errors import PromQLError
from shoal.text import parse_utc, utc_micros

MIN_TIME_MS = -62_135_596_800_000
"""0001-01-01T00:00:00Z, the first time an RFC 3339 timestamp can write. No sample lies
before the Unix epoch, but an evaluation time may (a range query's grid starts where
the user says, and ``time()`` answers it)."""
MAX_TIME_MS = 253_402_300_799_000
"""9999-12-31T23:59:59Z, the last time an RFC 3339 timestamp can write."""


def _bounded(ms: int) -> int:
    # Prometheus accepts any int64 millisecond time; no sample can lie outside these
    # bounds, so a time beyond them is clamped (an open-ended range) rather than refused.
    return min(max(ms, MIN_TIME_MS), MAX_TIME_MS)


def parse_time(text: str, name: str) -> int:
    """Unix seconds (with a fraction) or RFC 3339, rounded to the millisecond."""
    raw = text.strip()
    try:
        number = decimal.Decimal(raw)
    except decimal.InvalidOperation:
        number = None
    if number is not None and number.is_finite():
        if abs(number) > 2**62:
            raise PromQLError(
                f'invalid parameter "{name}": cannot parse "{text}" to a valid timestamp'
            )
        ms = int((number * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
        return _bounded(ms)
    try:
        when = parse_utc(raw)
    except ValueError:
        raise PromQLError(
            f'invalid parameter "{name}": cannot parse "{text}" to a valid timestamp'
        ) from None
    ms = utc_micros(when) // 1000
    return _bounded(ms)


def parse_duration(text: str, name: str) -> int:
    """Seconds (with a fraction) or a PromQL duration such as ``1m30s``, in milliseconds."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds) or seconds * 1000 > 2**62:
            raise PromQLError(
                f'invalid parameter "{name}": cannot parse "{text}" to a valid duration'
            )
        return round(seconds * 1000)
    try:
        delta = promql_parser.parse_duration(raw)
    except (ValueError, OverflowError):
        raise PromQLError(
            f'invalid parameter "{name}": cannot parse "{text}" to a valid duration'
        ) from None
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
