"""Requests exactly as Grafana's Prometheus data source sends them, against ``shoal serve``.

Grafana cannot be installed here, so its requests are replayed as its source
builds them (pkg/promlib: health check, client; packages/grafana-prometheus:
language provider): form-encoded POSTs for queries and for ``labels``/``series``,
GET for label values, metadata and buildinfo, times as float seconds, the step
in seconds, a ``timeout`` parameter, and the data source's Authorization header.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore
from tests.promql import dataset, otlp_data
from tests.promql.conftest import REPO, post

FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def grafana_target(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, str, int]]:
    tmp = tmp_path_factory.mktemp("grafana")
    data_dir = tmp / "data"
    token, _ = TokenStore(data_dir).create("grafana", frozenset({"query", "ingest"}))
    server = ServerProcess(
        data_dir, env={"PYTHONPATH": str(REPO)}, log_path=tmp / "server.log"
    ).start()
    try:
        base = (int(time.time() * 1000) - 65 * 60_000) // 60_000 * 60_000 + 4321
        status, body = post(
            server.url + "/v1/metrics",
            otlp_data.request(dataset.build(base)),
            {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"},
        )
        assert status == 200, body
        yield server, token, base
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def _form(
    server: ServerProcess, token: str, path: str, params: list[tuple[str, str]]
) -> tuple[int, Any]:
    import json

    status, body = post(
        server.url + path,
        urlencode(params).encode(),
        {"Content-Type": FORM, "Authorization": f"Bearer {token}"},
    )
    return status, json.loads(body)


def _get(server: ServerProcess, token: str, path: str, params: list[tuple[str, str]]) -> Any:
    import urllib.request

    req = urllib.request.Request(
        f"{server.url}{path}?{urlencode(params)}", headers={"Authorization": f"Bearer {token}"}
    )
    import json

    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        return json.loads(resp.read())


def _seconds(ms: int) -> str:
    """Times as Grafana writes them (Go's FormatFloat 'f', -1)."""
    text = repr(ms / 1000)
    return text[:-2] if text.endswith(".0") else text


def test_health_check(grafana_target: tuple[ServerProcess, str, int]) -> None:
    server, token, _ = grafana_target
    # CheckHealth: instant query "1+1" over the time range 1 s .. 4 s, at its end
    status, body = _form(server, token, "/api/v1/query", [("query", "1+1"), ("time", "4")])
    assert status == 200
    assert body == {"status": "success", "data": {"resultType": "scalar", "result": [4, "2"]}}
    # heuristics: buildinfo without "features" makes Grafana treat the source as Prometheus
    info = _get(server, token, "/api/v1/status/buildinfo", [])
    assert info["status"] == "success"
    assert "features" not in info["data"]
    assert info["data"]["version"] >= "2.40"


def test_health_check_without_token_fails(grafana_target: tuple[ServerProcess, str, int]) -> None:
    server, _, _ = grafana_target
    status, body = post(server.url + "/api/v1/query", b"query=1%2B1&time=4", {"Content-Type": FORM})
    assert status == 401
    assert b'"status":"error"' in body


def test_metric_browser(grafana_target: tuple[ServerProcess, str, int]) -> None:
    server, token, base = grafana_target
    # getAdjustedInterval: whole seconds of the dashboard's range
    start, end = str(base // 1000), str((base + 60 * 60_000) // 1000)
    rng = [("start", start), ("end", end)]
    names = _get(server, token, "/api/v1/label/__name__/values", rng)["data"]
    assert names == sorted(
        [
            "http_server_duration_milliseconds_bucket",
            "http_server_duration_milliseconds_count",
            "http_server_duration_milliseconds_sum",
            "http_server_requests_total",
            "queue_size",
            "system_cpu_utilization_ratio",
            "system_memory_usage_bytes",
        ]
    )
    meta = _get(server, token, "/api/v1/metadata", [])["data"]
    assert meta["http_server_requests_total"][0]["type"] == "counter"
    assert meta["http_server_duration_milliseconds"][0]["type"] == "histogram"
    status, labels = _form(server, token, "/api/v1/labels", rng)
    assert status == 200
    assert labels["data"] == [
        "__name__",
        "code",
        "cpu",
        "http_method",
        "http_route",
        "instance",
        "job",
        "le",
        "queue",
        "state",
    ]
    status, labels = _form(
        server, token, "/api/v1/labels", [*rng, ("match[]", "http_server_requests_total")]
    )
    assert labels["data"] == ["__name__", "code", "http_method", "instance", "job"]
    # selecting a metric: its series (with Grafana's series limit), then a label's values
    status, series = _form(
        server,
        token,
        "/api/v1/series",
        [("match[]", '{__name__="queue_size"}'), *rng, ("limit", "40000")],
    )
    assert status == 200
    assert series["data"] == [
        {"__name__": "queue_size", "instance": "api-1", "job": "shop/api", "queue": "a"},
        {"__name__": "queue_size", "instance": "api-1", "job": "shop/api", "queue": "b"},
        {"__name__": "queue_size", "instance": "api-1", "job": "shop/api", "queue": "c"},
    ]
    values = _get(
        server,
        token,
        "/api/v1/label/http_method/values",
        [*rng, ("match[]", 'http_server_requests_total{job="shop/api"}')],
    )["data"]
    assert values == ["DELETE", "GET", "POST", "PUT"]
    # fetchDefaultSeries: job and instance values
    assert _get(server, token, "/api/v1/label/job/values", rng)["data"] == ["shop/api", "worker"]
    assert _get(server, token, "/api/v1/label/instance/values", rng)["data"] == ["api-1", "w-1"]


def test_range_and_instant_queries_as_panels_send_them(
    grafana_target: tuple[ServerProcess, str, int],
) -> None:
    server, token, base = grafana_target
    step = 15
    # Grafana aligns the range to the step
    start = (base // 1000 + 600) // step * step
    end = (base // 1000 + 3600) // step * step
    params = [
        ("query", "sum by (job) (rate(http_server_requests_total[1m]))"),
        ("start", _seconds(start * 1000)),
        ("end", _seconds(end * 1000)),
        ("step", str(step)),
        ("timeout", "60s"),
    ]
    status, body = _form(server, token, "/api/v1/query_range", params)
    assert status == 200, body
    assert body["data"]["resultType"] == "matrix"
    jobs = {s["metric"]["job"]: s["values"] for s in body["data"]["result"]}
    assert set(jobs) == {"shop/api", "worker"}
    for values in jobs.values():
        times = [v[0] for v in values]
        assert times[0] >= start and times[-1] <= end
        assert all(b - a == step for a, b in itertools.pairwise(times))
        assert all(float(v[1]) > 0 for v in values)
    # the same panel with the data source's method set to GET answers the same
    got = _get(server, token, "/api/v1/query_range", params)
    assert got == body
    # an instant ("table") query at the range's end
    status, body = _form(
        server,
        token,
        "/api/v1/query",
        [("query", "topk(3, queue_size)"), ("time", _seconds(end * 1000)), ("timeout", "60s")],
    )
    assert status == 200
    assert [s["metric"]["queue"] for s in body["data"]["result"]] != []
    # exemplars are asked for beside a range query; none were sent, so none come back
    status, body = _form(
        server,
        token,
        "/api/v1/query_exemplars",
        [("query", params[0][1]), ("start", params[1][1]), ("end", params[2][1])],
    )
    assert status == 200
    assert body == {"status": "success", "data": []}


def test_bad_query_is_shown_to_the_user(grafana_target: tuple[ServerProcess, str, int]) -> None:
    server, token, _ = grafana_target
    status, body = _form(
        server,
        token,
        "/api/v1/query_range",
        [("query", "rate(x[5m)"), ("start", "1"), ("end", "100"), ("step", "15")],
    )
    assert status == 400
    assert body["status"] == "error"
    assert body["errorType"] == "bad_data"
    # and the server keeps serving
    status, body = _form(server, token, "/api/v1/query", [("query", "1+1"), ("time", "4")])
    assert status == 200


def test_label_values_is_get_only_like_prometheus(
    grafana_target: tuple[ServerProcess, str, int],
) -> None:
    server, token, _ = grafana_target
    # Grafana never POSTs label values or metadata (endpointsSupportOnlyGet); a POST there
    # is refused as by Prometheus, and Grafana's fallback after a 405 is the GET that works
    status, _ = post(
        server.url + "/api/v1/label/job/values", b"", {"Authorization": f"Bearer {token}"}
    )
    assert status == 405
    assert _get(server, token, "/api/v1/label/job/values", [])["data"] == ["shop/api", "worker"]
