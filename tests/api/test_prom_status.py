"""The status and expression endpoints against a real Prometheus (Debian's 2.42) holding
the same series: the same keys and JSON types, the cardinality figures equal to
Prometheus' own for the series both were sent, format_query's text equal to
Prometheus' for every query of a corpus."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from shoal.auth import TokenStore
from tests.promql.conftest import REPO, post

SERIES = [
    ({"__name__": "m_a", "job": "api", "instance": "a"}, 3),
    ({"__name__": "m_a", "job": "api", "instance": "b"}, 4),
    ({"__name__": "m_a", "job": "db", "instance": "a"}, 5),
    ({"__name__": "m_b", "job": "api", "instance": "a", "code": "200"}, 6),
    ({"__name__": "m_b", "job": "api", "instance": "a", "code": "500"}, 7),
    ({"__name__": "m_c", "job": "web"}, 8),
]

FORMAT_QUERIES = [
    'sum by (a) (rate(foo{x="y"}[5m] offset 1m @ start()))',
    "foo @ 100.5 offset -5m",
    "a + on(b) group_left(c) d",
    "a * ignoring(x) group_right(y, z) b",
    "a + ignoring() b",
    "x + on() 1",
    "sum without () (x)",
    "sum by () (x)",
    "sum(y) by (x)",
    'count_values("v", x)',
    "quantile(0.9, x)",
    "histogram_quantile(0.9, sum by (le) (rate(http_request_duration_seconds_bucket"
    '{job="api",handler=~"/v1/.*"}[5m])))',
    'sum(rate(http_requests_total{job="api-server-with-a-very-long-name",instance="localhost:9090",'
    'handler="/api/v1/query"}[5m])) by (code, method, handler)',
    'max_over_time(deriv(rate(distance_covered_meters_total{vehicle_type="automobile-with-a-long-'
    'name"}[1m])[5m:1m])[10m:])',
    '-sum(rate(some_very_long_metric_name_for_testing_purposes_total{label_one="value_one",'
    'label_two="value_two"}[5m]))',
    '(some_very_long_metric_name_for_testing_purposes_total{label_one="value_one",label_two='
    '"value_two"} + another_one_here)',
    'label_join(some_very_long_metric_name_for_testing_purposes_total{label_one="value_one"}, '
    '"foo", ",", "label_one", "label_two")',
    "a_very_long_metric_name_number_one_for_the_test + a_very_long_metric_name_number_two_for_"
    "the_test + a_very_long_metric_name_number_three",
    "1e6 + 1234567 - 100000 * 123456.5 / 0.0001 + 0.00001 - 1.5e-7 + 1e21 + 5e-324 + 0x1F",
    "Inf - -Inf + NaN",
    '{__name__="foo", bar!="baz"}',
    '{__name__=~"a.*"}',
    'foo{a="it\'s \\"quoted\\" \\\\ \\n \\u00e9\\t\\x01 ☃"}',
    "'single' + `raw \\n`",
    "x > bool 5",
    "x^y^z",
    "a - (b - c)",
    "-(-x)",
    "foo[5m] @ 1609746000.123 offset 1w",
    "rate(foo[1d2h3m4s5ms])",
    "x offset 1y",
    "x offset 53w",
    "x offset 90d",
    "sort(x) unless on(a) y or z and w",
]


@pytest.fixture(scope="module")
def both(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Prometheus, dict[str, str], int]]:
    tmp = tmp_path_factory.mktemp("prom-status")
    data = tmp / "data"
    store = TokenStore(data)
    tokens = {
        "acme": store.create("acme", frozenset({"ingest", "query"}))[0],
        "other": store.create("other", frozenset({"ingest", "query"}))[0],
    }
    server = ServerProcess(data, env={"PYTHONPATH": str(REPO)}, log_path=tmp / "server.log")
    prometheus = Prometheus(tmp / "prometheus")
    (tmp / "prometheus").mkdir()
    try:
        server.start()
        prometheus.start()
        base = (int(time.time() * 1000) - 30 * 60_000) // 1000 * 1000
        series = [
            (labels, [(base + i * 15_000, float(i)) for i in range(n)]) for labels, n in SERIES
        ]
        body = remote_write.compress(remote_write.encode(series))
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
        for url, token in ((server.url, tokens["acme"]), (prometheus.url, None)):
            sent = headers | ({"Authorization": f"Bearer {token}"} if token else {})
            status, answer = post(url + "/api/v1/write", body, sent)
            assert status == 204, answer
        other = remote_write.compress(
            remote_write.encode([({"__name__": "z", "k": "v"}, [(base, 1.0)])])
        )
        status, _ = post(
            server.url + "/api/v1/write",
            other,
            headers | {"Authorization": f"Bearer {tokens['other']}"},
        )
        assert status == 204
        yield server, prometheus, tokens, base
    finally:
        prometheus.stop()
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def _get(base: str, path: str, token: str | None = None, **params: str) -> tuple[int, Any]:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body


def _shape(value: Any) -> Any:
    """The JSON types of a value: dicts by key, lists by their first item."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _as_set(stats: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(s["name"], s["value"]) for s in stats}


