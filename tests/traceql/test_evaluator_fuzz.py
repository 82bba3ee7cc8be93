"""TraceQL's evaluator fuzzed against the independent answer: Hypothesis writes queries
(conditions on every kind of field and literal, nested ``&&``/``||``/``!``, spanset and
structural operators, pipeline stages) over a corpus of traces sent over OTLP, half of
them flushed; each search's trace sets and spansets must equal what plain Python
computes from the spans sent (tests/traceql/oracle.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.traceql.parser import parse
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .corpus import METHODS, NAMES, REGIONS, SERVICES, corpus
from .helpers import app_client, ingest, search_all
from .oracle import Trace, answer

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SyncClient, dict[str, Trace]]]:
    harness = Harness(tmp_path_factory.mktemp("fuzz") / "data")
    requests, traces = corpus(160, seed=11, batches=2)
    ingest(harness, "default", requests[0])
    harness.flush("default", "spans")
    ingest(harness, "default", requests[1])  # the rest of each trace stays unflushed
    service = harness.service()
    with app_client(harness.data_dir, service, anonymous=True) as client:
        yield client, traces
    service.shutdown()


def _quoted(values: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from([f'"{v}"' for v in values])


STRING_FIELDS = {
    "span.http.method": _quoted([*METHODS, "get"]),
    "resource.service.name": _quoted([*SERVICES, "nobody"]),
    "resource.region": _quoted(REGIONS),
    ".region": _quoted([*REGIONS, *(f"span-{r}" for r in REGIONS)]),
    "name": _quoted(NAMES),
    "rootName": _quoted(NAMES),
    "rootServiceName": _quoted(SERVICES),
    "statusMessage": _quoted(["boom", ""]),
    "event.exception.message": _quoted(["timeout", "refused", "oops"]),
    "event:name": _quoted(["exception", "retry"]),
    "link.link.kind": _quoted(["a", "follows"]),
    "instrumentation:name": _quoted(["http", "grpc"]),
    "span.http.status_code_text": _quoted(["200", "500", "300"]),
    "span.tags": _quoted(["red", "blue", "green"]),
}
NUMBER_FIELDS = {
    "span.http.status_code": st.sampled_from(["200", "404", "500", "499.5", "201"]),
    "span.ratio": st.sampled_from(["0.5", "1.25", "2", "-3.5", "0"]),
    "event.attempt": st.sampled_from(["1", "2", "3"]),
    ".tags": st.sampled_from(["7", "2.5", "5"]),
    "span:childCount": st.sampled_from(["0", "1", "2", "3"]),
}
DURATION_FIELDS = {
    "duration": st.sampled_from(["1us", "2ms", "40ms", "300ms", "2s", "100ms"]),
    "traceDuration": st.sampled_from(["100ms", "500ms", "2s", "3s"]),
}
ENUM_FIELDS = {
    "status": st.sampled_from(["ok", "error", "unset"]),
    "kind": st.sampled_from(["server", "client", "internal", "producer", "consumer"]),
    "span.cached": st.sampled_from(["true", "false"]),
}
ORDERED = ["=", "!=", ">", ">=", "<", "<="]
PATTERNS = ['"c.*"', '".*east"', '"GET.*|POST.*"', '"(cart|auth)"', '"t.*"', '".*"']


@st.composite
def leaves(draw: st.DrawFn) -> str:
    family = draw(st.sampled_from(["string", "number", "duration", "enum", "nil", "regex"]))
    if family == "string":
        field = draw(st.sampled_from(sorted(STRING_FIELDS)))
        return f"{field} {draw(st.sampled_from(ORDERED))} {draw(STRING_FIELDS[field])}"
    if family == "number":
        field = draw(st.sampled_from(sorted(NUMBER_FIELDS)))
        return f"{field} {draw(st.sampled_from(ORDERED))} {draw(NUMBER_FIELDS[field])}"
    if family == "duration":
        field = draw(st.sampled_from(sorted(DURATION_FIELDS)))
        return f"{field} {draw(st.sampled_from(ORDERED))} {draw(DURATION_FIELDS[field])}"
    if family == "enum":
        field = draw(st.sampled_from(sorted(ENUM_FIELDS)))
        return f"{field} {draw(st.sampled_from(['=', '!=']))} {draw(ENUM_FIELDS[field])}"
    if family == "nil":
        field = draw(st.sampled_from(sorted({*STRING_FIELDS, *NUMBER_FIELDS} - {"name"})))
        return f"{field} {draw(st.sampled_from(['=', '!=']))} nil"
    field = draw(st.sampled_from(sorted(STRING_FIELDS)))
    return f"{field} {draw(st.sampled_from(['=~', '!~']))} {draw(st.sampled_from(PATTERNS))}"


@st.composite
def conditions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth < 2 and draw(st.integers(0, 2)) == 0:
        left = draw(conditions(depth + 1))
        right = draw(conditions(depth + 1))
        text = f"({left}) {draw(st.sampled_from(['&&', '||']))} ({right})"
        return f"!({text})" if draw(st.integers(0, 4)) == 0 else text
    return draw(leaves())


@st.composite
def spansets(draw: st.DrawFn) -> str:
    def one() -> str:
        return "{ }" if draw(st.integers(0, 5)) == 0 else f"{{ {draw(conditions())} }}"

    text = one()
    for _ in range(draw(st.integers(0, 2))):
        op = draw(
            st.sampled_from(
                ["&&", "||", ">", "<", ">>", "<<", "~", "!>", "!<", "!>>", "!<<", "&>", "&>>", "&~"]
            )
        )
        text = f"({text}) {op} {one()}"
    return text


STAGES = [
    "count() > 2",
    "count() = 1",
    "avg(duration) > 100ms",
    "max(duration) >= 1s",
    "min(duration) < 1ms",
    "sum(span.http.status_code) > 700",
    "by(resource.service.name)",
    "by(kind)",
    "coalesce()",
    "select(span.http.method)",
    "{ status = error }",
    '{ resource.region = "eu-west" }',
]


@st.composite
def queries(draw: st.DrawFn) -> str:
    text = draw(spansets())
    for stage in draw(st.lists(st.sampled_from(STAGES), max_size=2)):
        text += f" | {stage}"
    return text


@FUZZ
@given(query=queries())
def test_generated_queries_match_the_oracle(
    loaded: tuple[SyncClient, dict[str, Trace]], query: str
) -> None:
    client, traces = loaded
    expected = answer(traces, parse(query))
    got: dict[str, set[frozenset[str]]] = {}
    for trace in search_all(client, query)["traces"]:
        found = trace["traceID"].rjust(32, "0")
        got[found] = {frozenset(s["spanID"] for s in ss["spans"]) for ss in trace["spanSets"]}
    assert got == expected, query
