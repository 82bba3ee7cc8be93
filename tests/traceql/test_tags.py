"""Tag names and values, v1 and v2, as Grafana's search editor and autocomplete ask."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from shoal.sql.service import QueryService
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .helpers import T0, app_client, ingest, rich_trace

WINDOW = {"start": T0 // 10**9 - 60, "end": T0 // 10**9 + 600}


@pytest.fixture
def client(harness: Harness) -> Iterator[SyncClient]:
    first, second = rich_trace(bytes.fromhex("12" * 16))
    ingest(harness, "acme", first)
    harness.flush("acme", "spans")
    ingest(harness, "acme", second)
    service: QueryService = harness.service()
    with app_client(harness.data_dir, service) as tc:
        yield tc
    service.shutdown()


def _get(client: SyncClient, headers: dict[str, str], path: str, **params: Any) -> Any:
    answer = client.get(path, params={**WINDOW, **params}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_tag_names_v2_by_scope(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    scopes = {
        s["name"]: s["tags"] for s in _get(client, auth["acme"], "/api/v2/search/tags")["scopes"]
    }
    assert scopes["resource"] == ["host.cores", "service.name"]
    assert "http.method" in scopes["span"] and "rpc.system" in scopes["span"]
    assert scopes["event"] == ["attempt", "exception.message"]
    assert scopes["link"] == ["link.kind"]
    assert scopes["instrumentation"] == ["lib"]
    assert "rootServiceName" in scopes["intrinsic"] and "status" in scopes["intrinsic"]
    only = _get(client, auth["acme"], "/api/v2/search/tags", scope="resource")["scopes"]
    assert only == [{"name": "resource", "tags": ["host.cores", "service.name"]}]
    narrowed = _get(
        client,
        auth["acme"],
        "/api/v2/search/tags",
        scope="span",
        q='{ resource.service.name = "cart" }',
    )["scopes"]
    assert narrowed == [{"name": "span", "tags": ["rpc.system"]}]
    limited = _get(client, auth["acme"], "/api/v2/search/tags", scope="span", limit=2)["scopes"]
    assert len(limited[0]["tags"]) == 2


def test_tag_names_v1(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    names = _get(client, auth["acme"], "/api/search/tags")["tagNames"]
    assert "service.name" in names and "http.method" in names
    assert names == sorted(names)
    bad = client.get("/api/search/tags", params={"scope": "everything"}, headers=auth["acme"])
    assert bad.status_code == 400 and "invalid scope" in bad.text


def test_tag_values_v2_are_typed(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    def values(tag: str, **params: Any) -> list[dict[str, str]]:
        path = f"/api/v2/search/tag/{quote(tag, safe='')}/values"
        return list(_get(client, auth["acme"], path, **params)["tagValues"])

    assert values("resource.service.name") == [
        {"type": "string", "value": "cart"},
        {"type": "string", "value": "frontend"},
    ]
    assert values("span.http.status_code") == [{"type": "int", "value": "500"}]
    assert values("span.ratio") == [{"type": "float", "value": "0.25"}]
    assert values("span.cached") == [{"type": "bool", "value": "false"}]
    assert values(".service.name") == values("resource.service.name")
    assert values("status") == [
        {"type": "keyword", "value": "error"},
        {"type": "keyword", "value": "ok"},
        {"type": "keyword", "value": "unset"},
    ]
    assert {"type": "keyword", "value": "server"} in values("kind")
    assert values("name", q='{ resource.service.name = "cart" }') == [
        {"type": "string", "value": "Cart/Get"}
    ]
    assert values("rootServiceName") == [{"type": "string", "value": "frontend"}]
    assert values("event.exception.message") == [{"type": "string", "value": "boom"}]
    assert values("event:name") == [{"type": "string", "value": "exception"}]
    # a half-typed q, as the editor sends it, is ignored
    assert values("resource.service.name", q="{ span.http.method = }") == values(
        "resource.service.name"
    )
    narrowed = values("resource.service.name", q='{ span.http.method = "GET" }')
    assert narrowed == [{"type": "string", "value": "frontend"}]
    assert values("span.http.method", q="{ status = ok }") == []


def test_tag_values_v1(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    got = _get(client, auth["acme"], "/api/search/tag/service.name/values")
    assert got == {"tagValues": ["cart", "frontend"]}
    codes = _get(client, auth["acme"], "/api/search/tag/http.status_code/values")
    assert codes == {"tagValues": ["500"]}


def test_tags_of_another_tenant_are_not_seen(
    client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    other = _get(client, auth["other"], "/api/v2/search/tags")["scopes"]
    assert [s["name"] for s in other] == ["intrinsic"]
    widened = {**auth["other"], "X-Scope-OrgID": "acme"}
    got = _get(client, widened, "/api/v2/search/tag/resource.service.name/values")
    assert got == {"tagValues": []}
    assert client.get("/api/v2/search/tags").status_code == 401
