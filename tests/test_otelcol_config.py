"""deploy/otelcol.yaml against the Collector's own configuration structs.

No Collector binary can be installed here (its releases come from outside the package
registries), so the file is checked against tests/data/otelcol_components.json: the
configuration keys, component names and enum values of each component it uses, read off
the Collector's source at the oldest and the newest release the file says it supports.
Besides: every pipeline entry defined and every definition used, components only in
pipelines of signals they support, receivers clear of shoal's ports, exporters aimed at
shoal with retries and with batches counted in bytes under shoal's message limits, and the
host pipeline giving the host dashboard what it reads.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from shoal import config as config_mod
from tests.otelcol_schema import Checker, component_type, load, spec_for

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "deploy" / "otelcol.yaml"
HOST_DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "host-metrics.json"

# the hostmetrics scraper behind each metric-name prefix the host dashboard reads
# (the longest matching prefix wins: system_cpu_load_average comes from `load`)
SCRAPER_OF_PREFIX = {
    "system_cpu_load_average": "load",
    "system_cpu_": "cpu",
    "system_memory_": "memory",
    "system_filesystem_": "filesystem",
    "system_disk_": "disk",
    "system_network_": "network",
    "system_paging_": "paging",
    "system_processes_": "processes",
}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG.read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return load()


def _port(endpoint: str) -> int:
    return int((urlsplit(endpoint) if "//" in endpoint else urlsplit("//" + endpoint)).port or 0)


def _signal(pipeline_id: str) -> str:
    return pipeline_id.split("/", 1)[0]


def test_supported_range_is_the_one_the_data_was_read_at(data: dict[str, Any]) -> None:
    header = CONFIG.read_text().split("receivers:")[0]
    found = re.search(r"v(\d+\.\d+\.\d+) up to v(\d+\.\d+\.\d+)", header)
    assert found, "the file's header names no supported range 'vX.Y.Z up to vX.Y.Z'"
    assert [f"v{found[1]}", f"v{found[2]}"] == data["versions"], (
        "the range deploy/otelcol.yaml claims differs from the releases "
        "tests/data/otelcol_components.json was read at"
    )
    assert "otelcol-contrib" in header


@pytest.mark.parametrize("version", load()["versions"])
def test_every_key_name_and_value_is_valid(doc: dict[str, Any], version: str) -> None:
    errors = Checker(load(), version).check_config(doc)
    assert not errors, "\n".join(errors)


MUTATIONS = [
    # (what, change to a copy of the file, release that must reject it or None for all)
    ("the receiver's newer name", lambda d: d["receivers"].update(
        host_metrics=d["receivers"].pop("hostmetrics")), "v0.144.0"),
    ("a key from a later release", lambda d: d["processors"]["memory_limiter"].update(
        max_gc_interval_when_soft_limited="30s"), "v0.144.0"),
    ("a misspelt key", lambda d: d["exporters"]["otlp_grpc/shoal"]["sending_queue"].update(
        queue_sise=1), None),
    ("an unknown sizer", lambda d: d["exporters"]["otlp_http/shoal"]["sending_queue"][
        "batch"].update(sizer="requests"), None),
    ("an unknown scraper", lambda d: d["receivers"]["hostmetrics"]["scrapers"].update(
        gpu={}), None),
    ("a bad duration", lambda d: d["receivers"]["hostmetrics"].update(
        collection_interval="30 seconds"), None),
    ("an unknown action", lambda d: d["processors"]["resource/host"]["attributes"][0].update(
        action="set"), None),
    ("a string for a bool", lambda d: d["exporters"]["otlp_grpc/shoal"]["tls"].update(
        insecure="yes"), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "change", "rejected_by"), MUTATIONS, ids=[m[0] for m in MUTATIONS]
)
def test_the_check_rejects(
    doc: dict[str, Any], what: str, change: Any, rejected_by: str | None
) -> None:
    """The check itself: each mistake is found, on the releases that do not take it."""
    data = load()
    broken = copy.deepcopy(doc)
    change(broken)
    for version in data["versions"]:
        errors = Checker(data, version).check_config(broken)
        if rejected_by is None or version == rejected_by:
            assert len(errors) == 1, f"{what} on {version}: {errors}"
        else:
            assert errors == [], f"{what} on {version}: {errors}"


def test_names_are_the_floor_releases_own(doc: dict[str, Any], data: dict[str, Any]) -> None:
    """A deprecated alias on the oldest release would be a name later ones may drop."""
    floor = data["versions"][0]
    for section in data["components"]:
        for component_id in doc.get(section) or {}:
            spec = spec_for(data, section, component_type(component_id))
            assert spec, f"{section}.{component_id}: unknown"
            names = spec["names"][floor]
            assert component_type(component_id) == names[0], (
                f"{section}.{component_id}: {floor} calls it {names[0]!r}"
            )


def test_pipelines_reference_defined_components_of_their_signal(
    doc: dict[str, Any], data: dict[str, Any]
) -> None:
    pipelines = doc["service"]["pipelines"]
    assert {_signal(p) for p in pipelines} == {"metrics", "logs", "traces"}
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline_id, pipeline in pipelines.items():
        assert pipeline["receivers"] and pipeline["exporters"], pipeline_id
        assert set(pipeline) <= {"receivers", "processors", "exporters"}, pipeline_id
        for section in used:
            for component_id in pipeline.get(section, []):
                assert component_id in doc[section], f"{pipeline_id}: {component_id} undefined"
                spec = spec_for(data, section, component_type(component_id))
                assert spec, f"{pipeline_id}: {component_id} unknown"
                assert _signal(pipeline_id) in spec["signals"], f"{pipeline_id}: {component_id}"
                used[section].add(component_id)
        assert pipeline["processors"][0] == "memory_limiter", f"{pipeline_id}: limiter first"
    for section, names in used.items():
        assert names == set(doc[section]), f"{section} defined but unused"


def test_receivers_leave_shoals_ports_free(doc: dict[str, Any]) -> None:
    defaults = config_mod.default()
    shoal_ports = {defaults.http_port, defaults.grpc_port, defaults.pg_port}
    protocols = doc["receivers"]["otlp"]["protocols"]
    ports = {_port(p["endpoint"]) for p in protocols.values()}
    assert len(ports) == 2 and not ports & shoal_ports
    assert all(p["endpoint"].startswith("127.0.0.1:") for p in protocols.values())


def test_exporters_batch_in_bytes_under_shoals_limits(doc: dict[str, Any]) -> None:
    """A batch over shoal's limit is refused for good (RESOURCE_EXHAUSTED / 413): the
    exporters count batches in protobuf bytes, the unit of shoal's limits, not in items."""
    defaults = config_mod.default()
    limits = {"otlp_grpc": defaults.grpc_max_message_bytes, "otlp_http": defaults.max_body_bytes}
    for exporter_id, exporter in doc["exporters"].items():
        kind = component_type(exporter_id)
        want = defaults.grpc_port if kind == "otlp_grpc" else defaults.http_port
        assert _port(exporter["endpoint"]) == want, exporter_id
        assert exporter["headers"]["authorization"] == "Bearer ${env:SHOAL_TOKEN}"
        assert exporter["compression"] == "gzip"
        assert exporter["retry_on_failure"]["enabled"] is True
        queue = exporter["sending_queue"]
        batch = queue["batch"]
        assert queue["sizer"] == "bytes", f"{exporter_id}: items have no bound in bytes"
        assert batch.get("sizer", queue["sizer"]) == "bytes", exporter_id
        assert 0 < batch["min_size"] <= batch["max_size"] <= queue["queue_size"], exporter_id
        assert batch["max_size"] <= limits[kind] * 3 // 4, (
            f"{exporter_id}: batches of {batch['max_size']} bytes leave under a quarter of "
            f"shoal's {limits[kind]}-byte limit"
        )


