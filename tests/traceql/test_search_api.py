"""/api/search as Grafana calls it: parameters, Tempo's answer shape, errors, tenancy,
and a pattern that would take Python's backtracking engine minutes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shoal.errors import TraceQLError
from shoal.sql.service import QueryService
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .corpus import corpus
from .helpers import T0, app_client, ingest, rich_trace

TRACE = bytes.fromhex("0000000000000000000000000000abcd")
WINDOW = {"start": T0 // 10**9 - 60, "end": T0 // 10**9 + 7200}


@pytest.fixture
def service(harness: Harness) -> Iterator[QueryService]:
    svc = harness.service(timeout_s=5.0)
    yield svc
    svc.shutdown()


@pytest.fixture
def client(harness: Harness, service: QueryService) -> Iterator[SyncClient]:
    first, second = rich_trace(TRACE)
    ingest(harness, "acme", first)
    harness.flush("acme", "spans")
    ingest(harness, "acme", second)
    requests, _ = corpus(200, seed=3, batches=1)
    ingest(harness, "acme", requests[0])
    with app_client(harness.data_dir, service) as tc:
        yield tc


def _search(client: SyncClient, headers: dict[str, str], **params: Any) -> Any:
    return client.get("/api/search", params={**WINDOW, **params}, headers=headers)


def test_the_answer_has_tempos_shape(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    found = _search(
        client, auth["acme"], q='{ span.http.method = "GET" && status = error }', limit=1000
    )
    assert found.status_code == 200
    body = found.json()
    trace = next(t for t in body["traces"] if t["traceID"] == "abcd")  # leading zeros dropped
    assert trace["rootServiceName"] == "frontend"
    assert trace["rootTraceName"] == "GET /cart"
    assert trace["startTimeUnixNano"] == str(T0 + 1_000_000_123)
    assert trace["durationMs"] == 500
    (spanset,) = trace["spanSets"]
    assert spanset == trace["spanSet"]
    assert spanset["matched"] == 1
    (span,) = spanset["spans"]
    assert span["spanID"] == "00000000000000a1"
    assert span["durationNanos"] == str(500_000_333)
    attrs = {a["key"]: a["value"] for a in span["attributes"]}
    assert attrs == {
        "service.name": {"stringValue": "frontend"},
        "http.method": {"stringValue": "GET"},
        "status": {"stringValue": "error"},
    }
    assert body["metrics"]["inspectedTraces"] > 0


def test_limit_spss_and_order(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    every = _search(client, auth["acme"], q="{ }", limit=1000, spss=1000).json()["traces"]
    assert len(every) == 1 + len({t["traceID"] for t in every[1:]})
    starts = [int(t["startTimeUnixNano"]) for t in every]
    assert starts == sorted(starts, reverse=True)  # most recent first
    few = _search(client, auth["acme"], q="{ }", limit=5, spss=2).json()["traces"]
    assert [t["traceID"] for t in few] == [t["traceID"] for t in every[:5]]
    assert all(len(t["spanSets"][0]["spans"]) <= 2 for t in few)
    assert any(t["spanSets"][0]["matched"] > 2 for t in few)
    default = _search(client, auth["acme"], q="{ }").json()["traces"]
    assert len(default) == 20  # Tempo's default limit


def test_the_older_tag_search(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    found = _search(client, auth["acme"], tags="http.method=get service.name=FRONT", limit=999)
    ids = {t["traceID"] for t in found.json()["traces"]}
    assert "abcd" in ids
    slow = _search(
        client, auth["acme"], tags="service.name=frontend", minDuration="450ms", limit=999
    )
    assert "abcd" in {t["traceID"] for t in slow.json()["traces"]}
    fast = _search(
        client, auth["acme"], tags="service.name=frontend", maxDuration="100ms", limit=999
    )
    assert "abcd" not in {t["traceID"] for t in fast.json()["traces"]}
    bad = _search(client, auth["acme"], minDuration="fast")
    assert bad.status_code == 400 and "minDuration" in bad.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("{ .a = ", "unexpected end of query"),
        ("{ .a = 1 } | rate()", "metrics queries"),
        ("{ nestedSetLeft > 1 }", "not implemented"),
        ("{ parent.x = 1 }", "not implemented"),
        ('{ .a =~ "(?<=x)y" }', "invalid regular expression"),
        ("{ } | by(.a) && { }", "syntax error"),
        ("({ } | by(.a)) && { }", "not implemented"),
        ("{ } | avg(.a) > nil", "compares with numbers"),
        ("{ span.a > 10 * 1024 }", "arithmetic (*)"),
        ("{ } with(sample=0.1)", "the query hint sample is not implemented"),
    ],
)
def test_bad_queries_get_400_with_the_reason(
    client: SyncClient, auth: dict[str, dict[str, str]], query: str, message: str
) -> None:
    answer = _search(client, auth["acme"], q=query)
    assert answer.status_code == 400, answer.text
    assert message in answer.text
    assert _search(client, auth["acme"], q="{ }").status_code == 200  # still serving


def test_bad_parameters(client: SyncClient, auth: dict[str, dict[str, str]]) -> None:
    for params in ({"limit": "x"}, {"limit": "0"}, {"spss": "-1"}, {"start": "soon"}):
        assert _search(client, auth["acme"], q="{}", **params).status_code == 400, params
    reversed_window = {"start": WINDOW["end"], "end": WINDOW["start"]}
    answer = client.get("/api/search", params=reversed_window, headers=auth["acme"])
    assert answer.status_code == 400


def test_other_tenants_and_headers_find_nothing(
    client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    assert _search(client, auth["acme"], q="{ }").json()["traces"]
    assert _search(client, auth["other"], q="{ }").json()["traces"] == []
    widened = {**auth["other"], "X-Scope-OrgID": "acme"}
    assert _search(client, widened, q="{ }").json()["traces"] == []
    assert client.get("/api/search", params=WINDOW).status_code == 401


def test_a_catastrophic_pattern_runs_in_linear_time(
    harness: Harness, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    """``(a|a)*b`` against runs of ``a``: Python's backtracking engine takes minutes on one
    40-character value (holding the GIL, so every other request waits); RE2 is linear.
    Another tenant's search, sent while it runs, is answered as usual."""
    from .helpers import kv

    request = rich_trace(bytes.fromhex("ee" * 16))[1]
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].attributes.append(kv("evil", "a" * 40))
    for i in range(1, 500):  # 500 distinct values, each of them catastrophic for re
        extra = spans.add()
        extra.CopyFrom(spans[0])
        extra.span_id = i.to_bytes(8, "big")
        extra.attributes[-1].value.string_value = "a" * (40 + i)
    ingest(harness, "acme", request)
    params = {**WINDOW, "limit": 20, "spss": 3}

    async def both() -> tuple[Any, Any, float, float]:
        started = time.monotonic()
        evil = asyncio.ensure_future(
            client.client.get(
                "/api/search",
                params={**params, "q": '{ span.evil =~ "(a|a)*b" }'},
                headers=auth["acme"],
            )
        )
        await asyncio.sleep(0.01)  # the evil search is under way
        asked = time.monotonic()
        other = await client.client.get(
            "/api/search", params={**params, "q": "{ }"}, headers=auth["other"]
        )
        waited = time.monotonic() - asked
        return await evil, other, waited, time.monotonic() - started

    evil, other, waited, total = client.run(both())
    assert evil.status_code == 200 and evil.json()["traces"] == []
    assert other.status_code == 200
    assert waited < 5.0 and total < 5.0  # the query time limit of this service: 5 s


