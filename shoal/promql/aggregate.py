"""Aggregation operators over a :class:`Vec`: a loop per group, numpy across rows and steps."""

from __future__ import annotations

import numpy as np

from shoal.errors import PromQLError
from shoal.promql import mapping, native
from shoal.promql.model import F64, HIST, NAME, LabelKey, Labels, Vec, key, stack_rows

SUPPORTED = frozenset(
    {
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    }
)


def group_labels(labels: Labels, names: list[str], without: bool) -> Labels:
    if without:
        drop = (set(names) - {HIST}) | {NAME}
        return {k: v for k, v in labels.items() if k not in drop}
    out = {k: labels[k] for k in names if k in labels and labels[k] != ""}
    if HIST in labels:  # a histogram's components are added up one by one
        out[HIST] = labels[HIST]
    return out


def _groups(vec: Vec, names: list[str], without: bool) -> list[tuple[Labels, list[int]]]:
    if not names and not without and not any(HIST in lab for lab in vec.labels):
        # ``sum(x)``: one group of every row, no label set made per row
        return [({}, list(range(len(vec.labels))))] if vec.labels else []
    index: dict[LabelKey, int] = {}
    out: list[tuple[Labels, list[int]]] = []
    for i, lab in enumerate(vec.labels):
        g = group_labels(lab, names, without)
        k = key(g)
        slot = index.get(k)
        if slot is None:
            index[k] = len(out)
            out.append((g, [i]))
        else:
            out[slot][1].append(i)
    return out


def aggregate(op: str, vec: Vec, names: list[str], without: bool, param: F64 | str | None) -> Vec:
    if op not in SUPPORTED:
        raise PromQLError(f"aggregation {op!r} is not supported")
    steps = vec.steps
    if op not in ("sum", "avg"):  # the others see a histogram as one sample, or not at all
        vec = native.as_samples(vec) if op in ("count", "group") else native.floats_only(vec)
    if op in ("topk", "bottomk"):
        assert isinstance(param, np.ndarray)
        return _topk(vec, names, without, param, op == "topk")
    if op == "count_values":
        assert isinstance(param, str)
        return _count_values(vec, names, without, param)
    labels: list[Labels] = []
    rows_v: list[F64] = []
    rows_p: list[np.ndarray] = []
    for glabels, rows in _groups(vec, names, without):
        v = vec.values[rows]
        p = vec.present[rows]
        n = p.sum(axis=0)
        anyp = n > 0
        if not anyp.any():
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            if op == "sum":
                res = np.where(p, v, 0.0).sum(axis=0)
            elif op == "avg":
                res = _mean(np.where(p, v, 0.0), n)
            elif op == "count":
                res = n.astype(np.float64)
            elif op == "group":
                res = np.ones(steps)
            elif op == "min":
                res = np.fmin.reduce(np.where(p, v, np.nan), axis=0)
            elif op == "max":
                res = np.fmax.reduce(np.where(p, v, np.nan), axis=0)
            elif op in ("stddev", "stdvar"):
                mean = np.where(p, v, 0.0).sum(axis=0) / n
                dev = np.where(p, v - mean, 0.0)
                res = (dev * dev).sum(axis=0) / n
                # equal values vary by exactly 0 (a rounded mean would leave a residue)
                lo = np.fmin.reduce(np.where(p, v, np.nan), axis=0)
                hi = np.fmax.reduce(np.where(p, v, np.nan), axis=0)
                res = np.where(lo == hi, 0.0, res)
                if op == "stddev":
                    res = np.sqrt(res)
            else:  # quantile
                assert isinstance(param, np.ndarray)
                res = _quantile(param, np.where(p, v, np.nan), n)
        labels.append(glabels)
        rows_v.append(res)
        rows_p.append(anyp)
    return stack_rows(labels, rows_v, rows_p, steps)


def _mean(values: F64, n: np.ndarray) -> F64:
    """Column means; where the sum overflows and no value is infinite, the sum of each
    value over the count (Prometheus' incremental mean gives the same)."""
    with np.errstate(over="ignore", invalid="ignore"):
        res: F64 = values.sum(axis=0) / n
        over = np.isinf(res) & ~np.isinf(values).any(axis=0)
        if over.any():
            res = np.where(over, (values / n).sum(axis=0), res)
    return res


def _quantile(q: F64, values: F64, n: np.ndarray) -> F64:
    """Prometheus' quantile: linear interpolation between the closest ranks, per step."""
    ordered = np.sort(values, axis=0)  # NaN (absent) sort last
    rank = np.nan_to_num(q, nan=0.0) * (n - 1)
    low = np.clip(np.floor(rank), 0, np.maximum(n - 1, 0)).astype(np.int64)
    high = np.minimum(low + 1, np.maximum(n - 1, 0)).astype(np.int64)
    weight = rank - np.floor(rank)
    cols = np.arange(values.shape[1])
    res = ordered[low, cols] * (1 - weight) + ordered[high, cols] * weight
    res = np.where(q < 0, -np.inf, np.where(q > 1, np.inf, res))
    return np.where(np.isnan(q), np.nan, res)


def _topk(vec: Vec, names: list[str], without: bool, k: F64, top: bool) -> Vec:
    keep = np.zeros_like(vec.present)
    ordered: list[int] = []
    for _, rows in _groups(vec, names, without):
        v = vec.values[rows]
        p = vec.present[rows]
        # absent rows last; NaN values after every number
        sort_key = np.where(np.isnan(v), np.inf, -v if top else v)
        sort_key = np.where(p, sort_key, np.inf)
        order = np.argsort(sort_key, axis=0, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(len(rows))[:, None].repeat(v.shape[1], 1), 0)
        kk = np.floor(k)
        keep[rows] = p & (ranks < kk[None, :])
        if vec.steps == 1:  # an instant answer lists each group best first
            ordered.extend(rows[i] for i in order[:, 0] if keep[rows[i], 0])
    if vec.steps == 1:
        return Vec(list(vec.labels), vec.values, keep).select(ordered)
    out = Vec(list(vec.labels), vec.values, keep)
    return out.compact()


def _count_values(vec: Vec, names: list[str], without: bool, label: str) -> Vec:
    counts: dict[LabelKey, tuple[Labels, np.ndarray]] = {}
    steps = vec.steps
    for i, lab in enumerate(vec.labels):
        base = group_labels(lab, names, without)
        for j in np.flatnonzero(vec.present[i]):
            text = mapping.format_float(float(vec.values[i, j]))
            labels = {**base, label: text}
            k = key(labels)
            if k not in counts:
                counts[k] = (labels, np.zeros(steps))
            counts[k][1][j] += 1
    if not counts:
        return Vec.empty(steps)
    lab_list = [c[0] for c in counts.values()]
    values = np.vstack([c[1] for c in counts.values()])
    return Vec(lab_list, values, values > 0)