def test_comment_arithmetic_matches_the_sdks_spans() -> None:
    """The span sizes the file's comment and docs/rationale.md quote, measured again with
    the OpenTelemetry SDK's own encoder."""
    from tests.otelcol_spans import per_span_bytes

    text = CONFIG.read_text()
    plain, with_event = per_span_bytes()
    quoted_plain = re.search(r"8,000 x ([\d,]+) bytes", text)
    quoted_event = re.search(r"MiB at ([\d,]+) bytes", text)
    assert quoted_plain and quoted_event, "the batch comment lost its arithmetic"
    for quoted, measured in ((quoted_plain, plain), (quoted_event, with_event)):
        figure = int(quoted[1].replace(",", ""))
        assert abs(figure - measured) <= measured * 0.05, f"quoted {figure}, measured {measured}"
    assert 8000 * plain > config_mod.default().grpc_max_message_bytes


def _metric_names(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [json.dumps(v.get("query")) for v in dashboard["templating"]["list"]]
    return {m for e in exprs for m in re.findall(r"\bsystem_[a-z0-9_]+", e)}


def test_host_pipeline_feeds_the_host_dashboard(doc: dict[str, Any]) -> None:
    dashboard = json.loads(HOST_DASHBOARD.read_text())
    pipelines = doc["service"]["pipelines"]
    host = [p for p in pipelines.values() if any(
        component_type(r) == "hostmetrics" for r in p["receivers"])]  # fmt: skip
    assert len(host) == 1
    receiver = doc["receivers"][host[0]["receivers"][0]]
    scrapers = set(receiver["scrapers"])
    for name in sorted(_metric_names(dashboard)):
        prefix = max((p for p in SCRAPER_OF_PREFIX if name.startswith(p)), key=len)
        scraper = SCRAPER_OF_PREFIX[prefix]
        assert scraper in scrapers, f"{name} needs the {scraper} scraper"

    # `instance` is service.instance.id: the host pipeline detects host.name and copies it
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "instance" in variables["instance"]["definition"]
    processors = host[0]["processors"]
    detect = [p for p in processors if component_type(p) == "resourcedetection"]
    assert detect and "system" in doc["processors"][detect[0]]["detectors"]
    sets = {
        (a["key"], a.get("from_attribute"), a.get("value"))
        for p in processors
        if component_type(p) == "resource"
        for a in doc["processors"][p]["attributes"]
    }
    assert ("service.instance.id", "host.name", None) in sets
    assert any(key == "service.name" and value for key, _, value in sets)
    assert processors.index(detect[0]) < max(
        processors.index(p) for p in processors if component_type(p) == "resource"
    )
    # applications' own metrics keep the identity they send
    for pipeline_id, pipeline in pipelines.items():
        if pipeline is not host[0]:
            assert not any(
                component_type(p) in {"resource", "resourcedetection"}
                for p in pipeline["processors"]
            ), pipeline_id