def test_a_search_over_its_span_limit_fails_with_the_reason(
    service: QueryService, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    from shoal.traceql.service import SearchRequest, TraceQLService

    small = TraceQLService(service.reader, service, max_spans=50)
    request = SearchRequest(start_ns=T0 - 60 * 10**9, end_ns=T0 + 7200 * 10**9, query="{ }")
    with pytest.raises(TraceQLError, match=r"more than 50 spans \(traceql_max_spans\); narrow"):
        client.run(small.search("acme", request))
    assert _search(client, auth["acme"], q="{ }").status_code == 200


def test_a_search_past_the_time_limit_fails_alone_with_the_reason(
    harness: Harness, client: SyncClient, auth: dict[str, dict[str, str]]
) -> None:
    hurried = harness.service(timeout_s=0.001)
    try:
        with app_client(harness.data_dir, hurried) as fast:
            answer = _search(fast, auth["acme"], q="{ }")
            assert answer.status_code == 503
            assert "query_timeout_s" in answer.text
            tags = fast.get("/api/v2/search/tags", params=WINDOW, headers=auth["acme"])
            assert tags.status_code == 503 and "query_timeout_s" in tags.text
    finally:
        hurried.shutdown()
    assert _search(client, auth["acme"], q="{ }").status_code == 200  # the others serve on
