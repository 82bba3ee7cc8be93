"""deploy/otelcol.yaml, checked against the Collector's documented configuration schema.

No Collector binary can be installed here (its releases come from outside the package
registries), so this is a structural check: current component names only (v0.144.0
renamed the OTLP exporters; the batch processor is deprecated in favour of the
exporters' sending-queue batching; contrib's hostmetrics is now host_metrics), every
pipeline entry defined and every definition used, receivers clear of shoal's ports,
exporters aimed at them with retries for shoal's retryable refusals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from shoal import config as config_mod

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "deploy" / "otelcol.yaml"

# component types by section, as current otelcol-contrib releases name them
CURRENT = {
    "receivers": {"otlp", "host_metrics"},
    "processors": {"memory_limiter"},
    "exporters": {"otlp_grpc", "otlp_http"},
    "extensions": {"file_storage"},
}
DEPRECATED = {"otlp": "exporters", "otlphttp": "exporters", "batch": "processors"}
BATCH_KEYS = {"flush_timeout", "min_size", "max_size", "sizer"}
QUEUE_KEYS = {
    "enabled", "num_consumers", "wait_for_result", "block_on_overflow", "sizer",
    "queue_size", "batch", "storage",
}  # fmt: skip


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def _port(endpoint: str) -> int:
    return int((urlsplit(endpoint) if "//" in endpoint else urlsplit("//" + endpoint)).port or 0)


def test_only_current_component_names(doc: dict[str, Any]) -> None:
    for section, allowed in CURRENT.items():
        for component_id in doc.get(section) or {}:
            kind = _type(component_id)
            assert kind in allowed, f"{section}: {component_id}"
            assert DEPRECATED.get(kind) != section, f"deprecated {section}: {component_id}"
    assert "otelcol-contrib" in CONFIG.read_text().split("receivers:")[0]


def test_pipelines_reference_defined_components_and_use_all(doc: dict[str, Any]) -> None:
    pipelines = doc["service"]["pipelines"]
    assert set(pipelines) == {"metrics", "logs", "traces"}
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline in pipelines.values():
        assert pipeline["receivers"] and pipeline["exporters"]
        for section in used:
            for component_id in pipeline.get(section, []):
                assert component_id in doc[section], component_id
                used[section].add(component_id)
    for section, names in used.items():
        assert names == set(doc[section]), section


def test_receivers_leave_shoals_ports_free(doc: dict[str, Any]) -> None:
    defaults = config_mod.default()
    shoal_ports = {defaults.http_port, defaults.grpc_port, defaults.pg_port}
    protocols = doc["receivers"]["otlp"]["protocols"]
    ports = {_port(p["endpoint"]) for p in protocols.values()}
    assert len(ports) == 2 and not ports & shoal_ports
    assert all(p["endpoint"].startswith("127.0.0.1:") for p in protocols.values())


def test_exporters_reach_shoal_with_batching_and_retries(doc: dict[str, Any]) -> None:
    defaults = config_mod.default()
    for exporter_id, exporter in doc["exporters"].items():
        want = defaults.grpc_port if _type(exporter_id) == "otlp_grpc" else defaults.http_port
        assert _port(exporter["endpoint"]) == want, exporter_id
        assert exporter["headers"]["authorization"] == "Bearer ${env:SHOAL_TOKEN}"
        assert exporter["compression"] == "gzip"
        assert exporter["retry_on_failure"]["enabled"] is True
        queue = exporter["sending_queue"]
        assert set(queue) <= QUEUE_KEYS, exporter_id
        batch = queue["batch"]
        assert set(batch) <= BATCH_KEYS, exporter_id
        assert queue["sizer"] == "items"
        assert 0 < batch["min_size"] <= batch["max_size"] <= queue["queue_size"]
        assert batch["flush_timeout"].endswith("s")
