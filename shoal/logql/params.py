"""The parameters of Loki's API, read as Loki reads them: times in nanoseconds, seconds
(with a fraction) or RFC 3339; steps in seconds or as durations; ``start`` defaulting to
``since`` (one hour) before ``end``, ``end`` to now; ``limit`` 100; ``direction``
``backward``."""

from __future__ import annotations

import datetime as dt
import math
import re
import time

from shoal.errors import LogQLError
from shoal.logql.parse import duration_ns

DEFAULT_LIMIT = 100
DEFAULT_SINCE_NS = 3_600_000_000_000


def timestamp(value: str | None, default: int, name: str) -> int:
    """A time parameter in nanoseconds (``default`` when absent)."""
    if value is None or value == "":
        return default
    if "." in value:
        try:
            seconds = float(value)
        except ValueError:
            pass
        else:
            whole = math.floor(seconds)
            fraction = round((seconds - whole) * 1000) / 1000
            return int(whole) * 1_000_000_000 + int(fraction * 1_000_000_000)
    if re.fullmatch(r"-?[0-9]+", value):
        number = int(value)
        return number * 1_000_000_000 if len(value) <= 10 else number
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise LogQLError(f"invalid parameter {name!r}: cannot parse {value!r} as a time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def seconds_or_duration(value: str, name: str) -> int:
    """A step or interval: seconds (``15``, ``0.5``) or a duration (``1m``), in ns."""
    try:
        return int(float(value) * 1_000_000_000)
    except ValueError:
        pass
    try:
        return duration_ns(value)
    except LogQLError:
        raise LogQLError(
            f"invalid parameter {name!r}: cannot parse {value!r} to a valid duration"
        ) from None


def bounds(start: str | None, end: str | None, since: str | None = None) -> tuple[int, int]:
    """``start`` and ``end`` in ns, with Loki's defaults."""
    now = time.time_ns()
    end_ns = timestamp(end, now, "end")
    span = duration_ns(since) if since else DEFAULT_SINCE_NS
    start_ns = timestamp(start, min(end_ns, now) - span, "start")
    if end_ns < start_ns:
        raise LogQLError("invalid parameter: the end time must not be before the start time")
    return start_ns, end_ns


def default_step(start_ns: int, end_ns: int) -> int:
    return max(math.floor((end_ns - start_ns) / 1e9 / 250), 1) * 1_000_000_000


def limit(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    try:
        number = int(value)
    except ValueError:
        raise LogQLError(f"invalid parameter 'limit': {value!r} is not a number") from None
    if number <= 0:
        raise LogQLError("limit must be a positive value")
    return number


def forward(value: str | None) -> bool:
    """Whether ``direction`` is forward (backward by default)."""
    if value is None or value == "":
        return False
    upper = value.upper()
    if upper not in ("FORWARD", "BACKWARD"):
        raise LogQLError(f"invalid direction '{value}'")
    return upper == "FORWARD"
