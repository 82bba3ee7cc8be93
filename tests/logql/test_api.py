"""Loki's query API on a real server: the token decides the tenant (another tenant's
token, or an X-Scope-OrgID naming another tenant, sees nothing), user patterns run on
RE2 (a catastrophic one cannot hold a worker or delay another tenant), what is not
implemented is a 400 naming it, categorised labels as Grafana asks for them, and the
label browser, index and Drilldown calls."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import pytest

from loadtest import loki as push
from tests.lokipush.conftest import Loki, get, push_streams, serve

T0 = (time.time_ns() // 60_000_000_000 - 30) * 60_000_000_000
MINUTE = 60_000_000_000


@pytest.fixture(scope="module")
def pushed(loki: Loki) -> Loki:
    streams: list[push.Stream] = [
        (
            {"app": "shop", "env": "prod"},
            [
                (
                    T0 + i * 1_000_000_000,
                    f'level={("info", "error")[i % 2]} msg="order {i}" took={i}ms',
                    {"trace_id": f"{i:032x}"},
                )
                for i in range(60)
            ],
        ),
        (
            {"app": "auth", "env": "dev"},
            [(T0 + i * 1_000_000_000, '{"level":"warn","user":"x"}') for i in range(10)],
        ),
        ({"app": "slow"}, [(T0, "a" * 5000 + "!")]),
    ]
    push_streams(loki, streams)
    return loki


def q(
    loki: Loki,
    path: str,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    **params: str,
) -> tuple[int, Any]:
    params.setdefault("start", str(T0 - MINUTE))
    params.setdefault("end", str(T0 + 10 * MINUTE))
    return get(loki.url, path, params, token or loki.token, headers)


def test_the_token_decides_the_tenant(pushed: Loki) -> None:
    status, found = q(pushed, "/loki/api/v1/labels")
    assert status == 200 and found["data"] == ["app", "env", "service_name"]
    for headers in (None, {"X-Scope-OrgID": "acme"}):
        status, found = q(pushed, "/loki/api/v1/labels", pushed.other, headers)
        assert status == 200 and found["data"] == []
        status, found = q(
            pushed, "/loki/api/v1/query_range", pushed.other, headers, query='{app="shop"}'
        )
        assert status == 200 and found["data"]["result"] == []
        status, found = q(
            pushed, "/loki/api/v1/series", pushed.other, headers, **{"match[]": '{app=~".+"}'}
        )
        assert found["data"] == []
    # the reader (query role only) reads; without a token, or with only ingest, nothing
    assert q(pushed, "/loki/api/v1/labels", pushed.reader)[0] == 200
    assert get(pushed.url, "/loki/api/v1/labels", {}, None)[0] == 401


def test_queries_and_the_label_browser(pushed: Loki) -> None:
    status, found = q(pushed, "/loki/api/v1/label/app/values")
    assert found["data"] == ["auth", "shop", "slow"]
    status, found = q(pushed, "/loki/api/v1/label/app/values", query='{env="prod"}')
    assert found["data"] == ["shop"]
    status, found = q(pushed, "/loki/api/v1/series", **{"match[]": '{env=~"prod|dev"}'})
    assert found["data"] == [
        {"app": "auth", "env": "dev", "service_name": "auth"},
        {"app": "shop", "env": "prod", "service_name": "shop"},
    ]
    status, found = q(
        pushed,
        "/loki/api/v1/query_range",
        query='{app="shop"} | logfmt | took > 55ms',
        limit="3",
        direction="forward",
    )
    assert status == 200
    lines = [v[1] for s in found["data"]["result"] for v in s["values"]]
    assert sorted(lines) == sorted(
        f'level={("info", "error")[i % 2]} msg="order {i}" took={i}ms' for i in (56, 57, 58)
    )
    assert found["data"]["stats"]["summary"]["totalEntriesReturned"] == 3
    status, found = q(
        pushed,
        "/loki/api/v1/query_range",
        step="60",
        query='sum by (level) (count_over_time({app="shop"} | logfmt [1m]))',
    )
    assert found["data"]["resultType"] == "matrix"
    totals = {
        s["metric"]["level"]: sum(float(v) for _, v in s["values"]) for s in found["data"]["result"]
    }
    assert totals == {"info": 30.0, "error": 30.0}
    status, found = q(
        pushed,
        "/loki/api/v1/query",
        query='count_over_time({app="auth"}[1h])',
        time=str(T0 + 5 * MINUTE),
    )
    assert found["data"]["result"][0]["value"][1] == "10"
    status, found = q(pushed, "/loki/api/v1/index/stats", query='{app="shop"}')
    assert (
        found == {"streams": 1, "chunks": 1, "entries": 60, "bytes": found["bytes"]}
        and found["bytes"] > 1000
    )
    status, found = q(pushed, "/loki/api/v1/index/volume", query='{app=~".+"}', targetLabels="env")
    assert {tuple(r["metric"].items()) for r in found["data"]["result"]} == {
        (("env", "prod"),),
        (("env", "dev"),),
        (),
    }
    status, found = q(pushed, "/loki/api/v1/index/volume_range", query='{app="shop"}', step="300")
    assert found["data"]["resultType"] == "matrix"
    status, found = q(pushed, "/loki/api/v1/detected_labels", query='{app=~".+"}')
    assert {"label": "app", "cardinality": 3} in found["detectedLabels"]
    status, found = q(pushed, "/loki/api/v1/detected_fields", query='{app="shop"}')
    fields = {f["label"]: f for f in found["fields"]}
    assert fields["took"]["type"] == "duration" and fields["took"]["parsers"] == ["logfmt"]
    assert fields["trace_id"]["parsers"] is None  # structured metadata
    status, found = q(pushed, "/loki/api/v1/format_query", query='{app="shop"}|="x"|json')
    assert found["data"] == '{app="shop"} |= "x" | json'
    status, found = q(pushed, "/loki/api/v1/status/buildinfo")
    assert found["version"].startswith("3.")
    assert get(pushed.url, "/ready")[0] == 200


@pytest.mark.parametrize(
    ("query", "entries"),
    [
        ('{app="auth"}', 10),  # service_name discovered from app: one service's rows
        ('{service_name=~"auth|slow"}', 11),
        ('{env="dev"} |= "warn"', 10),
        ('{env="nope"}', 0),
        ('{app=~".+", app!="shop"}', 11),
    ],
)
def test_a_selector_reads_only_the_services_it_selects(
    pushed: Loki, query: str, entries: int
) -> None:
    """The log index names the services of the streams a selector selects, and the read
    is narrowed to them: the lines processed are the selected streams' lines, not every
    line of the range."""
    status, found = q(pushed, "/loki/api/v1/query_range", query=query, limit="1000")
    assert status == 200, found
    returned = sum(len(s["values"]) for s in found["data"]["result"])
    assert returned == entries
    assert found["data"]["stats"]["summary"]["totalLinesProcessed"] == entries


def test_categorized_labels_as_grafana_asks(pushed: Loki) -> None:
    _, found = q(
        pushed,
        "/loki/api/v1/query_range",
        query='{app="shop"} | logfmt',
        limit="2",
        headers={"X-Loki-Response-Encoding-Flags": "categorize-labels"},
    )
    data = found["data"]
    assert data["encodingFlags"] == ["categorize-labels"]
    assert [s["stream"] for s in data["result"]] == [
        {"app": "shop", "env": "prod", "service_name": "shop"}
    ]
    entry = data["result"][0]["values"][0]
    assert entry[2]["structuredMetadata"] == {"detected_level": "error", "trace_id": f"{59:032x}"}
    assert entry[2]["parsed"] == {"level": "error", "msg": "order 59", "took": "59ms"}


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ('{app="shop"} | distinct level', "distinct"),
        ('{app="shop"} |> "<_> level"', "|>"),
        ('approx_topk(2, count_over_time({app="shop"}[1m]))', "approx_topk"),
        ('label_join(count_over_time({app="shop"}[1m]), "a", ",", "b")', "label_join"),
        ('{app="shop"} | line_format "{{ printf \\"%s\\" .app }}"', "printf"),
        ('{app="shop"} |= ip("1.2.3.4")', "ip"),
        ('{app="shop"', "unexpected end"),
        ('{app=~".*"}', "empty-compatible"),
        ('{app="shop"} |~ "a(?=b)"', "invalid"),
    ],
)
def test_what_is_not_implemented_is_a_400_naming_it(pushed: Loki, query: str, named: str) -> None:
    status, found = q(pushed, "/loki/api/v1/query_range", query=query, step="60")
    assert status == 400 and named in found, found
    assert q(pushed, "/loki/api/v1/labels")[0] == 200  # still serving


def test_a_pipeline_error_in_a_metric_query_is_an_error(pushed: Loki) -> None:
    status, found = q(
        pushed,
        "/loki/api/v1/query_range",
        step="60",
        query='count_over_time({app="shop"} | json [1m])',
    )
    assert status == 400 and "JSONParserErr" in found
    # summed by a label, the error still names the whole label set of its series
    status, summed = q(
        pushed,
        "/loki/api/v1/query_range",
        step="60",
        query='sum by (env) (count_over_time({app="shop"} | json [1m]))',
    )
    assert status == 400 and summed == found
    status, found = q(
        pushed,
        "/loki/api/v1/query_range",
        step="60",
        query='count_over_time({app="shop"} | json | __error__="" [1m])',
    )
    assert status == 200 and found["data"]["result"] == []


def test_a_catastrophic_pattern_runs_in_linear_time_and_delays_no_one(pushed: Loki) -> None:
    evil = '{app="slow"} |~ "(a|a|aa)*(a|a)*b"'
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(q, pushed, "/loki/api/v1/query_range", None, None, query=evil)
        time.sleep(0.05)
        other = pool.submit(
            q, pushed, "/loki/api/v1/query_range", pushed.other, None, query='{app="x"}'
        )
        other_status, _ = other.result(timeout=20)
        other_done = time.monotonic() - started
        status, found = slow.result(timeout=20)
    assert status == 200 and found["data"]["result"] == []
    assert other_status == 200
    assert other_done < 10  # Python's backtracking engine takes minutes on this line


def test_a_query_over_a_limit_fails_alone_with_a_message(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # its own server, with a cap of 50 entries read per query (the rows SQL reads: the
    # pushed streams' service_name, from their app label, and |= narrow them)
    limited = serve(tmp_path_factory.mktemp("limits"), {"SHOAL_PROMQL_MAX_SAMPLES": "50"})
    loki = next(limited)
    try:
        push_streams(loki, [({"app": "big"}, [(T0 + i, f"line {i}") for i in range(60)])])
        push_streams(loki, [({"app": "small"}, [(T0 + i, f"line {i}") for i in range(10)])])
        push_streams(loki, [({"app": "big"}, [(T0 + i, "x") for i in range(5)])], token=loki.other)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            over = pool.submit(q, loki, "/loki/api/v1/query_range", query='{service_name="big"}')
            under = pool.submit(q, loki, "/loki/api/v1/query_range", query='{service_name="small"}')
            other = pool.submit(
                q, loki, "/loki/api/v1/query_range", loki.other, query='{service_name="big"}'
            )
            status, message = over.result(timeout=60)
            assert status == 400 and "promql_max_samples" in message, message
            status, found = under.result(timeout=60)
            assert status == 200 and len(found["data"]["result"][0]["values"]) == 10
            status, found = other.result(timeout=60)
            assert status == 200 and len(found["data"]["result"][0]["values"]) == 5
        # the same query narrowed by a line filter is within the limit
        status, found = q(
            loki, "/loki/api/v1/query_range", query='{service_name="big"} |= "line 5"'
        )
        assert status == 200 and len(found["data"]["result"][0]["values"]) == 11
    finally:
        limited.close()
