"""Binary operators: arithmetic, comparisons (with ``bool``), set operators, vector matching."""

from __future__ import annotations

import numpy as np

from shoal.errors import PromQLError
from shoal.promql.model import F64, NAME, LabelKey, Labels, Mask, Vec, key, merge_rows, stack_rows
from shoal.promql.tree import Binary

COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPS = frozenset({"and", "or", "unless"})


_ARITH = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "%": np.fmod,
    "^": np.power,
    "atan2": np.arctan2,
    "==": np.equal,
    "!=": np.not_equal,
    ">": np.greater,
    "<": np.less,
    ">=": np.greater_equal,
    "<=": np.less_equal,
}


def arith(op: str, a: F64, b: F64) -> F64:
    fn = _ARITH.get(op)
    if fn is None:
        raise PromQLError(f"operator {op!r} is not supported")
    with np.errstate(all="ignore"):
        return np.asarray(fn(a, b), dtype=np.float64)


def scalar_scalar(node: Binary, a: F64, b: F64) -> F64:
    if node.op in COMPARISONS and not node.return_bool:
        raise PromQLError("comparisons between scalars must use BOOL modifier")
    return arith(node.op, a, b)


def vector_scalar(node: Binary, vec: Vec, scalar: F64, vector_left: bool) -> Vec:
    a = vec.values
    b = np.broadcast_to(scalar, a.shape)
    value = arith(node.op, a, b) if vector_left else arith(node.op, b, a)
    present = vec.present.copy()
    drop_name = node.op != "atan2"  # Prometheus 2.x keeps the name through atan2
    if node.op in COMPARISONS:
        if not node.return_bool:
            present &= value == 1.0
            value = a  # the vector's own value is kept
            drop_name = False
    labels = [
        {k: v for k, v in lab.items() if k != NAME} if drop_name else dict(lab)
        for lab in vec.labels
    ]
    out = Vec(labels, value, present).compact()
    return merge_rows(out.labels, out.values, out.present) if drop_name else out


def _signature(labels: Labels, node: Binary) -> LabelKey:
    if node.on:
        return tuple(sorted((k, labels[k]) for k in node.matching if k in labels))
    drop = set(node.matching) | {NAME}
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _by_signature(vec: Vec, node: Binary) -> dict[LabelKey, list[int]]:
    out: dict[LabelKey, list[int]] = {}
    for i, lab in enumerate(vec.labels):
        out.setdefault(_signature(lab, node), []).append(i)
    return out


def set_op(node: Binary, lhs: Vec, rhs: Vec) -> Vec:
    steps = lhs.steps
    rsig = _by_signature(rhs, node)
    rhs_any = {sig: rhs.present[rows].any(axis=0) for sig, rows in rsig.items()}
    none = np.zeros(steps, dtype=bool)
    if node.op in ("and", "unless"):
        present = lhs.present.copy()
        for i, lab in enumerate(lhs.labels):
            other = rhs_any.get(_signature(lab, node), none)
            present[i] &= other if node.op == "and" else ~other
        return Vec(list(lhs.labels), lhs.values, present).compact()
    # or: every lhs sample, and rhs samples whose signature the lhs lacks at that step
    lsig = _by_signature(lhs, node)
    lhs_any = {sig: lhs.present[rows].any(axis=0) for sig, rows in lsig.items()}
    rpresent = rhs.present.copy()
    for i, lab in enumerate(rhs.labels):
        rpresent[i] &= ~lhs_any.get(_signature(lab, node), none)
    labels = list(lhs.labels) + list(rhs.labels)
    values = np.vstack([lhs.values, rhs.values]) if labels else np.zeros((0, steps))
    present = np.vstack([lhs.present, rpresent]) if labels else np.zeros((0, steps), bool)
    out = Vec(labels, values, present).compact()
    return _union(out)


def _union(vec: Vec) -> Vec:
    """Rows with equal labels joined, the earlier row winning at steps both have."""
    index: dict[LabelKey, int] = {}
    keep: list[int] = []
    values = vec.values.copy()
    present = vec.present.copy()
    for i, lab in enumerate(vec.labels):
        k = key(lab)
        if k in index:
            j = index[k]
            take = present[i] & ~present[j]
            values[j][take] = values[i][take]
            present[j] |= take
        else:
            index[k] = i
            keep.append(i)
    return Vec([vec.labels[i] for i in keep], values[keep], present[keep])


def _result_labels(many: Labels, one: Labels, node: Binary, drop_name: bool) -> Labels:
    out = dict(many)
    if drop_name:
        out.pop(NAME, None)
    if node.card == "OneToOne":
        if node.on:
            out = {k: v for k, v in out.items() if k in node.matching}
        else:
            for k in node.matching:
                out.pop(k, None)
    for k in node.include:
        if one.get(k, "") != "":
            out[k] = one[k]
        else:
            out.pop(k, None)
    return out


def vector_vector(node: Binary, lhs: Vec, rhs: Vec) -> Vec:
    if node.op in SET_OPS:
        return set_op(node, lhs, rhs)
    steps = lhs.steps
    many, one = (rhs, lhs) if node.card == "OneToMany" else (lhs, rhs)
    one_sig = _by_signature(one, node)
    for rows in one_sig.values():
        if len(rows) > 1 and (one.present[rows].sum(axis=0) > 1).any():
            side = "left" if node.card == "OneToMany" else "right"
            raise PromQLError(
                f"found duplicate series for the match group on the {side} hand-side "
                "of the operation; many-to-many matching not allowed: matching labels "
                "must be unique on one side",
                error_type="execution",
            )
    comparison = node.op in COMPARISONS
    drop_name = node.op != "atan2" and (not comparison or node.return_bool)
    labels: list[Labels] = []
    values: list[F64] = []
    present: list[Mask] = []
    matched_count: dict[LabelKey, np.ndarray] = {}
    for i, lab in enumerate(many.labels):
        sig = _signature(lab, node)
        rows = one_sig.get(sig, [])
        if not rows:
            continue
        for j in rows:
            both = many.present[i] & one.present[j]
            if not both.any():
                continue
            if node.card == "OneToOne":
                seen = matched_count.setdefault(sig, np.zeros(steps, dtype=np.int64))
                seen += both
                if (seen > 1).any():
                    raise PromQLError(
                        "multiple matches for labels: many-to-one matching must be explicit "
                        "(group_left/group_right)",
                        error_type="execution",
                    )
            lv, rv = (
                (one.values[j], many.values[i])
                if node.card == "OneToMany"
                else (
                    many.values[i],
                    one.values[j],
                )
            )
            result = arith(node.op, lv, rv)
            keep = both.copy()
            if comparison and not node.return_bool:
                keep &= result == 1.0
                result = lv
            labels.append(_result_labels(lab, one.labels[j], node, drop_name))
            values.append(result)
            present.append(keep)
    try:
        return stack_rows(labels, values, present, steps, merge=True).compact()
    except PromQLError:
        raise PromQLError(
            "multiple matches for labels: grouping labels must ensure unique matches",
            error_type="execution",
        ) from None
