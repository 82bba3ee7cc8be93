"""Trace by id at Tempo's paths: both versions, both encodings, flushed and unflushed parts,
tenancy, and the files of a trace found from their filters."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from shoal.auth import TokenStore
from shoal.otlp import tempo
from shoal.sql.service import QueryService
from shoal.storage.options import TableOptions
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .helpers import T0, app_client, ingest, kv, rich_trace
from .otlp_compare import triples

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
HEX = TRACE.hex()


@pytest.fixture
def service(harness: Harness) -> Iterator[QueryService]:
    svc = harness.service()
    yield svc
    svc.shutdown()


@pytest.fixture
def client(harness: Harness, service: QueryService) -> Iterator[SyncClient]:
    with app_client(harness.data_dir, service) as tc:
        yield tc


def _sent(*requests: ExportTraceServiceRequest) -> list[tuple[bytes, bytes, bytes]]:
    return triples([rs for req in requests for rs in req.resource_spans])


def test_a_trace_split_across_a_flush_comes_back_whole_in_every_form(
    harness: Harness, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    first, second = rich_trace(TRACE)
    ingest(harness, "acme", first)
    assert harness.flush("acme", "spans") == 2
    ingest(harness, "acme", second)  # unflushed
    auth = auth["acme"]
    want = _sent(first, second)

    proto = {"Accept": "application/protobuf", **auth}
    v2 = client.get(f"/api/v2/traces/{HEX}", headers=proto)
    assert v2.status_code == 200, v2.text
    assert v2.headers["content-type"] == "application/protobuf"
    response = tempo.TraceByIDResponse.FromString(v2.content)
    assert triples(response.trace.resourceSpans) == want  # type: ignore[attr-defined]
    assert response.metrics.inspectedBytes > 0  # type: ignore[attr-defined]
    assert response.status == 0  # type: ignore[attr-defined]  # COMPLETE

    v1 = client.get(f"/api/traces/{HEX}", headers=proto)
    assert v1.status_code == 200
    assert triples(TracesData.FromString(v1.content).resource_spans) == want
    # grouped by resource and scope: two resources, three scopes
    data = TracesData.FromString(v1.content)
    assert sorted(len(rs.scope_spans) for rs in data.resource_spans) == [1, 2]

    v1_json = client.get(f"/api/traces/{HEX}", headers=auth).json()
    assert list(v1_json) == ["batches"]
    spans = [s for b in v1_json["batches"] for ss in b["scopeSpans"] for s in ss["spans"]]
    assert {base64.b64decode(s["traceId"]).hex() for s in spans} == {HEX}
    root = next(s for s in spans if s["name"] == "GET /cart")
    assert root["kind"] == "SPAN_KIND_SERVER"
    assert root["startTimeUnixNano"] == str(T0 + 1_000_000_123)
    assert root["status"] == {"code": "STATUS_CODE_ERROR", "message": "internal error"}
    assert {"key": "http.status_code", "value": {"intValue": "500"}} in root["attributes"]

    v2_json = client.get(f"/api/v2/traces/{HEX}", headers=auth).json()
    assert set(v2_json) == {"trace", "metrics"}
    assert len(v2_json["trace"]["resourceSpans"]) == 2

    # a short id is zero-padded, as Tempo reads it; upper case is the same id
    assert client.get(f"/api/traces/{HEX.upper()}", headers=proto).status_code == 200


def test_start_and_end_find_a_trace_only_by_a_span_inside(
    harness: Harness, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    first, second = rich_trace(TRACE)
    ingest(harness, "acme", first)
    ingest(harness, "acme", second)
    auth = auth["acme"]
    t = T0 // 1_000_000_000
    inside = client.get(f"/api/v2/traces/{HEX}?start={t}&end={t + 5}", headers=auth)
    assert inside.status_code == 200
    assert len(inside.json()["trace"]["resourceSpans"]) == 2  # whole
    outside = client.get(f"/api/v2/traces/{HEX}?start={t + 60}&end={t + 120}", headers=auth)
    assert outside.status_code == 404


def test_unknown_and_malformed_ids(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    auth = auth["acme"]
    missing = client.get("/api/traces/" + "1" * 32, headers=auth)
    assert missing.status_code == 404
    assert "trace not found" in missing.text
    # Grafana's v2-then-v1 fallback sees 404 on both
    assert client.get("/api/v2/traces/0", headers=auth).status_code == 404
    for bad in ("xyz", "1" * 33, "12-34"):
        answer = client.get(f"/api/traces/{bad}", headers=auth)
        assert answer.status_code == 400, bad
        assert "invalid trace id" in answer.text
    assert client.get("/api/traces/" + HEX, headers=auth, params={"start": "x"}).status_code == 400


def test_another_tenant_and_its_header_see_nothing(
    harness: Harness, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    first, second = rich_trace(TRACE)
    ingest(harness, "acme", first)
    harness.flush("acme", "spans")
    ingest(harness, "acme", second)
    assert client.get(f"/api/traces/{HEX}", headers=auth["acme"]).status_code == 200
    assert client.get(f"/api/traces/{HEX}", headers=auth["other"]).status_code == 404
    widened = {**auth["other"], "X-Scope-OrgID": "acme"}
    assert client.get(f"/api/v2/traces/{HEX}", headers=widened).status_code == 404
    assert client.get(f"/api/traces/{HEX}").status_code == 401
    assert client.get("/api/echo").status_code == 401
    echo = client.get("/api/echo", headers=auth["other"])
    assert (echo.status_code, echo.text) == (200, "echo\n")
    info = client.get("/api/status/buildinfo", headers=auth["other"]).json()
    assert info["version"].count(".") == 2


def test_the_trace_files_are_found_from_filters_not_a_scan(
    harness: Harness, service: QueryService
) -> None:
    for i in range(6):
        request = ExportTraceServiceRequest()
        spans = request.resource_spans.add().scope_spans.add().spans
        for j in range(50):
            spans.add(
                trace_id=bytes([i + 1]) * 8 + j.to_bytes(8, "big"),
                span_id=(j + 1).to_bytes(8, "big"),
                name="op",
                start_time_unix_nano=T0 + i * 1_000_000,
                end_time_unix_nano=T0 + i * 1_000_000 + 5,
            ).attributes.append(kv("i", i))
        ingest(harness, "acme", request)
        harness.flush("acme", "spans")
    handle = harness.store.open("acme", "spans", create=False)
    files = handle.snapshot().files
    assert len(files) == 6
    wanted = (bytes([4]) * 8 + (7).to_bytes(8, "big")).hex()
    assert len(handle.files_holding(files, wanted)) == 1
    rows, inspected = service.reader.lookup_rows("acme", "spans", wanted)
    assert rows.column("trace_id").to_pylist() == [wanted]
    assert 0 < inspected < sum(f.size for f in files)
    # the filters sit beside the files, and a damaged one is rebuilt from the data
    filters = sorted((harness.data_dir / "tenants/acme/spans/_lookup").iterdir())
    assert len(filters) == 6
    for path in filters:
        path.write_bytes(path.read_bytes()[:-3])
    rebuilt = type(handle)(
        handle.tenant, handle.path, handle.spec, bucket_s=60, options=TableOptions(10)
    )
    assert len(rebuilt.files_holding(files, wanted)) == 1


def test_json_answers_are_json(harness: Harness, client: SyncClient) -> None:
    store = TokenStore(harness.data_dir)
    token, _ = store.create("acme", frozenset({"query"}))
    first, _ = rich_trace(TRACE)
    ingest(harness, "acme", first)
    body = client.get(f"/api/traces/{HEX}", headers={"Authorization": f"Bearer {token}"})
    assert json.loads(body.content)["batches"]
