"""The text forms shared by every layer: RFC 3339 times and double spelling."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.text import double_text, parse_utc, utc_micros


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00z", 0),
        ("1970-01-01T00:00:00", 0),  # no offset: UTC
        ("1970-01-01T01:00:00+01:00", 0),
        ("2026-11-24T10:00:00.000001Z", 1_795_514_400_000_001),
        ("1969-12-31T23:59:59.999999Z", -1),
        (" 2026-11-24T10:00:00Z ", 1_795_514_400_000_000),
    ],
)
def test_rfc3339_text_reads_as_utc_microseconds(text: str, micros: int) -> None:
    when = parse_utc(text)
    assert when.tzinfo is not None
    assert utc_micros(when) == micros


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "1700000000"])
def test_text_that_is_not_a_time_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_utc(text)


@given(st.datetimes(timezones=st.just(dt.UTC)))
def test_microseconds_round_trip_exactly(when: dt.datetime) -> None:
    micros = utc_micros(when)
    assert dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros) == when
    assert utc_micros(parse_utc(when.isoformat())) == micros


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_double_text_round_trips(value: float) -> None:
    text = double_text(value)
    back = float(text)
    assert (math.isnan(value) and math.isnan(back)) or back == value
    assert text in ("NaN", "Infinity", "-Infinity") or math.isfinite(value)
