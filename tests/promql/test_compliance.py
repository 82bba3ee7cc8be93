"""The PromQL compliance tester's query set, against a real Prometheus holding the same samples.

testdata/compliance/promql-test-queries.yml is the list of queries (with the
variants they expand into) that the Prometheus project's compliance tester runs
and other vendors publish their scores on. As the tester does, every query runs
as a range query over 10 minutes ending 12 minutes before the newest data, at a
10 s resolution, against a reference Prometheus and against shoal; answers must
match in status (a ``should_fail`` query fails in both, with the same
errorType), result type, series, timestamps and values within the tester's
default tolerance (relative 1e-5, NaN equal to NaN).

The data is the demo service's shape (demo_data.py), remote-written into both
servers, as Prometheus scraping the demo service would remote-write it to a
vendor. What shoal answers differently is listed in ``EXCEPTIONS`` with the
reason, expected to fail strictly.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from tests.promql import demo_data
from tests.promql.compare import compare
from tests.promql.conftest import get_json, post

QUERIES = Path(__file__).parent / "testdata" / "compliance" / "promql-test-queries.yml"
SECOND_MS = 1000
MINUTE = 60_000

VARIANTS = {
    "range": ["1s", "15s", "1m", "5m", "15m", "1h"],
    "offset": ["1m", "5m", "10m"],
    "simpleAggrOp": ["sum", "avg", "max", "min", "count", "stddev", "stdvar"],
    "simpleTimeAggrOp": ["sum", "avg", "max", "min", "count", "stddev", "stdvar", "absent", "last"],
    "topBottomOp": ["topk", "bottomk"],
    "quantile": ["-0.5", "0.1", "0.5", "0.75", "0.95", "0.90", "0.99", "1", "1.5"],
    "arithBinOp": ["+", "-", "*", "/", "%", "^"],
    "compBinOp": ["==", "!=", "<", ">", "<=", ">="],
    "binOp": ["+", "-", "*", "/", "%", "^", "==", "!=", "<", ">", "<=", ">="],
    "simpleMathFunc": ["abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "round"],
    "extrapolatedRateFunc": ["delta", "rate", "increase"],
    "clampFunc": ["clamp_min", "clamp_max"],
    "instantRateFunc": ["idelta", "irate"],
    "dateFunc": ["day_of_month", "day_of_week", "days_in_month", "hour", "minute", "month", "year"],
}
"""The values each ``{{.name}}`` of a query template takes (the tester's own lists)."""

EXCEPTIONS: dict[str, str] = {}
"""Queries shoal answers differently from Prometheus 2.42, and why."""


def expand() -> list[tuple[str, bool]]:
    """Every query of the set with its variants filled in, and whether it should fail."""
    cases = yaml.safe_load(QUERIES.read_text())["test_cases"]
    out = []
    for case in cases:
        names = case.get("variant_args") or []
        for values in itertools.product(*(VARIANTS[n] for n in names)):
            query = case["query"]
            for name, value in zip(names, values, strict=True):
                query = query.replace("{{." + name + "}}", value)
            out.append((query, bool(case.get("should_fail"))))
    return out


CASES = expand()


@pytest.fixture(scope="module")
def loaded(prometheus: Prometheus, shoal_server: ServerProcess) -> tuple[float, float]:
    """Both servers hold 90 minutes of demo samples; the query window the tester would use."""
    end_ms = int(time.time() * 1000) // SECOND_MS * SECOND_MS - MINUTE
    start_ms = end_ms - 90 * MINUTE
    headers = {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    for body in demo_data.requests(demo_data.build(start_ms, end_ms)):
        for url in (prometheus.url, shoal_server.url):
            status, answer = post(url + "/api/v1/write", body, headers)
            assert status in (200, 204), answer
    window_end = (end_ms - 12 * MINUTE) / 1000
    return window_end - 600, window_end


def _param(query: str, should_fail: bool) -> Any:
    marks = []
    if query in EXCEPTIONS:
        marks.append(pytest.mark.xfail(strict=True, reason=EXCEPTIONS[query]))
    return pytest.param(query, should_fail, id=query, marks=marks)


@pytest.mark.parametrize(("query", "should_fail"), [_param(*c) for c in CASES])
def test_compliance_query(
    query: str,
    should_fail: bool,
    loaded: tuple[float, float],
    prometheus: Prometheus,
    shoal_server: ServerProcess,
) -> None:
    start, end = loaded
    params = {"query": query, "start": start, "end": end, "step": "10s"}
    theirs = get_json(prometheus.url, "/api/v1/query_range", params)
    ours = get_json(shoal_server.url, "/api/v1/query_range", params)
    assert (theirs["status"] == "error") is should_fail, theirs
    compare(ours, theirs, query, rel=1e-5)


def test_the_set_is_whole() -> None:
    """The expansion gives the tester's count for this version of the file."""
    assert len(CASES) == 539
    assert sum(fail for _, fail in CASES) == 5
