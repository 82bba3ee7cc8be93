"""LogQL against an independent ground truth: 100,000 log records of varied shapes (JSON,
logfmt and plain-text lines, five services, two environments, four levels, structured
metadata) pushed to a real server whose flushes split them between Parquet files and the
unflushed rows; then over 200 LogQL queries, log and metric, instant and range, each
answer compared with the one computed from the records in plain Python (tests/logql/
truth.py): identical streams, lines, order and values."""

from __future__ import annotations

import json
import math
import random
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest import loki as push
from loadtest.ingest import ServerProcess
from tests.logql import truth
from tests.logql.truth import Spec
from tests.server.conftest import delta_rows

REPO = Path(__file__).resolve().parents[2]
COUNT = 100_000
SPAN_NS = 2 * 3_600_000_000_000
START_NS = (time.time_ns() // 3_600_000_000_000 - 3) * 3_600_000_000_000
END_NS = START_NS + SPAN_NS
MINUTE = 60_000_000_000


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, list[truth.Record]]]:
    tmp = tmp_path_factory.mktemp("truth")
    server = ServerProcess(
        tmp / "data",
        env={
            "PYTHONPATH": str(REPO),
            "SHOAL_LOG_LEVEL": "warning",
            "SHOAL_FLUSH_MAX_BYTES": str(4 << 20),
            "SHOAL_FLUSH_MAX_AGE_S": "3600",
            "SHOAL_PROMQL_MAX_SAMPLES": "1000000",
        },
        log_path=tmp / "server.log",
    ).start()
    records = truth.dataset(COUNT, START_NS, SPAN_NS)
    order = list(range(len(records)))
    random.Random(3).shuffle(order)
    try:
        for at in range(0, len(order), 2500):
            chunk = [records[i] for i in order[at : at + 2500]]
            streams: dict[tuple[tuple[str, str], ...], list[push.Entry]] = {}
            for r in chunk:
                streams.setdefault(tuple(sorted(r.stream.items())), []).append(
                    (r.ts, r.line, r.metadata) if r.metadata else (r.ts, r.line)
                )
            body = push.compress(push.encode([(dict(k), v) for k, v in streams.items()]))
            request = urllib.request.Request(
                f"{server.url}/loki/api/v1/push",
                data=body,
                headers={"Content-Type": "application/x-protobuf"},
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                assert response.status == 204
        yield server, records
    finally:
        server.kill()


def api(server: ServerProcess, path: str, **params: Any) -> Any:
    url = f"{server.url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=120) as response:
        return json.loads(response.read())["data"]


def test_the_records_are_split_between_files_and_unflushed_rows(
    loaded: tuple[ServerProcess, list[truth.Record]],
) -> None:
    server, _ = loaded
    flushed = delta_rows(server.data_dir, "default", "logs").num_rows
    assert 0 < flushed < COUNT


# -- log queries ---------------------------------------------------------------------------

S = truth.SERVICES
LOG_CASES: list[tuple[str, Spec]] = []
for service in S:
    sel = (("service_name", "=", service),)
    LOG_CASES.append((f'{{service_name="{service}"}}', Spec(sel)))
    LOG_CASES.append(
        (
            f'{{service_name="{service}", env="prod"}} |= "error"',
            Spec((*sel, ("env", "=", "prod")), (("|=", "error"),)),
        )
    )
    LOG_CASES.append(
        (
            f'{{service_name="{service}", format="json"}} | json | status >= 500',
            Spec((*sel, ("format", "=", "json")), (), "json", (("status", ">=", (500.0, float)),)),
        )
    )
    LOG_CASES.append(
        (
            f'{{service_name="{service}", format="logfmt"}} | logfmt'
            f' | duration > 500ms | user="bob"',
            Spec(
                (*sel, ("format", "=", "logfmt")),
                (),
                "logfmt",
                (("duration", ">", (0.5, truth._duration_s)), ("user", "=", "bob")),
            ),
        )
    )
    for level in truth.LEVELS:
        LOG_CASES.append(
            (
                f'{{service_name="{service}"}} | detected_level="{level}"',
                Spec(sel, (), "", (("detected_level", "=", level),)),
            )
        )
    for path in truth.PATHS:
        LOG_CASES.append(
            (
                f'{{service_name="{service}", format!="text"}} |= "{path}" != "{truth.RARE}"',
                Spec((*sel, ("format", "!=", "text")), (("|=", path), ("!=", truth.RARE))),
            )
        )
    for user in truth.USERS:
        LOG_CASES.append(
            (
                f'{{service_name="{service}", format="json"}} | json'
                f' | user_name="{user}" | drop trace_id',
                Spec(
                    (*sel, ("format", "=", "json")),
                    (),
                    "json",
                    (("user_name", "=", user),),
                    drop=("trace_id",),
                ),
            )
        )
    for status in (200, 404, 503):
        LOG_CASES.append(
            (
                f'{{service_name="{service}", format="logfmt"}} | logfmt'
                f" | status == {status} | keep service_name, status",
                Spec(
                    (*sel, ("format", "=", "logfmt")),
                    (),
                    "logfmt",
                    (("status", "==", (float(status), float)),),
                    keep=("service_name", "status"),
                ),
            )
        )
LOG_CASES += [
    (
        '{env=~"prod|staging"} |= "zebra-7f3a"',
        Spec((("env", "=~", "prod|staging"),), (("|=", truth.RARE),)),
    ),
    (
        '{service_name=~"a.*|w.*", env!="staging"} != "200" |~ "/(cart|login)"',
        Spec(
            (("service_name", "=~", "a.*|w.*"), ("env", "!=", "staging")),
            (("!=", "200"), ("|~", "/(cart|login)")),
        ),
    ),
    (
        '{service_name="api"} | json | __error__=""',
        Spec((("service_name", "=", "api"),), (), "json", error_filter=True),
    ),
    (
        '{service_name="web"} | json | __error__!="" | drop __error_details__',
        Spec((("service_name", "=", "web"),), (), "json", (("__error__", "!=", ""),)),
    ),
    (
        '{format="json"} | json | user_admin="true" | latency_ms < 10',
        Spec(
            (("format", "=", "json"),),
            (),
            "json",
            (("user_admin", "=", "true"), ("latency_ms", "<", (10.0, float))),
        ),
    ),
    (
        '{format="text", service_name="billing"} |~ "^(WARN|ERROR) " | drop trace_id, region',
        Spec(
            (("format", "=", "text"), ("service_name", "=", "billing")),
            (("|~", "^(WARN|ERROR) "),),
            drop=("trace_id", "region"),
        ),
    ),
    (
        '{format="logfmt", env="staging"} | logfmt | line_format "{{.user}} {{.status}}"',
        Spec(
            (("format", "=", "logfmt"), ("env", "=", "staging")),
            (),
            "logfmt",
            line_format="{{.user}} {{.status}}",
        ),
    ),
    (
        '{service_name="search"} | region="eu"',
        Spec((("service_name", "=", "search"),), (), "", (("region", "=", "eu"),)),
    ),
    (
        '{service_name="worker"} | detected_level=~"warn|error"',
        Spec((("service_name", "=", "worker"),), (), "", (("detected_level", "=~", "warn|error"),)),
    ),
]

WINDOWS = [
    (START_NS, END_NS),
    (START_NS + 30 * MINUTE, START_NS + 47 * MINUTE),
    (END_NS - 5 * MINUTE, END_NS + MINUTE),
]


def _streams(data: dict[str, Any]) -> list[tuple[dict[str, str], list[tuple[int, str]]]]:
    assert data["resultType"] == "streams"
    return [(s["stream"], [(int(t), line) for t, line in s["values"]]) for s in data["result"]]


@pytest.mark.parametrize("case", range(len(LOG_CASES)))
def test_log_queries(loaded: tuple[ServerProcess, list[truth.Record]], case: int) -> None:
    """Each log query over one of three windows, in one direction, with one of two limits
    (taken in turn from the case's number)."""
    server, records = loaded
    text, spec = LOG_CASES[case]
    start, end = WINDOWS[case % 3]
    limit = (37, 1000)[case // 3 % 2]
    forward = case // 6 % 2 == 1
    got = api(
        server,
        "/loki/api/v1/query_range",
        query=text,
        start=str(start),
        end=str(end),
        limit=str(limit),
        direction="forward" if forward else "backward",
    )
    expected = truth.log_answer(records, spec, start, end, limit, forward)
    assert _streams(got) == expected, (text, start, end, limit, forward)


# -- metric queries ------------------------------------------------------------------------

F = float
METRIC_CASES: list[tuple[str, dict[str, Any]]] = []
SELECTORS = [
    ('{service_name="api"}', Spec((("service_name", "=", "api"),))),
    ('{env="prod", format="logfmt"}', Spec((("env", "=", "prod"), ("format", "=", "logfmt")))),
    (
        '{service_name=~"web|search"} |= "/cart"',
        Spec((("service_name", "=~", "web|search"),), (("|=", "/cart"),)),
    ),
]
for text, spec in SELECTORS:
    for function in ("count_over_time", "rate", "bytes_over_time", "bytes_rate"):
        for rng, by in (("5m", ("detected_level",)), ("1m", ("service_name", "format"))):
            inner = f"{function}({text} [{rng}])"
            METRIC_CASES.append(
                (
                    f"sum by ({', '.join(by)}) ({inner})",
                    dict(spec=spec, function=function, range=rng, outer="sum", outer_by=by),
                )
            )
        METRIC_CASES.append(
            (
                f"{function}({text} [10m]) by (env)",
                dict(spec=spec, function=function, range="10m", by=("env",)),
            )
        )
    METRIC_CASES.append(
        (
            f"count(count_over_time({text} [5m]) by (service_name, region))",
            dict(
                spec=spec,
                function="count_over_time",
                range="5m",
                by=("service_name", "region"),
                outer="count",
            ),
        )
    )
for service in truth.SERVICES:
    for fmt in ("json", "logfmt", "text"):
        spec = Spec((("service_name", "=", service), ("format", "=", fmt)))
        METRIC_CASES.append(
            (
                f'sum by (detected_level) (count_over_time({{service_name="{service}",'
                f' format="{fmt}"}} [5m]))',
                dict(
                    spec=spec,
                    function="count_over_time",
                    range="5m",
                    outer="sum",
                    outer_by=("detected_level",),
                ),
            )
        )
JSON_SPEC = Spec((("format", "=", "json"), ("service_name", "=", "api")), (), "json")
LOGFMT_SPEC = Spec((("format", "=", "logfmt"), ("env", "=", "prod")), (), "logfmt")
for function in (
    "sum_over_time",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "first_over_time",
    "last_over_time",
    "stdvar_over_time",
    "stddev_over_time",
    "rate",
    "quantile_over_time:0.9",
    "quantile_over_time:0.5",
):
    name, _, q = function.partition(":")
    prefix = f"{name}({q}, " if q else f"{name}("
    METRIC_CASES.append(
        (
            f'{prefix}{{format="json", service_name="api"}} | json'
            f" | unwrap latency_ms [10m]) by (detected_level)",
            dict(
                spec=JSON_SPEC,
                function=function,
                range="10m",
                by=("detected_level",),
                unwrap="latency_ms",
            ),
        )
    )
    METRIC_CASES.append(
        (
            f'{prefix}{{format="logfmt", env="prod"}} | logfmt'
            f" | unwrap duration(duration) [15m]) by (service_name)",
            dict(
                spec=LOGFMT_SPEC,
                function=function,
                range="15m",
                by=("service_name",),
                unwrap="duration",
                convert=truth._duration_s,
            ),
        )
    )
    METRIC_CASES.append(
        (
            f'max by (user) ({prefix}{{format="logfmt", env="prod"}} | logfmt'
            f" | unwrap status [30m]) by (user, service_name))",
            dict(
                spec=LOGFMT_SPEC,
                function=function,
                range="30m",
                by=("user", "service_name"),
                unwrap="status",
                outer="max",
                outer_by=("user",),
            ),
        )
    )
# summed per group before the parsed fields split the entries into series (engine's
# _summed_early): a parser stage keeps them off the SQL counting path
for function in ("count_over_time", "rate", "bytes_over_time", "bytes_rate"):
    METRIC_CASES.append(
        (
            f'sum by (detected_level, user) ({function}({{format="json", service_name="api"}}'
            " | json [5m]))",
            dict(
                spec=JSON_SPEC, function=function, range="5m", outer="sum",
                outer_by=("detected_level", "user"),
            ),
        )
    )  # fmt: skip
# and sums of unwrapped values, which are summed per series first
for function in ("sum_over_time", "rate"):
    METRIC_CASES.append(
        (
            f'sum by (service_name) ({function}({{format="logfmt", env="prod"}} | logfmt'
            " | unwrap duration(duration) [15m]))",
            dict(
                spec=LOGFMT_SPEC, function=function, range="15m", unwrap="duration",
                convert=truth._duration_s, outer="sum", outer_by=("service_name",),
            ),
        )
    )  # fmt: skip
for level in truth.LEVELS:
    spec = Spec((("service_name", "=", "billing"),), (), "", (("detected_level", "=", level),))
    METRIC_CASES.append(
        (
            f'sum(count_over_time({{service_name="billing"}} | detected_level="{level}" [2m]))',
            dict(
                spec=spec, function="count_over_time", range="2m", by=(), outer="sum", outer_by=()
            ),
        )
    )
    METRIC_CASES.append(
        (
            f'avg by (env) (rate({{service_name="billing"}} | detected_level="{level}" [3m]))',
            dict(spec=spec, function="rate", range="3m", outer="avg", outer_by=("env",)),
        )
    )


STEP_SETS = [
    (START_NS + 10 * MINUTE, END_NS, 5 * MINUTE),
    (START_NS + 61 * MINUTE, START_NS + 67 * MINUTE, 60_000_000_000),
]


def _parse_range(text: str) -> int:
    return int(text[:-1]) * MINUTE


def _expected(
    records: list[truth.Record], case: dict[str, Any], steps: list[int]
) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    return truth.range_answer(
        records,
        case["spec"],
        case["function"],
        _parse_range(case["range"]),
        steps,
        by=case.get("by"),
        unwrap=case.get("unwrap", ""),
        convert=case.get("convert", float),
        outer=case.get("outer", ""),
        outer_by=case.get("outer_by"),
    )


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _compare(
    got: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]],
    expected: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]],
    text: str,
) -> None:
    assert sorted(got) == sorted(expected), text
    for key, points in expected.items():
        mine = got[key]
        assert [t for t, _ in mine] == [t for t, _ in points], (text, key)
        for (_, a), (_, b) in zip(mine, points, strict=True):
            assert _close(a, b), (text, key, a, b)


