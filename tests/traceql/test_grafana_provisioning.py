"""deploy/grafana for traces: the Tempo data source, its links to metrics and the service
graph, the exemplar link of the Prometheus data source, and the service overview
dashboard, whose every query runs over spans sent over OTLP."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shoal.sql.service import QueryService
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .helpers import T0, app_client, ingest
from .test_service_graph import _traffic

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
SOURCES = ROOT / "provisioning" / "datasources"


def _source(name: str) -> dict[str, Any]:
    (source,) = yaml.safe_load((SOURCES / name).read_text())["datasources"]
    return dict(source)


def test_the_tempo_data_source_is_provisioned() -> None:
    source = _source("shoal-tempo.yaml")
    assert source["type"] == "tempo" and source["url"] == "${SHOAL_URL}"
    data = source["jsonData"]
    assert data["httpHeaderName1"] == "Authorization"
    assert source["secureJsonData"]["httpHeaderValue1"] == "Bearer ${SHOAL_GRAFANA_TOKEN}"
    assert data["streamingEnabled"] == {"search": False, "metrics": False}
    prometheus = _source("shoal-prometheus.yaml")
    assert data["serviceMap"]["datasourceUid"] == prometheus["uid"]
    assert data["tracesToMetrics"]["datasourceUid"] == prometheus["uid"]
    assert data["tracesToLogsV2"]["datasourceUid"] == "shoal-loki"
    # the exemplar link of the Prometheus data source opens traces here
    (link,) = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert link == {"name": "trace_id", "datasourceUid": source["uid"]}
    # provisioning expands $VAR: a literal $ is written $$
    for query in data["tracesToMetrics"]["queries"]:
        assert "$$__tags" in query["query"]


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[tuple[Harness, SyncClient, QueryService]]:
    harness = Harness(tmp_path / "data")
    requests, _, _ = _traffic()
    ingest(harness, "default", requests[0])
    harness.flush("default", "spans")
    ingest(harness, "default", requests[1])
    service = harness.service()
    with app_client(harness.data_dir, service, anonymous=True) as tc:
        yield harness, tc, service
    service.shutdown()


def test_traces_to_metrics_queries_answer(
    loaded: tuple[Harness, SyncClient, QueryService],
) -> None:
    _, client, _ = loaded
    data = _source("shoal-tempo.yaml")["jsonData"]["tracesToMetrics"]
    (tag,) = data["tags"]
    for query in data["queries"]:
        # what Grafana sends for a span of service "cart": $__tags from the span's tags
        expr = query["query"].replace("$$__tags", f'{tag["value"]}="cart"')
        answer = client.post(
            "/api/v1/query",
            data={"query": expr, "time": str(T0 // 10**9 + 30 * 60)},
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ).json()
        assert answer["status"] == "success", (query, answer)
        assert answer["data"]["result"], query["name"]


def _expand(sql: str, services: list[str]) -> str:
    start = dt.datetime.fromtimestamp(T0 // 10**9, dt.UTC)
    end = start + dt.timedelta(hours=1)

    def group(match: re.Match[str]) -> str:
        column, interval = (a.strip() for a in match.group(1).split(","))
        seconds = {"s": 1, "m": 60, "h": 3600}[interval.strip("'")[-1]] * int(
            interval.strip("'")[:-1]
        )
        return f'floor(extract(epoch from {column})/{seconds})*{seconds} AS "time"'

    sql = re.sub(r"\$__timeGroupAlias\(([^)]*)\)", group, sql)
    sql = re.sub(
        r"\$__timeFilter\(([^)]*)\)",
        lambda m: (
            f"{m.group(1)} BETWEEN '{start:%Y-%m-%dT%H:%M:%SZ}' AND '{end:%Y-%m-%dT%H:%M:%SZ}'"
        ),
        sql,
    )
    return sql.replace("$service", ", ".join(f"'{s}'" for s in services))


def test_the_service_overview_dashboard_queries_run(
    loaded: tuple[Harness, SyncClient, QueryService],
) -> None:
    _, _, service = loaded
    dashboard = json.loads((ROOT / "dashboards" / "service-overview.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["tempo"]["type"] == "datasource" and variables["tempo"]["query"] == "tempo"
    services = service.run_sync("default", _expand(variables["service"]["query"], [])).column(0)
    assert sorted(services.to_pylist()) == ["auth", "cart", "db", "frontend", "mailer", "orders"]
    chosen = ["cart", "db", "auth"]
    for panel in dashboard["panels"]:
        (target,) = panel["targets"]
        rows = service.run_sync("default", _expand(target["rawSql"], chosen)).to_pylist()
        assert rows, panel["title"]
        if panel["type"] == "timeseries":
            assert {r["metric"] for r in rows} == set(chosen), panel["title"]
            if "Requests" in panel["title"]:
                per_minute = [r for r in rows if r["metric"] == "cart"]
                assert sum(r["value"] for r in per_minute) * 60 == pytest.approx(150)
            if "Error" in panel["title"]:
                assert all(0 <= r["value"] <= 1 for r in rows)
        else:
            durations = [r["duration_ms"] for r in rows]
            assert durations == sorted(durations, reverse=True) and len(rows) == 20
            (link,) = panel["fieldConfig"]["overrides"][0]["properties"][0]["value"]
            assert "${tempo}" in link["url"] and "${__value.raw}" in link["url"]
            assert "traceql" in link["url"]
