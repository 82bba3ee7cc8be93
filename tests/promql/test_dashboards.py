"""The shipped Grafana dashboards and provisioning: every panel query and variable query,
as Grafana sends them, answers with data over OTLP host metrics and HTTP server metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.otlp.decode import decode
from tests.sql.api_app import SyncClient, Tokens, client
from tests.sql.helpers import Harness

from .otlp_data import GaugeSeries, HistSeries, Metric, Resource, request

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
BASE = 1_767_225_600_000 + 500
END = BASE + 30 * 60_000
STEP = 15_000


def _times() -> list[int]:
    return list(range(BASE, END + 1, STEP))


def _counter(per_step: float) -> list[tuple[int, float]]:
    return [(t, per_step * i) for i, t in enumerate(_times())]


def _gauge(value: float) -> list[tuple[int, float]]:
    return [(t, value + (i % 7)) for i, t in enumerate(_times())]


def _host(name: str) -> Resource:
    cpu = [
        GaugeSeries({"cpu": f"cpu{c}", "state": s}, _counter(rate))
        for c in range(2)
        for s, rate in (("idle", 10.0), ("user", 3.0), ("system", 2.0))
    ]
    return Resource(
        {"host.name": name, "service.name": "hostmetrics", "service.instance.id": name},
        "hostmetrics",
        name,
        [
            Metric("system.cpu.time", "s", "counter", "system_cpu_time_seconds_total", cpu),
            Metric(
                "system.cpu.load_average.1m",
                "{thread}",
                "gauge",
                "system_cpu_load_average_1m",
                [GaugeSeries({}, _gauge(1.0))],
            ),
            Metric(
                "system.memory.usage",
                "By",
                "updown",
                "system_memory_usage_bytes",
                [GaugeSeries({"state": s}, _gauge(v)) for s, v in (("used", 3e9), ("free", 1e9))],
            ),
            Metric(
                "system.filesystem.usage",
                "By",
                "updown",
                "system_filesystem_usage_bytes",
                [
                    GaugeSeries({"device": "sda1", "mountpoint": "/", "state": s}, _gauge(v))
                    for s, v in (("used", 5e10), ("free", 5e10))
                ],
            ),
            Metric(
                "system.disk.io",
                "By",
                "counter",
                "system_disk_io_bytes_total",
                [
                    GaugeSeries({"device": "sda", "direction": d}, _counter(4096.0))
                    for d in ("read", "write")
                ],
            ),
            Metric(
                "system.network.io",
                "By",
                "counter",
                "system_network_io_bytes_total",
                [
                    GaugeSeries({"device": "eth0", "direction": d}, _counter(1500.0))
                    for d in ("receive", "transmit")
                ],
            ),
            Metric(
                "system.network.errors",
                "{error}",
                "counter",
                "system_network_errors_total",
                [GaugeSeries({"device": "eth0", "direction": "receive"}, _counter(1.0))],
            ),
        ],
    )


def _http(service: str) -> Resource:
    bounds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
    series = []
    for route, code in (("/cart", "200"), ("/cart", "500"), ("/pay", "200")):
        points = [
            (t, [i * n for n in (1, 2, 5, 9, 4, 2, 1, 1, 0)], i * 1.5)
            for i, t in enumerate(_times())
        ]
        series.append(
            HistSeries(
                {
                    "http.request.method": "GET",
                    "http.route": route,
                    "http.response.status_code": code,
                },
                bounds,
                points,
            )
        )
    return Resource(
        {"service.name": service, "service.instance.id": f"{service}-1"},
        service,
        f"{service}-1",
        [
            Metric(
                "http.server.request.duration",
                "s",
                "histogram",
                "http_server_request_duration_seconds",
                series,
            )
        ],
    )


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncClient, dict[str, str]]]:
    harness = Harness(tmp_path_factory.mktemp("dash") / "data")
    result = decode("metrics", request([_host("web-1"), _host("web-2"), _http("shop")]))
    assert result.rejected == 0, result.errors
    harness.ingest("acme", "metrics", result.table)
    harness.flush("acme", "metrics")
    headers = Tokens(harness).create("acme", "query")
    service = harness.service()
    with client(harness, service) as tc:
        yield tc, headers
    service.shutdown()


def _dashboards() -> list[dict[str, Any]]:
    """The shipped dashboards on the Prometheus data source (the others read SQL)."""
    every = [json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))]
    return [d for d in every if any(p["datasource"]["type"] == "prometheus" for p in d["panels"])]


def _expand(expr: str) -> str:
    # what Grafana substitutes before sending: the rate interval and "All" variables
    return expr.replace("$__rate_interval", "1m").replace("$instance", ".*").replace("$job", ".*")


def test_two_dashboards_on_the_provisioned_data_source() -> None:
    dashboards = _dashboards()
    assert {d["uid"] for d in dashboards} == {"shoal-host-metrics", "shoal-http-server"}
    provisioning = (ROOT / "provisioning" / "datasources" / "shoal-prometheus.yaml").read_text()
    assert re.search(r"^\s+type: prometheus$", provisioning, re.M)
    assert re.search(r"^\s+prometheusType: Prometheus$", provisioning, re.M)
    assert re.search(r"^\s+prometheusVersion: 2\.42\.0$", provisioning, re.M)
    assert re.search(r"^\s+httpHeaderName1: Authorization$", provisioning, re.M)
    for d in dashboards:
        for p in d["panels"]:
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


# -- both ways into Grafana: provisioning and the UI's import ------------------------------
#
# Grafana's import (pkg/services/dashboardimport/utils/dash_template_evaluator.go) replaces
# each ${NAME} of the dashboard's `__inputs` with the data source picked in the import form
# and fails when an input is not given; file provisioning stores the JSON as it is, so a
# ${DS_...} placeholder stays a literal uid that names no data source (grafana#10786). A
# data source *variable* (`type: datasource`, `query`: a plugin id) resolves at view time on
# both ways: its options are the data sources whose plugin id, or an alias of it, matches
# the query (public/app/features/variables/datasource/reducer.ts, matchPluginId), and an
# empty `current` picks the default or the first of them, as Grafana's export leaves it.

# plugin ids a data source variable's query matches (the plugin and its aliasIDs)
PLUGIN_IDS = {
    "prometheus": {"prometheus"},
    "postgres": {"grafana-postgresql-datasource", "postgres"},
    "loki": {"loki"},
    "tempo": {"tempo"},
}
# what Grafana itself substitutes in panel and variable queries
BUILTINS = {"__all", "__rate_interval", "__interval", "__range", "__timeFilter", "__timeGroupAlias",
            "__timeGroup", "__from", "__to",
            "__auto"}  # fmt: skip  # __auto: the Loki data source's step for range aggregations


def _all_dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))}


def _refs(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every `datasource` value in the dashboard, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield f"{path}.datasource", value
            yield from _refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _refs(item, f"{path}[{i}]")


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


@pytest.mark.parametrize("name", sorted(_all_dashboards()))
def test_data_sources_are_a_variable_not_a_uid(name: str) -> None:
    dashboard = _all_dashboards()[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    source = variables.get("datasource")
    assert source and source["type"] == "datasource", f"{name}: no data source variable"
    assert source["current"] == {} and source["options"] == [], f"{name}: a stored choice"
    plugin_ids = PLUGIN_IDS[source["query"]]
    refs = list(_refs(dashboard))
    assert len(refs) >= len(dashboard["panels"]) * 2
    for where, ref in refs:
        assert isinstance(ref, dict), f"{name}{where}: {ref!r} names a data source by name"
        assert ref.get("uid") in ("${datasource}", "$datasource"), f"{name}{where}: {ref}"
        assert ref.get("type") in plugin_ids, f"{name}{where}: {ref}"
    for target in (t for p in dashboard["panels"] for t in p["targets"]):
        assert "datasource" in target, f"{name}: a target without a data source"


@pytest.mark.parametrize("name", sorted(_all_dashboards()))
def test_the_json_imports_and_provisions_alike(name: str) -> None:
    """No `__inputs` to fill (provisioning would leave them unfilled), every `$name` a
    variable of the dashboard or one Grafana provides, and no provisioned data source's
    uid anywhere, so the dashboard works under any data source names."""
    dashboard = _all_dashboards()[name]
    assert not dashboard.get("__inputs"), f"{name}: __inputs resolve only on the UI's import"
    assert "id" not in dashboard or dashboard["id"] is None
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for text in _strings(dashboard):
        for ref in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", text):
            used = ref[0] or ref[1]
            assert used in variables or used in BUILTINS, f"{name}: ${used} is not defined"
    provisioned = (ROOT / "provisioning" / "datasources").glob("*.yaml")
    uids = {m for p in provisioned for m in re.findall(r"^\s+uid: (\S+)$", p.read_text(), re.M)}
    text = json.dumps(dashboard)
    named = [u for u in uids if json.dumps(u) in text]  # the whole string, quoted
    assert not named, f"{name} names a provisioned data source's uid"


def test_provisioned_data_sources_are_what_the_variables_list() -> None:
    """Each dashboard's variable finds a provisioned data source of its kind."""
    types = set()
    for path in (ROOT / "provisioning" / "datasources").glob("*.yaml"):
        types |= set(re.findall(r"^\s+type: (\S+)$", path.read_text(), re.M))
    for name, dashboard in _all_dashboards().items():
        (source,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
        assert PLUGIN_IDS[source["query"]] & types, f"{name}: nothing provisioned for it"


def test_every_panel_query_answers_with_data(api: tuple[SyncClient, dict[str, str]]) -> None:
    tc, headers = api
    checked = 0
    for d in _dashboards():
        for p in d["panels"]:
            for target in p["targets"]:
                expr = _expand(target["expr"])
                r = tc.post(
                    "/api/v1/query_range",
                    data={
                        "query": expr,
                        "start": str((BASE + 5 * 60_000) / 1000),
                        "end": str(END / 1000),
                        "step": "30",
                    },
                    headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
                )
                body = r.json()
                assert body["status"] == "success", (d["uid"], p["title"], body)
                assert body["data"]["result"], (d["uid"], p["title"], expr)
                for series in body["data"]["result"]:
                    values = [float(v[1]) for v in series["values"]]
                    assert all(v == v for v in values), (p["title"], series)  # no NaN
                checked += 1
    assert checked == 16


def test_variable_queries(api: tuple[SyncClient, dict[str, str]]) -> None:
    tc, headers = api
    answers = {}
    for d in _dashboards():
        for var in d["templating"]["list"]:
            if var["type"] == "datasource":
                continue
            metric, label = re.fullmatch(
                r"label_values\((\w+), (\w+)\)", var["query"]["query"]
            ).groups()  # type: ignore[union-attr]
            # Grafana turns label_values(metric, label) into this call
            r = tc.get(
                f"/api/v1/label/{label}/values",
                params={"match[]": metric, "start": str(BASE // 1000), "end": str(END // 1000)},
                headers=headers,
            )
            answers[label] = r.json()["data"]
    assert answers == {"instance": ["web-1", "web-2"], "job": ["shop"]}
