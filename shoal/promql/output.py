"""Evaluation results in the Prometheus HTTP API's JSON shapes (``data`` of a success)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shoal.promql.engine import Result
from shoal.promql.mapping import format_float
from shoal.promql.model import key


def seconds(ms: int) -> float | int:
    """A millisecond time as Prometheus writes it: whole seconds without a fraction."""
    ms = int(ms)
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def value_text(value: float) -> str:
    """A sample value as the Prometheus API writes it: as :func:`format_float`, but with
    an exponent below 1e-6 and from 1e21 on (``8e-300``, ``1e+21``), its JSON encoder's
    rule."""
    magnitude = abs(value)
    if math.isfinite(value) and magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        return repr(float(value))  # shortest digits, two-digit exponent at least, as Go's
    return format_float(value)


def metric(labels: dict[str, str]) -> dict[str, str]:
    """Labels in name order, as Prometheus writes them."""
    return dict(sorted(labels.items()))


def query_data(result: Result) -> dict[str, Any]:
    steps = result.steps
    out: list[Any] | Any
    if result.kind == "string":
        out = [seconds(int(steps[0])), result.string]
    elif result.kind == "scalar":
        assert result.scalar is not None
        out = [seconds(int(steps[0])), value_text(float(result.scalar[0]))]
    elif result.kind == "vector":
        assert result.vec is not None
        vec = result.vec
        t = seconds(int(steps[0]))
        out = [
            {"metric": metric(vec.labels[i]), "value": [t, value_text(float(vec.values[i, 0]))]}
            for i in range(len(vec.labels))
            if vec.present[i, 0]
        ]
    elif result.samples is not None:  # an instant query of a range selector
        out = [
            {
                "metric": metric(s.labels),
                "values": [
                    [seconds(int(t)), value_text(float(v))] for t, v in zip(s.t, s.v, strict=True)
                ],
            }
            for s in sorted(result.samples, key=lambda s: key(s.labels))
        ]
    else:  # range query
        rows: list[tuple[dict[str, str], Any, Any]] = []
        if result.vec is not None:
            vec = result.vec
            rows = [(vec.labels[i], vec.values[i], vec.present[i]) for i in range(len(vec.labels))]
        elif result.scalar is not None:
            rows = [({}, result.scalar, np.ones(len(steps), dtype=bool))]
        times = [seconds(int(t)) for t in steps]
        out = []
        for labels, values, present in sorted(rows, key=lambda r: key(r[0])):
            idx = np.flatnonzero(present)
            if not len(idx):
                continue
            out.append(
                {
                    "metric": metric(labels),
                    "values": [[times[j], value_text(float(values[j]))] for j in idx],
                }
            )
    return {"resultType": result.kind, "result": out}
