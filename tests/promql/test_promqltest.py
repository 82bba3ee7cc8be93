"""Prometheus' own engine tests, run against a running ``shoal serve``.

Every ``eval`` of the test files in testdata/prometheus-v2.42 (Prometheus' engine
tests at the version Debian ships, the one tests/promql/test_vs_prometheus.py
compares against) is a test here. The samples of each ``load`` go in by remote
write, into a tenant of their own (a ``clear`` starts a new one; a ``load`` after
an ``eval`` too, so that each ``eval`` sees what Prometheus' run saw), and each
expression is asked over the Prometheus HTTP API the way Prometheus' runner asks
its engine: as an instant query at the given time, then as a range query from a
minute before to a minute after it with a one-minute step, whose point at that
time must give the same answer. Values compare with Prometheus' own tolerance
(relative 1e-6, NaN equal to NaN); ``eval_ordered`` also compares the order. As
Prometheus' runner does, each eval is also asked with every selector pinned by ``@``
to its time, at other times (``test_eval_with_at``).

What shoal answers differently is listed in ``EXCEPTIONS`` with the reason
(docs/rationale.md, "PromQL: the engine test files"); those tests are expected
to fail, strictly, so that a fix shows.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from loadtest.ingest import ServerProcess
from loadtest.remote_write import compress, encode
from shoal.auth import TokenStore
from shoal.errors import PromQLError
from shoal.promql import tree
from shoal.promql.tree import Aggregate, Binary, Call, Neg, Node, Selector, Subquery
from tests.promql.conftest import REPO
from tests.promql.promqltest import TESTDATA, Clear, Eval, Load, almost_equal, parse
from tests.promql.render import render

EXCEPTIONS: dict[str, str] = {}
"""``file:line`` of an eval that shoal answers differently, and why."""


def _cases() -> tuple[list[tuple[str, str, Eval]], dict[str, list[Load]]]:
    """Each eval with the tenant holding what was loaded before it, and each tenant's loads."""
    cases: list[tuple[str, str, Eval]] = []
    tenants: dict[str, list[Load]] = {}
    for path in sorted(TESTDATA.glob("*.test")):
        loads: list[Load] = []
        tenant = ""
        for cmd in parse(path.read_text()):
            if isinstance(cmd, Clear):
                loads = []
                tenant = ""
            elif isinstance(cmd, Load):
                loads = [*loads, cmd]
                tenant = ""
            else:
                if not tenant:
                    tenant = f"{path.stem.replace('_', '-')}-{cmd.line}"
                    tenants[tenant] = loads
                cases.append((path.name, tenant, cmd))
    return cases, tenants


CASES, TENANTS = _cases()


def _param(file: str, tenant: str, case: Eval) -> Any:
    name = f"{file}:{case.line}"
    marks = []
    if name in EXCEPTIONS:
        marks.append(pytest.mark.xfail(strict=True, reason=EXCEPTIONS[name]))
    return pytest.param(tenant, case, id=name, marks=marks)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("promqltest")
    store = TokenStore(tmp / "data")
    tokens = {t: store.create(t, frozenset({"ingest", "query"}))[0] for t in TENANTS}
    proc = ServerProcess(tmp / "data", env={"PYTHONPATH": str(REPO)}, log_path=tmp / "server.log")
    proc.start()
    try:
        for tenant, loads in TENANTS.items():
            for load in loads:
                _write(proc.url, tokens[tenant], load)
        yield proc, tokens
    finally:
        proc.kill()


def _write(base: str, token: str, load: Load) -> None:
    body = compress(encode(load.series))
    req = urllib.request.Request(
        f"{base}/api/v1/write",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status in (200, 204), resp.read()


def _query(base: str, token: str, path: str, params: dict[str, str]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base}{path}",
        data=urllib.parse.urlencode(params).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        answer = json.loads(exc.read())
    return answer


def _float(text: str) -> float:
    return float(text)  # "NaN", "+Inf" and "-Inf" included


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if v != ""))


def _compare(case: Eval, kind: str, found: list[tuple[dict[str, str], float]]) -> None:
    """Prometheus' ``compareResult``: the same series, values within its tolerance."""
    if case.expected and case.expected[0].labels is None:
        assert kind == "scalar", f"expected a scalar, got {kind}"
        assert len(found) == 1
        want = case.expected[0].value
        assert almost_equal(want, found[0][1]), f"expected {want}, got {found[0][1]}"
        return
    assert kind == "vector", f"expected a vector, got {kind}"
    want = {_key(e.labels or {}): (pos, e.value) for pos, e in enumerate(case.expected)}
    seen = set()
    for pos, (labels, value) in enumerate(found):
        key = _key(labels)
        assert key in want, f"unexpected series {labels} = {value}; expected {want}"
        exp_pos, exp_value = want[key]
        if case.ordered:
            assert exp_pos == pos, f"{labels} at position {pos}, expected {exp_pos}"
        assert almost_equal(exp_value, value), f"expected {exp_value} for {labels}, got {value}"
        seen.add(key)
    missing = set(want) - seen
    assert not missing, f"expected series not found: {sorted(missing)}; got {found}"