def test_tsdb_status_equals_prometheus(
    both: tuple[ServerProcess, Prometheus, dict[str, str], int],
) -> None:
    server, prometheus, tokens, base = both
    _, theirs = _get(prometheus.url, "/api/v1/status/tsdb")
    status, ours = _get(server.url, "/api/v1/status/tsdb", tokens["acme"])
    assert status == 200 and ours["status"] == "success"
    assert _shape(ours) == _shape(theirs)
    t, o = theirs["data"], ours["data"]
    for key in ("numSeries", "numLabelPairs", "minTime", "maxTime"):
        assert o["headStats"][key] == t["headStats"][key], key
    assert o["headStats"]["numSeries"] == len(SERIES)
    assert o["headStats"]["minTime"] == base
    assert o["headStats"]["maxTime"] == base + 7 * 15_000
    # every list has at most 10 entries here, so no tie is cut: the same entries
    for key in (
        "seriesCountByMetricName",
        "labelValueCountByLabelName",
        "memoryInBytesByLabelName",
        "seriesCountByLabelValuePair",
    ):
        assert _as_set(o[key]) == _as_set(t[key]), key
        values = [s["value"] for s in o[key]]
        assert values == sorted(values, reverse=True), key
    assert _as_set(o["seriesCountByMetricName"]) == {("m_a", 3), ("m_b", 2), ("m_c", 1)}
    assert ("job=api", 4) in _as_set(o["seriesCountByLabelValuePair"])
    # the limit of newer Prometheus releases
    limited = _get(server.url, "/api/v1/status/tsdb", tokens["acme"], limit="2")[1]["data"]
    assert [s["name"] for s in limited["seriesCountByMetricName"]] == ["m_a", "m_b"]
    assert _get(server.url, "/api/v1/status/tsdb", tokens["acme"], limit="0")[0] == 400
    assert _get(server.url, "/api/v1/status/tsdb", tokens["acme"], limit="10001")[0] == 400


def test_tsdb_status_is_per_tenant(
    both: tuple[ServerProcess, Prometheus, dict[str, str], int],
) -> None:
    server, _, tokens, _ = both
    url = f"{server.url}/api/v1/status/tsdb"
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {tokens['other']}", "X-Scope-OrgID": "acme"}
    )
    with urllib.request.urlopen(request) as r:
        data = json.loads(r.read())["data"]
    assert data["headStats"]["numSeries"] == 1
    assert data["seriesCountByMetricName"] == [{"name": "z", "value": 1}]
    assert _get(server.url, "/api/v1/status/tsdb")[0] == 401


def test_runtimeinfo_flags_and_config_have_prometheus_shapes(
    both: tuple[ServerProcess, Prometheus, dict[str, str], int],
) -> None:
    server, prometheus, tokens, _ = both
    _, theirs = _get(prometheus.url, "/api/v1/status/runtimeinfo")
    status, ours = _get(server.url, "/api/v1/status/runtimeinfo", tokens["acme"])
    assert status == 200
    assert _shape(ours) == _shape(theirs)
    info = ours["data"]
    started = dt.datetime.fromisoformat(info["startTime"].replace("Z", "+00:00"))
    assert started <= dt.datetime.now(dt.UTC)
    assert info["storageRetention"] == "30d"
    assert info["corruptionCount"] == 0 and info["reloadConfigSuccess"] is True
    assert info["goroutineCount"] >= 2 and info["GOMAXPROCS"] >= 1

    _, their_flags = _get(prometheus.url, "/api/v1/status/flags")
    _, our_flags = _get(server.url, "/api/v1/status/flags", tokens["acme"])
    # only real Prometheus flags, every value a string, shoal's own values
    assert set(our_flags["data"]) <= set(their_flags["data"])
    assert all(isinstance(v, str) for v in our_flags["data"].values())
    assert our_flags["data"]["query.lookback-delta"] == their_flags["data"]["query.lookback-delta"]
    assert our_flags["data"]["query.timeout"] == "30s"
    assert our_flags["data"]["query.max-samples"] == "5000000"

    _, their_config = _get(prometheus.url, "/api/v1/status/config")
    _, our_config = _get(server.url, "/api/v1/status/config", tokens["acme"])
    assert _shape(our_config) == _shape(their_config)
    parsed = yaml.safe_load(our_config["data"]["yaml"])
    assert parsed["scrape_configs"] == [] and "global" in parsed
    assert _get(server.url, "/api/v1/status/config")[0] == 401


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_format_query_matches_prometheus(
    both: tuple[ServerProcess, Prometheus, dict[str, str], int], method: str
) -> None:
    server, prometheus, tokens, _ = both
    for query in [*FORMAT_QUERIES, "sum(", "foo{"]:
        answers = []
        for base, token in ((prometheus.url, None), (server.url, tokens["acme"])):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            body = urllib.parse.urlencode({"query": query})
            if method == "GET":
                request = urllib.request.Request(
                    f"{base}/api/v1/format_query?{body}", headers=headers
                )
            else:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                request = urllib.request.Request(
                    f"{base}/api/v1/format_query", data=body.encode(), headers=headers
                )
            try:
                with urllib.request.urlopen(request) as r:
                    answers.append((r.status, json.loads(r.read())))
            except urllib.error.HTTPError as exc:
                answers.append((exc.code, json.loads(exc.read())))
        (their_status, theirs), (our_status, ours) = answers
        assert our_status == their_status, (query, theirs, ours)
        if their_status == 200:
            assert ours == theirs, query
        else:
            assert ours["errorType"] == theirs["errorType"] == "bad_data", query


