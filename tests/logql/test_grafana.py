"""The requests Grafana's Loki data source sends, replayed against a real server, as
Grafana's source builds them (pkg/tsdb/loki: healthcheck.go, api.go's makeDataRequest and
callResource; the logs-volume companion query of Explore; the label browser's resource
calls), and the provisioned data source and logs dashboard of deploy/grafana."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtest import loki as push
from tests.lokipush.conftest import Loki, get, push_streams

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
NOW = time.time_ns()
START = NOW - 3_600_000_000_000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture(scope="module")
def shop(loki: Loki) -> Loki:
    entries: list[push.Entry] = []
    for i in range(120):
        level = ("info", "info", "warn", "error")[i % 4]
        meta = {"trace_id": TRACE} if i % 4 == 3 else {}
        entries.append((START + i * 20_000_000_000, f'level={level} msg="checkout {i}"', meta))
    streams: list[push.Stream] = [
        ({"service_name": "checkout", "env": "prod"}, entries),
        ({"service_name": "cart", "env": "prod"}, [(NOW - 60_000_000_000, "level=error boom")]),
    ]
    push_streams(loki, streams)
    return loki


def grafana(loki: Loki, path: str, params: dict[str, str], **headers: str) -> Any:
    """A request as Grafana's backend sends it: the configured Authorization header."""
    status, found = get(loki.url, path, params, loki.token, headers)
    assert status == 200, found
    return found


def test_save_and_test(shop: Loki) -> None:
    # healthcheck.go: an instant query of vector(1)+vector(1) over the range 1 s .. 4 s
    found = grafana(
        shop,
        "/loki/api/v1/query",
        {"query": "vector(1)+vector(1)", "direction": "backward", "time": "4000000000"},
    )
    result = found["data"]["result"]
    assert found["data"]["resultType"] == "vector" and len(result) == 1
    # Loki reads a time of ten digits or fewer as seconds, this one too; Grafana checks
    # only the value
    assert result[0]["value"] == [4_000_000_000, "2"]


def test_label_browser(shop: Loki) -> None:
    # callResource: labels?, label/<name>/values, series?, index/stats?
    window = {"start": str(START - 60_000_000_000), "end": str(NOW)}
    assert grafana(shop, "/loki/api/v1/labels", window)["data"] == ["env", "service_name"]
    values = grafana(shop, "/loki/api/v1/label/service_name/values", window)["data"]
    assert values == ["cart", "checkout"]
    series = grafana(
        shop, "/loki/api/v1/series", {"match[]": '{service_name="checkout"}', **window}
    )
    assert series["data"] == [{"env": "prod", "service_name": "checkout"}]
    stats = grafana(
        shop, "/loki/api/v1/index/stats", {"query": '{service_name="checkout"}', **window}
    )
    assert stats["streams"] == 1 and stats["entries"] == 120


def test_explore_query_and_its_logs_volume(shop: Loki) -> None:
    # makeDataRequest for a range query: direction, limit, start, end, step in ms
    params = {
        "direction": "backward",
        "limit": "1000",
        "start": str(START - 1),
        "end": str(NOW),
        "step": "20000ms",
    }
    found = grafana(
        shop,
        "/loki/api/v1/query_range",
        {**params, "query": '{service_name="checkout"} | logfmt | level="error"'},
        **{
            "X-Loki-Response-Encoding-Flags": "categorize-labels",
            "X-Query-Tags": "Source=logsample",
        },
    )
    data = found["data"]
    assert data["resultType"] == "streams" and data["encodingFlags"] == ["categorize-labels"]
    entries = [v for s in data["result"] for v in s["values"]]
    assert len(entries) == 30
    assert all(v[2]["structuredMetadata"]["trace_id"] == TRACE for v in entries)  # derived field
    assert "summary" in data["stats"]
    # the logs-volume companion query Explore runs beside it
    # (steps of the range's length: each entry is counted in one step)
    volume = grafana(
        shop,
        "/loki/api/v1/query_range",
        {
            **params,
            "step": "60000ms",
            "query": "sum by (level, detected_level) (count_over_time("
            '{service_name="checkout"} | logfmt | drop __error__[1m]))',
        },
        **{"X-Query-Tags": "Source=logvolhist"},
    )
    totals = {
        s["metric"]["level"]: sum(int(v) for _, v in s["values"]) for s in volume["data"]["result"]
    }
    assert totals == {"info": 60, "warn": 30, "error": 30}


def test_the_provisioned_data_source() -> None:
    config = yaml.safe_load((ROOT / "provisioning" / "datasources" / "shoal-loki.yaml").read_text())
    [source] = config["datasources"]
    assert source["type"] == "loki" and source["url"] == "${SHOAL_URL}"
    assert source["jsonData"]["httpHeaderName1"] == "Authorization"
    assert source["secureJsonData"]["httpHeaderValue1"] == "Bearer ${SHOAL_GRAFANA_TOKEN}"
    [field] = source["jsonData"]["derivedFields"]
    assert field["matcherType"] == "label" and field["matcherRegex"] == "trace_id"
    assert field["datasourceUid"] and field["url"] == "$${__value.raw}"


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads((ROOT / "dashboards" / "logs-loki.json").read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


@pytest.mark.parametrize(("title", "expr"), _panel_queries())
@pytest.mark.parametrize(("service", "search"), [(".+", ""), ("(checkout|cart)", "checkout 1")])
def test_the_logs_dashboard(shop: Loki, title: str, expr: str, service: str, search: str) -> None:
    # Grafana interpolates the variables (All is ".+", several values an alternation)
    # and $__auto before sending the panel's query
    query = expr.replace("$service", service).replace("$search", search)
    query = query.replace("$__auto", "1m")
    variable = grafana(
        shop, "/loki/api/v1/label/service_name/values", {"start": str(START), "end": str(NOW)}
    )
    assert "checkout" in variable["data"]
    found = grafana(
        shop,
        "/loki/api/v1/query_range",
        {
            "query": query,
            "start": str(START),
            "end": str(NOW),
            "step": "60000ms",
            "limit": "1000",
            "direction": "backward",
        },
    )
    assert found["data"]["result"], (title, query)
