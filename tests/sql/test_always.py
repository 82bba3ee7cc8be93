"""When a condition holds for every row of a span of time, exactly (prune.always)."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from shoal.schema import METRICS
from shoal.sql.probe import TimeProbe
from shoal.sql.sessions import session_config, sql_options

T0 = 1_767_268_800_000_000  # 2026-01-01T12:00:00Z in microseconds
HOUR = 3_600_000_000


@pytest.fixture(scope="module")
def probe() -> TimeProbe:
    return TimeProbe(SessionContext(session_config()))


def holds(probe: TimeProbe, condition: str, span: tuple[int, int]) -> bool:
    return probe.always("metrics", METRICS.schema, "timestamp", condition, span, sql_options())


@pytest.mark.parametrize(
    ("condition", "span", "expected"),
    [
        ("timestamp >= TIMESTAMP '2026-01-01T12:00:00Z'", (T0, T0 + HOUR), True),
        ("timestamp >= TIMESTAMP '2026-01-01T12:00:00Z'", (T0 - 1, T0 + HOUR), False),
        ("timestamp > TIMESTAMP '2026-01-01T12:00:00Z'", (T0, T0 + HOUR), False),
        ("timestamp > TIMESTAMP '2026-01-01T12:00:00Z'", (T0 + 1, T0 + HOUR), True),
        ("timestamp < TIMESTAMP '2026-01-01T13:00:00Z'", (T0, T0 + HOUR - 1), True),
        ("timestamp < TIMESTAMP '2026-01-01T13:00:00Z'", (T0, T0 + HOUR), False),
        ("timestamp <= TIMESTAMP '2026-01-01T13:00:00Z'", (T0, T0 + HOUR), True),
        ("TIMESTAMP '2026-01-01T13:00:00Z' > timestamp", (T0, T0 + HOUR - 1), True),
        (
            "timestamp BETWEEN TIMESTAMP '2026-01-01T12:00:00Z' AND "
            "TIMESTAMP '2026-01-01T13:00:00Z'",
            (T0, T0 + HOUR),
            True,
        ),
        (
            "timestamp NOT BETWEEN TIMESTAMP '2026-01-01T12:00:00Z' AND "
            "TIMESTAMP '2026-01-01T13:00:00Z'",
            (T0, T0 + HOUR),
            False,
        ),
        ("timestamp = TIMESTAMP '2026-01-01T12:00:00Z'", (T0, T0), True),
        ("timestamp = TIMESTAMP '2026-01-01T12:00:00Z'", (T0, T0 + 1), False),
        # anything besides time bounds
        ("timestamp >= TIMESTAMP '2026-01-01T12:00:00Z' AND value > 1", (T0, T0 + HOUR), False),
        (
            "timestamp >= TIMESTAMP '2026-01-01T12:00:00Z' OR value > 1",
            (T0, T0 + HOUR),
            False,
        ),
        ("value > 1", (T0, T0 + HOUR), False),
        ("1 = 0", (T0, T0 + HOUR), False),
        ("1 = 1", (T0, T0 + HOUR), False),
        ("date_part('hour', timestamp) = 12", (T0, T0 + HOUR - 1), False),
        ("timestamp >= ", (T0, T0 + HOUR), False),
    ],
)
def test_a_condition_holds_only_when_every_time_meets_it(
    probe: TimeProbe, condition: str, span: tuple[int, int], expected: bool
) -> None:
    assert holds(probe, f"({condition})", span) is expected
