"""OTLP exponential histograms as native histograms, evaluated as component series.

A native histogram series ``x{labels}`` is carried through evaluation as float
series that share its labels plus the internal label :data:`HIST` naming the
component: ``count``, ``sum``, ``zero:<threshold>`` (the zero bucket), and
``p:<scale>:<index>`` / ``n:<scale>:<index>`` for the positive and negative
buckets at OTLP's indices (bucket ``i`` of scale ``s`` holds values in
``(base^i, base^(i+1)]``, ``base = 2^(2^-s)``; negative buckets mirror it). The
fetch step brings every series of one metric to one scale, so components of
different series line up.

What is linear in the samples works per component unchanged: ``rate``,
``increase``, ``delta``, ``sum_over_time``, ``avg_over_time``,
``last_over_time``, ``sum``, ``avg``, and multiplying or dividing by a scalar.
``histogram_count``, ``histogram_sum``, ``histogram_avg`` and
``histogram_quantile`` read the components back; Prometheus 2.42's quantile
(linear interpolation inside the bucket holding the rank). Operators and
functions that have no meaning for a histogram ignore its components, as
Prometheus ignores histogram samples there; an answer still holding components
(a histogram itself, not a number from it) is refused with a message.
"""

from __future__ import annotations

import numpy as np

from shoal.errors import PromQLError
from shoal.promql.model import (
    F64,
    HIST,
    NAME,
    LabelKey,
    Labels,
    Matrix,
    Vec,
    key,
    merge_rows,
    stack_rows,
)

RANGE_FUNCTIONS = frozenset(
    {"rate", "increase", "delta", "sum_over_time", "avg_over_time", "last_over_time"}
)
"""Range functions that act on a histogram as on each of its components."""


def has_components(vec: Vec) -> bool:
    return any(HIST in lab for lab in vec.labels)


def floats_only(vec: Vec) -> Vec:
    """``vec`` without native histogram components (for operations on numbers only)."""
    if not has_components(vec):
        return vec
    return vec.select([i for i, lab in enumerate(vec.labels) if HIST not in lab])


def as_samples(vec: Vec) -> Vec:
    """Floats as they are and each histogram as one sample (its count component, for
    ``count`` and ``group``, which look only at presence)."""
    if not has_components(vec):
        return vec
    rows = [i for i, lab in enumerate(vec.labels) if lab.get(HIST, "count") == "count"]
    labels = [{k: v for k, v in vec.labels[i].items() if k != HIST} for i in rows]
    return Vec(labels, vec.values[rows], vec.present[rows])


def floats_only_matrix(matrix: Matrix) -> Matrix:
    series = [s for s in matrix.series if HIST not in s.labels]
    if len(series) == len(matrix.series):
        return matrix
    return Matrix(series, matrix.range_ms, matrix.offset_ms, matrix.at_ms)


def refuse_components(vec: Vec) -> None:
    """An answer must be numbers: a native histogram has no float value to show."""
    for lab in vec.labels:
        if HIST in lab:
            name = lab.get(NAME, "")
            raise PromQLError(
                f"{name or 'the expression'} is a native histogram (an OTLP exponential "
                "histogram); ask for a number from it with histogram_quantile, "
                "histogram_count, histogram_sum or histogram_avg"
            )


def component(vec: Vec, which: str) -> Vec:
    """The ``count`` or ``sum`` component of each histogram, as a float series without name."""
    rows = [i for i, lab in enumerate(vec.labels) if lab.get(HIST) == which]
    labels = [_base(vec.labels[i]) for i in rows]
    return merge_rows(labels, vec.values[rows], vec.present[rows])


def average(vec: Vec) -> Vec:
    counts = component(vec, "count")
    sums = {key(lab): i for i, lab in enumerate(component(vec, "sum").labels)}
    total = component(vec, "sum")
    rows, values, present = [], [], []
    for i, lab in enumerate(counts.labels):
        j = sums.get(key(lab))
        if j is None:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            values.append(total.values[j] / counts.values[i])
        present.append(counts.present[i] & total.present[j])
        rows.append(lab)
    return stack_rows(rows, values, present, vec.steps).compact()


def _base(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k not in (HIST, NAME)}