def _seconds_to_ns(value: float) -> int:
    return round(value * 1000) * 1_000_000


@pytest.mark.parametrize("case", range(len(METRIC_CASES)))
def test_metric_range_queries(loaded: tuple[ServerProcess, list[truth.Record]], case: int) -> None:
    server, records = loaded
    text, spec = METRIC_CASES[case]
    for start, end, step in [STEP_SETS[case % 2]]:
        data = api(
            server,
            "/loki/api/v1/query_range",
            query=text,
            start=str(start),
            end=str(end),
            step=str(step // 1_000_000_000),
        )
        assert data["resultType"] == "matrix"
        got = {
            tuple(sorted(s["metric"].items())): [
                (_seconds_to_ns(t), float(v)) for t, v in s["values"]
            ]
            for s in data["result"]
        }
        steps = list(range(start, end + 1, step))
        _compare(got, _expected(records, spec, steps), text)


@pytest.mark.parametrize("case", range(0, len(METRIC_CASES), 4))
def test_metric_instant_queries(
    loaded: tuple[ServerProcess, list[truth.Record]], case: int
) -> None:
    server, records = loaded
    text, spec = METRIC_CASES[case]
    at = START_NS + 73 * MINUTE + 17_000_000_000
    data = api(server, "/loki/api/v1/query", query=text, time=str(at))
    assert data["resultType"] == "vector"
    got = {
        tuple(sorted(s["metric"].items())): [(_seconds_to_ns(s["value"][0]), float(s["value"][1]))]
        for s in data["result"]
    }
    _compare(got, _expected(records, spec, [at]), text)


def test_there_are_over_200_queries() -> None:
    assert len({text for text, _ in LOG_CASES} | {text for text, _ in METRIC_CASES}) >= 200
