"""TraceQL searches checked against an independent answer: 2,349 traces of varied shapes
(six services, depths 1-4, errors, events, links, roots that never arrive, spans split
over three requests and two flushes; arrays) sent over OTLP, and 183 queries whose trace sets
and spansets must equal what plain Python computes from the spans sent."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from shoal.otlp import decode
from shoal.sql.service import QueryService
from shoal.traceql.parser import parse
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .corpus import corpus
from .helpers import app_client, search_all
from .oracle import Trace, answer

N_TRACES = 2400

LEAVES = [
    'span.http.method = "GET"',
    'span.http.method != "GET"',
    "span.http.status_code >= 500",
    "span.http.status_code < 300",
    "span.http.status_code = 404",
    "span.http.status_code > 200.5",
    'span.http.status_code = "500"',
    'span.http.status_code_text >= "300"',
    "span.ratio < 1",
    "span.ratio = 2",
    "span.ratio >= -3.5",
    "span.cached = true",
    "span.cached != false",
    "span.cached",
    'span.tags = "red"',
    'span.tags != "red"',
    'span.tags =~ "b.*"',
    "span.tags > 5",
    "span.tags = 2.5",
    "span.tags = nil",
    '.tags = "green"',
    'resource.service.name = "cart"',
    'resource.service.name =~ "c.*"',
    'resource.service.name !~ "(cart|auth)"',
    'resource.region = "eu-west"',
    'resource.region != "eu-west"',
    '.region = "span-us-east"',
    '.region = "us-east"',
    '.region =~ ".*east"',
    "span.http.method = nil",
    "span.http.method != nil",
    "resource.region = nil",
    "status = error",
    "status != ok",
    "status = unset",
    'statusMessage = "boom"',
    "kind = server",
    "kind = client",
    "kind != internal",
    "duration > 100ms",
    "duration <= 2ms",
    "span:duration >= 1s",
    'name = "SELECT"',
    'name =~ "GET.*|POST.*"',
    'span:name != "render"',
    "span:childCount = 0",
    "span:childCount >= 2",
    "traceDuration > 500ms",
    "trace:duration < 100ms",
    'rootName = "GET /cart"',
    'rootServiceName = "frontend"',
    'trace:rootService != "auth"',
    'event:name = "exception"',
    'event.exception.message = "timeout"',
    'event.exception.message =~ "t.*"',
    "event.attempt >= 2",
    "event.exception.message = nil",
    'link.link.kind = "follows"',
    'instrumentation:name = "grpc"',
    "true",
    "false",
]


def _queries() -> list[str]:
    out = [f"{{ {leaf} }}" for leaf in LEAVES]
    out += ["{ }", "{}"]
    pairs = [
        ('span.http.method = "GET"', "status = error"),
        ("kind = server", 'resource.service.name = "cart"'),
        ("span.http.status_code >= 500", "duration > 100ms"),
        ('resource.region = "eu-west"', "span.cached = true"),
        ("status = error", 'statusMessage = "boom"'),
        ('name = "SELECT"', "kind = client"),
        ('event:name = "exception"', 'resource.service.name = "payment"'),
        ("span.ratio < 1", "span.http.method = nil"),
    ]
    for a, b in pairs:
        out.append(f"{{ {a} && {b} }}")
        out.append(f"{{ {a} || {b} }}")
        out.append(f"{{ !({a}) && {b} }}")
        out.append(f"{{ {a} }} && {{ {b} }}")
        out.append(f"{{ {a} }} || {{ {b} }}")
    out.append('{ .region = "us-east" || status = error && kind = server }')
    structural = [
        ('resource.service.name = "frontend"', 'resource.service.name = "cart"'),
        ("kind = server", "kind = client"),
        ("status = error", "status = error"),
        ("", 'name = "SELECT"'),
    ]
    for (a, b), op in itertools.product(
        structural,
        [">", "<", ">>", "<<", "~", "!>", "!<", "!>>", "!<<", "&>", "&<", "&>>", "&<<", "&~"],
    ):
        out.append(f"{{ {a} }} {op} {{ {b} }}")
    out += [
        '{ kind = server } >> { kind = client } >> { name = "SELECT" }',
        "{ status = error } && { kind = server } > { kind = client }",
        "{ } | count() > 5",
        "{ status = error } | count() >= 2",
        "{ kind = client } | count() = 1",
        "{ } | avg(duration) > 200ms",
        "{ } | max(duration) >= 1s",
        "{ } | min(duration) < 1ms",
        "{ } | sum(span.http.status_code) > 1000",
        "{ span.ratio != nil } | avg(span.ratio) < 0",
        "count() > 10",
        "avg(duration) > 1s",
        "{ status = error } | by(resource.service.name)",
        "{ } | by(kind) | count() > 2",
        "{ status = error } | by(resource.service.name) | count() > 1",
        "{ } | by(span.http.method) | { duration > 100ms }",
        "{ } | by(resource.region) | coalesce()",
        "{ kind = server } | select(span.http.method, resource.region)",
        "({ } | count() > 3) && { status = error }",
        "({ kind = server }) || ({ status = error } | count() > 1)",
        '{ resource.service.name = "cart" } | { span.http.method = "POST" }',
        "{ status = error } with(most_recent=true)",
        "{ span.http.status_code = 500 } | by(.region)",
    ]
    return out


QUERIES = _queries()


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SyncClient, dict[str, Trace]]]:
    harness = Harness(tmp_path_factory.mktemp("ground") / "data")
    requests, traces = corpus(N_TRACES)
    for i, request in enumerate(requests):
        result = decode("spans", request.SerializeToString())
        assert result.rejected == 0, result.errors
        harness.ingest("default", "spans", result.table)
        if i < len(requests) - 1:
            harness.flush("default", "spans")  # the last request stays unflushed
    service: QueryService = harness.service()
    with app_client(harness.data_dir, service, anonymous=True) as client:
        yield client, traces
    service.shutdown()


def test_there_are_enough_queries_and_traces(loaded: tuple[SyncClient, dict[str, Trace]]) -> None:
    assert len(QUERIES) >= 150
    _, traces = loaded
    assert len(traces) >= 2000
    assert sum(t.root is None for t in traces.values()) > 100


@pytest.mark.parametrize("query", QUERIES)
def test_search_matches_the_oracle(loaded: tuple[SyncClient, dict[str, Trace]], query: str) -> None:
    client, traces = loaded
    expected = answer(traces, parse(query))
    got: dict[str, set[frozenset[str]]] = {}
    for trace in search_all(client, query)["traces"]:
        full = trace["traceID"].rjust(32, "0")
        got[full] = {frozenset(s["spanID"] for s in ss["spans"]) for ss in trace["spanSets"]}
        for ss in trace["spanSets"]:
            assert ss["matched"] == len(ss["spans"])
    assert set(got) == set(expected), query
    assert got == expected, query