def test_parse_query_tree(both: tuple[ServerProcess, Prometheus, dict[str, str], int]) -> None:
    """A Prometheus 3 endpoint (2.42 answers 404); the tree as its translateAST builds it."""
    server, prometheus, tokens, _ = both
    assert _get(prometheus.url, "/api/v1/parse_query", query="up")[0] == 404
    query = (
        'sum by (job) (rate(foo{a=~"b.*"}[5m] offset 1m)) / on(job) group_left bar @ 120 > bool 1.5'
    )
    status, answer = _get(server.url, "/api/v1/parse_query", tokens["acme"], query=query)
    assert status == 200, answer
    tree = answer["data"]
    assert tree["type"] == "binaryExpr" and tree["op"] == ">" and tree["bool"] is True
    assert tree["matching"] is None  # vector > scalar
    assert tree["rhs"] == {"type": "numberLiteral", "val": "1.5"}
    division = tree["lhs"]
    assert division["op"] == "/" and division["bool"] is False
    assert division["matching"] == {
        "card": "many-to-one",
        "labels": ["job"],
        "on": True,
        "include": [],
        "fillValues": {"lhs": None, "rhs": None},
    }
    assert division["rhs"] == {
        "type": "vectorSelector",
        "name": "bar",
        "offset": 0,
        "offsetExpr": None,
        "matchers": [{"name": "__name__", "value": "bar", "type": "="}],
        "timestamp": 120_000,
        "startOrEnd": None,
        "anchored": False,
        "smoothed": False,
    }
    aggregation = division["lhs"]
    assert {k: aggregation[k] for k in ("type", "op", "param", "grouping", "without")} == {
        "type": "aggregation",
        "op": "sum",
        "param": None,
        "grouping": ["job"],
        "without": False,
    }
    call = aggregation["expr"]
    assert call["func"] == {
        "name": "rate",
        "argTypes": ["matrix"],
        "variadic": 0,
        "returnType": "vector",
    }
    (matrix,) = call["args"]
    assert matrix == {
        "type": "matrixSelector",
        "name": "foo",
        "range": 300_000,
        "rangeExpr": None,
        "offset": 60_000,
        "offsetExpr": None,
        "matchers": [
            {"name": "a", "value": "b.*", "type": "=~"},
            {"name": "__name__", "value": "foo", "type": "="},
        ],
        "timestamp": None,
        "startOrEnd": None,
        "anchored": False,
        "smoothed": False,
    }
    status, answer = _get(
        server.url,
        "/api/v1/parse_query",
        tokens["acme"],
        query="-max_over_time(x[1h:5m] @ end() offset -2m)",
    )
    assert answer["data"]["type"] == "unaryExpr" and answer["data"]["op"] == "-"
    sub = answer["data"]["expr"]["args"][0]
    assert {k: sub[k] for k in ("type", "range", "step", "offset", "timestamp", "startOrEnd")} == {
        "type": "subquery",
        "range": 3_600_000,
        "step": 300_000,
        "offset": -120_000,
        "timestamp": None,
        "startOrEnd": "end",
    }
    for text, val in (("1e21", "1000000000000000000000"), ("-Inf", "-Inf"), ("5e-7", "0.0000005")):
        status, answer = _get(server.url, "/api/v1/parse_query", tokens["acme"], query=text)
        assert answer["data"] == {"type": "numberLiteral", "val": val}
    status, answer = _get(server.url, "/api/v1/parse_query", tokens["acme"], query="sum(")
    assert status == 400 and answer["errorType"] == "bad_data"


def test_string_and_call_nodes(both: tuple[ServerProcess, Prometheus, dict[str, str], int]) -> None:
    server, _, tokens, _ = both
    query = 'label_join(up, "dst", ",", "a") and ignoring(x) (count_values("v", up))'
    _, answer = _get(server.url, "/api/v1/parse_query", tokens["acme"], query=query)
    tree = answer["data"]
    assert tree["matching"]["card"] == "many-to-many" and tree["matching"]["on"] is False
    assert tree["matching"]["labels"] == ["x"]
    join = tree["lhs"]
    assert join["func"]["variadic"] == -1
    assert join["func"]["argTypes"] == ["vector", "string", "string", "string"]
    assert join["args"][1] == {"type": "stringLiteral", "val": "dst"}
    paren = tree["rhs"]
    assert paren["type"] == "parenExpr" and paren["expr"]["param"] == {
        "type": "stringLiteral",
        "val": "v",
    }
