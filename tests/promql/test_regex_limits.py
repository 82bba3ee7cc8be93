"""Patterns that make a backtracking engine run for ever, through a running server.

``shoal serve`` with a 2 s query time limit and two tenants: one asks PromQL (matchers,
``label_replace``, the series endpoint) and SQL with catastrophic patterns over label
values thousands of characters long, while the other asks ordinary queries. Every
answer must come, right, long before a backtracking engine would have finished
(``(a|a)*b`` over forty characters took Python's ``re`` over two minutes; over five
thousand it would never end), and the other tenant's answers must not wait for them.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadtest.ingest import ServerProcess
from loadtest.remote_write import compress, encode
from shoal.auth import TokenStore
from tests.promql.conftest import REPO

LONG = 5_000
VALUES = {
    "a": "a" * LONG,
    "a-bang": "a" * LONG + "!",
    "x": "x" * LONG,
    "ab": "a" * LONG + "b",
}
"""The label ``v`` of each series ``long_labels{name=...}``."""

BOUND_S = 20.0
"""How long any answer may take: ten limits' worth, and nothing next to the time a
backtracking engine needs (doubling with every character)."""

CATASTROPHIC = [
    # (matcher, the names of the series it selects)
    ('v=~"(a|a)*b"', {"ab"}),
    ('v!~"(a|a)*b"', {"a", "a-bang", "x"}),
    ('v=~"(a|a)*c"', set()),
    ('v=~"(a+)+$"', {"a"}),
    ('v!~"(a+)+$"', {"a-bang", "x", "ab"}),
    ('v=~"(x+x+)+y"', set()),
    ('v=~"(x+x+)+"', {"x"}),
    ('v=~"(.*a){20}"', {"a"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("regex-limits")
    store = TokenStore(tmp / "data")
    tokens = {t: store.create(t, frozenset({"ingest", "query"}))[0] for t in ("noisy", "quiet")}
    proc = ServerProcess(
        tmp / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_QUERY_TIMEOUT_S": "2"},
        log_path=tmp / "server.log",
    )
    proc.start()
    try:
        now = int(time.time() * 1000)
        samples = [(now - 60_000 + 15_000 * i, float(i)) for i in range(4)]
        _write(
            proc.url,
            tokens["noisy"],
            [
                ({"__name__": "long_labels", "name": name, "v": value}, samples)
                for name, value in VALUES.items()
            ],
        )
        _write(
            proc.url,
            tokens["quiet"],
            [({"__name__": "plain", "job": f"j{i}"}, samples) for i in range(3)],
        )
        yield proc.url, tokens
    finally:
        proc.kill()


def _write(url: str, token: str, series: list[tuple[dict[str, str], Any]]) -> None:
    answer = httpx.post(
        f"{url}/api/v1/write",
        content=compress(encode(series)),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
        timeout=30,
    )
    assert answer.status_code in (200, 204), answer.text


def _get(url: str, token: str, path: str, params: dict[str, str]) -> tuple[float, httpx.Response]:
    began = time.monotonic()
    answer = httpx.get(
        f"{url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=BOUND_S + 10,
    )
    return time.monotonic() - began, answer


def _names(answer: httpx.Response) -> set[str]:
    body = answer.json()
    assert body["status"] == "success", body
    data = body["data"]
    rows = data["result"] if isinstance(data, dict) else data
    return {row.get("metric", row)["name"] for row in rows}


@pytest.mark.parametrize(("matcher", "names"), CATASTROPHIC)
def test_matchers_answer_right_and_in_time(
    matcher: str, names: set[str], server: tuple[str, dict[str, str]]
) -> None:
    url, tokens = server
    took, answer = _get(
        url, tokens["noisy"], "/api/v1/query", {"query": f"long_labels{{{matcher}}}"}
    )
    assert took < BOUND_S
    assert _names(answer) == names
    took, answer = _get(
        url, tokens["noisy"], "/api/v1/series", {"match[]": f"long_labels{{{matcher}}}"}
    )
    assert took < BOUND_S
    assert _names(answer) == names


def test_label_replace_answers_in_time(server: tuple[str, dict[str, str]]) -> None:
    url, tokens = server
    query = 'label_replace(long_labels, "m", "$2", "v", "(a|a)*(b)")'
    took, answer = _get(url, tokens["noisy"], "/api/v1/query", {"query": query})
    assert took < BOUND_S
    body = answer.json()
    assert body["status"] == "success", body
    replaced = {r["metric"]["name"]: r["metric"].get("m") for r in body["data"]["result"]}
    assert replaced == {"a": None, "a-bang": None, "x": None, "ab": "b"}


def test_sql_regular_expressions_are_linear_too(server: tuple[str, dict[str, str]]) -> None:
    # DataFusion's regexp functions and operators run on Rust's regex crate (no backtracking)
    url, tokens = server
    sql = (
        f"SELECT regexp_like(repeat('a', {LONG}), '^(?:(a|a)*b)$') AS one, "
        f"repeat('a', {LONG}) || '!' ~ '^(a+)+$' AS two, "
        f"regexp_replace(repeat('x', {LONG}), '(x+x+)+y', 'z') = repeat('x', {LONG}) AS three"
    )
    began = time.monotonic()
    answer = httpx.post(
        f"{url}/api/v1/sql",
        json={"query": sql},
        headers={"Authorization": f"Bearer {tokens['noisy']}"},
        timeout=BOUND_S + 10,
    )
    assert time.monotonic() - began < BOUND_S
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [[False, False, True]], answer.json()
    refused = httpx.post(
        f"{url}/api/v1/sql",
        json={"query": r"SELECT 'aa' ~ '(a)\1' AS x"},
        headers={"Authorization": f"Bearer {tokens['noisy']}"},
        timeout=BOUND_S + 10,
    )
    assert refused.status_code == 400
    assert "backreferences are not supported" in refused.text


def test_another_tenant_is_answered_meanwhile(server: tuple[str, dict[str, str]]) -> None:
    url, tokens = server
    noisy = [f"long_labels{{{m}}}" for m, _ in CATASTROPHIC] * 3
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        running = [
            pool.submit(_get, url, tokens["noisy"], "/api/v1/query", {"query": q}) for q in noisy
        ] + [  # the metric browser's selectors too (their matchers narrow the index rows)
            pool.submit(_get, url, tokens["noisy"], "/api/v1/series", {"match[]": q}) for q in noisy
        ]
        quiet = [
            _get(url, tokens["quiet"], "/api/v1/query", {"query": "sum(plain)"}) for _ in range(5)
        ]
        for took, answer in quiet:
            assert took < BOUND_S
            assert answer.json()["data"]["result"][0]["value"][1] == "9"
        for future in running:
            took, answer = future.result()
            assert took < BOUND_S
            assert answer.json()["status"] == "success"
