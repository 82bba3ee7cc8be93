"""Regular expressions in PromQL against a real Prometheus 2.42 (Go's RE2 syntax): the
same series selected and relabelled, the same refusals with the same ``errorType``.

Prometheus compiles a matcher or ``label_replace``'s regex as ``^(?:pattern)$`` with
Go's ``regexp``; shoal compiles the same text with RE2 (shoal/regex.py). Series with
label values chosen to tell the engines' dialects apart (case folding, Unicode and
Perl classes, newlines, anchoring) go to both by remote write.
"""

from __future__ import annotations

import time

import pytest

from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from tests.promql.compare import compare
from tests.promql.conftest import get_json, remote_write_to

VALUES = [
    "GET",
    "get",
    "POST",
    "a.b",
    "axb",
    "héllo",
    "HÉLLO",
    "αβγ",
    "0123",
    "٣٤",
    "ab\ncd",
    "a\n",
    "x_1 y",
    "(?i)",
    "a" * 3000 + "b",
]

MATCHERS = [
    r'"(?i)get"',
    r'"G.*|P.*"',
    r'"\\d+"',
    r'"\\w+\\s\\S"',
    r'"\\pL+"',
    r'"\\p{Greek}+"',
    r'"\\PL+"',
    r'"[[:alpha:]]+"',
    r'"[[:^alpha:]]+"',
    r'"a.b"',
    r'"a\\.b"',
    r'"ab.cd"',
    r'"(?s)ab.cd"',
    r'"a$"',
    r'"(?m)a$"',
    r'"(?i)héllo"',
    r'"(?U)a+b"',
    r'"(?P<x>G)ET"',
    r'"[(?i)]+"',
    r'"(a|a)*b"',
    r'"a{2,1000}b"',
    r'".*"',
    r'""',
]

QUERIES = (
    [f"regex_probe{{v=~{m}}}" for m in MATCHERS]
    + [f"regex_probe{{v!~{m}}}" for m in MATCHERS]
    + [
        'label_replace(regex_probe, "out", "$1-${2}", "v", "(.)(.*)")',
        'label_replace(regex_probe, "out", "[$name]", "v", "(?P<name>\\\\pL+)")',
        'label_replace(regex_probe, "out", "$1x$$", "v", "(?i)(g)et")',
        'label_replace(regex_probe, "v", "", "v", "a.*")',
        # compiled as "^(?:a)|(b)$": begins with a, or ends with b
        'label_replace(regex_probe, "out", "y", "v", "a)|(b")',
    ]
)

ERRORS = [
    r'regex_probe{v=~"(a)\\1"}',
    r'regex_probe{v=~"a{1001}"}',
    r'regex_probe{v=~"x(?=y)"}',
    r'regex_probe{v=~"("}',
    r'regex_probe{v=~"a{2,3000}b"}',
    # a matcher must be a regular expression on its own, not only in its wrapped form
    r'regex_probe{v=~"a)|(b"}',
    r'regex_probe{v!~"a)|(b"}',
    'label_replace(regex_probe, "out", "x", "v", "(a)\\\\1")',
    'label_replace(regex_probe, "out", "x", "v", "a{1001}")',
    'label_replace(regex_probe, "out", "x", "v", "x(?<!y)")',
]


@pytest.fixture(scope="module")
def loaded(prometheus: Prometheus, shoal_server: ServerProcess) -> float:
    now = int(time.time() * 1000) // 1000 * 1000
    samples = [(now - 120_000 + 15_000 * i, float(i)) for i in range(8)]
    series = [
        ({"__name__": "regex_probe", "n": str(i), "v": v}, samples) for i, v in enumerate(VALUES)
    ]
    remote_write_to([prometheus.url, shoal_server.url], series)
    return (now - 10_000) / 1000


@pytest.mark.parametrize("query", QUERIES)
def test_same_series_as_prometheus(
    query: str, loaded: float, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    params = {"query": query, "time": loaded}
    theirs = get_json(prometheus.url, "/api/v1/query", params)
    ours = get_json(shoal_server.url, "/api/v1/query", params)
    assert theirs["status"] == "success", theirs
    compare(ours, theirs, query)


@pytest.mark.parametrize("query", ERRORS)
def test_same_refusal_as_prometheus(
    query: str, loaded: float, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    params = {"query": query, "time": loaded}
    theirs = get_json(prometheus.url, "/api/v1/query", params)
    ours = get_json(shoal_server.url, "/api/v1/query", params)
    assert theirs["status"] == "error", theirs
    compare(ours, theirs, query)
    assert "regular expression" in ours["error"] or "regex" in ours["error"], ours