def _instant(proc: ServerProcess, token: str, case: Eval, expr: str, at: float) -> str:
    """Ask ``expr`` as an instant query at ``at`` (seconds) and check the answer against
    ``case``'s expectation; the result type."""
    answer = _query(proc.url, token, "/api/v1/query", {"query": expr, "time": f"{at}"})
    if case.fail:
        assert answer["status"] == "error", f"expected an error, got {answer}"
        return ""
    assert answer["status"] == "success", answer
    data = answer["data"]
    kind = str(data["resultType"])
    if kind == "scalar":
        found = [({}, _float(data["result"][1]))]
    elif kind == "vector":
        found = [(s["metric"], _float(s["value"][1])) for s in data["result"]]
    else:
        pytest.fail(f"received a {kind} result on instant evaluation")
    _compare(case, kind, found)
    return kind


@pytest.mark.parametrize(("tenant", "case"), [_param(*case) for case in CASES])
def test_eval(server: tuple[ServerProcess, dict[str, str]], tenant: str, case: Eval) -> None:
    proc, tokens = server
    at = case.at_ms / 1000
    kind = _instant(proc, tokens[tenant], case, case.expr, at)
    if case.fail:
        return

    ranged = _query(
        proc.url,
        tokens[tenant],
        "/api/v1/query_range",
        {"query": case.expr, "start": f"{at - 60}", "end": f"{at + 60}", "step": "60"},
    )
    assert ranged["status"] == "success", f"range mode: {ranged}"
    if case.ordered:
        return
    points = []
    for series in ranged["data"]["result"]:
        for t, v in series["values"]:
            if math.isclose(float(t), at, abs_tol=1e-9):
                points.append((series["metric"], _float(v)))
    if kind == "scalar":
        assert points, "range mode: no point at the evaluation time"
        points = points[:1]
    _compare(case, kind, points)


AT_UNSAFE = frozenset(
    {
        "days_in_month",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "hour",
        "minute",
        "month",
        "year",
        "predict_linear",
        "time",
        "timestamp",
    }
)
"""Functions whose answer depends on the evaluation time even under ``@``: Prometheus'
runner makes no ``@`` variants of an expression that calls one."""


def _pin(node: Node, at_ms: int) -> bool:
    """Prometheus' runner's rewrite: ``@ <evaluation time>`` on every selector and subquery
    that has none, leaving what is inside a subquery as it is. False when ``node`` calls
    a function of :data:`AT_UNSAFE`."""
    if isinstance(node, Selector):
        if node.at_ms is None:
            node.at_ms = at_ms
        return True
    if isinstance(node, Subquery):  # what is inside is pinned by the subquery's @
        if node.at_ms is None:
            node.at_ms = at_ms
        return True
    if isinstance(node, Call):
        return node.name not in AT_UNSAFE and all([_pin(a, at_ms) for a in node.args])
    if isinstance(node, Aggregate):
        return all([_pin(n, at_ms) for n in (node.expr, node.param) if n is not None])
    if isinstance(node, Binary):
        return all([_pin(node.lhs, at_ms), _pin(node.rhs, at_ms)])
    if isinstance(node, Neg):
        return _pin(node.expr, at_ms)
    return True


def _at_variant(case: Eval) -> tuple[str, list[int]] | None:
    """The expression with every selector pinned to the evaluation time, and the other
    times Prometheus' runner asks it at (the answer must not change); None if it makes
    no variant of this case."""
    try:
        node = tree.parse(case.expr, case.at_ms, case.at_ms)
    except PromQLError:
        return None
    if not _pin(node, case.at_ms):
        return None
    ts = case.at_ms
    times = [-1000, 0, 1000] if ts == 0 else [-10 * ts, 0, ts // 5, ts, 10 * ts]
    return render(node), times


AT_CASES = [(f, t, c, v) for f, t, c in CASES if (v := _at_variant(c)) is not None]


@pytest.mark.parametrize(
    ("tenant", "case", "variant"),
    [pytest.param(t, c, v, id=f"{f}:{c.line}@") for f, t, c, v in AT_CASES],
)
def test_eval_with_at(
    server: tuple[ServerProcess, dict[str, str]],
    tenant: str,
    case: Eval,
    variant: tuple[str, list[int]],
) -> None:
    """Prometheus' runner also asks each instant eval with ``@ <evaluation time>`` on every
    selector, at other evaluation times (-10x, 0, 1/5x, 1x and 10x the time), and
    expects the same answer."""
    proc, tokens = server
    expr, times = variant
    for t in times:
        _instant(proc, tokens[tenant], case, expr, t / 1000)


def test_at_variants_cover_most_evals() -> None:
    assert len(AT_CASES) >= len(CASES) // 2, (len(AT_CASES), len(CASES))