def _parse(name: str) -> tuple[str, int, int] | None:
    """``(sign, scale, index)`` of a bucket component, ``("z", 0, 0)`` for the zero bucket."""
    if name.startswith("zero:"):
        return "z", 0, 0
    if name[:2] not in ("p:", "n:"):
        return None
    _, scale, index = name.split(":")
    return name[0], int(scale), int(index)


def quantile(q: F64, vec: Vec) -> Vec:
    """``histogram_quantile`` over the native histograms in ``vec``."""
    groups: dict[LabelKey, tuple[Labels, list[int], list[int]]] = {}
    for i, lab in enumerate(vec.labels):
        which = lab.get(HIST)
        if which is None or which == "sum":
            continue
        group = key({k: v for k, v in lab.items() if k != HIST})
        slot = groups.setdefault(group, (_base(lab), [], []))
        (slot[1] if which == "count" else slot[2]).append(i)
    labels, values, present = [], [], []
    for base, count_rows, bucket_rows in groups.values():
        if len(count_rows) != 1 or not bucket_rows:
            continue
        c = count_rows[0]
        lower, upper, counts = _buckets(vec, bucket_rows)
        values.append(_quantile(q, vec.values[c], lower, upper, counts))
        present.append(vec.present[c])
        labels.append(base)
    return stack_rows(labels, values, present, vec.steps, merge=True)


def _buckets(vec: Vec, rows: list[int]) -> tuple[F64, F64, F64]:
    """One histogram's buckets in order, each one's bounds and counts at every step.

    Histograms added up at different scales (series whose SDKs chose different
    resolutions) are brought to the smallest, as Prometheus adds native histograms.
    """
    parsed = {i: _parse(vec.labels[i][HIST]) for i in rows}
    scales = [p[1] for p in parsed.values() if p is not None and p[0] != "z"]
    scale = min(scales) if scales else 0
    merged: dict[tuple[str, int], F64] = {}
    threshold = 0.0
    for i, p in parsed.items():
        if p is None:
            continue
        sign, s, index = p
        if sign == "z":
            threshold = max(threshold, float(vec.labels[i][HIST][5:]))
            bucket = ("z", 0)
        else:
            bucket = (sign, index >> (s - scale))
        counts = np.where(vec.present[i], vec.values[i], 0.0)
        merged[bucket] = merged[bucket] + counts if bucket in merged else counts
    base = 2.0 ** (2.0**-scale)
    bounds = []
    for sign, index in merged:
        if sign == "z":
            bounds.append((-threshold, threshold))
        elif sign == "p":
            bounds.append((base**index, base ** (index + 1)))
        else:
            bounds.append((-(base ** (index + 1)), -(base**index)))
    order = sorted(range(len(bounds)), key=lambda j: bounds[j])
    lower = np.array([bounds[j][0] for j in order])
    upper = np.array([bounds[j][1] for j in order])
    rows_counts = list(merged.values())
    return lower, upper, np.vstack([rows_counts[j] for j in order])


def _quantile(q: F64, total: F64, lower: F64, upper: F64, counts: F64) -> F64:
    """Prometheus 2.42's quantile of a native histogram at every step: the first bucket
    whose running count reaches ``q * total``, linear interpolation inside it."""
    steps = np.arange(counts.shape[1])
    cum = np.cumsum(counts, axis=0)
    with np.errstate(invalid="ignore"):
        rank = q * total
        reached = cum >= rank[None, :]
    b = np.where(reached.any(axis=0), np.argmax(reached, axis=0), len(lower) - 1)
    lo, hi = lower[b], upper[b]
    in_zero = (lo < 0) & (hi > 0)
    negative = (counts[upper <= 0] > 0).any(axis=0)
    positive = (counts[lower >= 0] > 0).any(axis=0)
    lo = np.where(in_zero & ~negative & positive, 0.0, lo)
    hi = np.where(in_zero & ~positive & negative, 0.0, hi)
    count = np.minimum(cum[b, steps], total)
    bucket = counts[b, steps]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = lo + (hi - lo) * ((rank - (count - bucket)) / bucket)
    out = np.where(count < rank, hi, out)
    out = np.where(q < 0, -np.inf, np.where(q > 1, np.inf, out))
    return np.asarray(np.where((total == 0) | np.isnan(q), np.nan, out), dtype=np.float64)
