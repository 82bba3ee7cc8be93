"""Two Prometheus API answers compared: what the tests against a real Prometheus require."""

from __future__ import annotations

import math
from typing import Any


def value(text: str) -> float:
    return float(text.replace("+Inf", "inf").replace("-Inf", "-inf"))


def close(a: str, b: str, rel: float = 1e-9) -> bool:
    x, y = value(a), value(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=rel, abs_tol=1e-12)


def normalise(data: dict[str, Any]) -> dict[str, Any]:
    kind = data["resultType"]
    result = data["result"]
    if kind in ("scalar", "string"):
        return {"kind": kind, "value": result}
    out: dict[Any, Any] = {}
    for item in result:
        labels = tuple(sorted(item["metric"].items()))
        out[labels] = item["value"] if kind == "vector" else item["values"]
    return {"kind": kind, "series": out}


def compare(ours: dict[str, Any], theirs: dict[str, Any], what: str, rel: float = 1e-9) -> None:
    """The same status and errorType, or the same result type, series, times and values."""
    if theirs["status"] == "error":
        assert ours["status"] == "error", (what, theirs, ours)
        assert ours["errorType"] == theirs["errorType"], (what, theirs, ours)
        return
    assert ours["status"] == "success", (what, ours)
    a, b = normalise(ours["data"]), normalise(theirs["data"])
    assert a["kind"] == b["kind"], (what, a["kind"], b["kind"])
    if a["kind"] in ("scalar", "string"):
        assert a["value"][0] == b["value"][0], what
        assert close(a["value"][1], b["value"][1], rel), (what, a["value"], b["value"])
        return
    assert set(a["series"]) == set(b["series"]), (
        what,
        sorted(set(a["series"]) - set(b["series"]))[:3],
        sorted(set(b["series"]) - set(a["series"]))[:3],
    )
    for labels, theirs_points in b["series"].items():
        ours_points = a["series"][labels]
        if a["kind"] == "vector":
            ours_points, theirs_points = [ours_points], [theirs_points]
        assert [p[0] for p in ours_points] == [p[0] for p in theirs_points], (what, labels)
        for (t, x), (_, y) in zip(ours_points, theirs_points, strict=True):
            assert close(x, y, rel), (what, labels, t, x, y)
