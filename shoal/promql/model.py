"""The values PromQL evaluation works on, column-wise over every step of a query at once.

* :class:`Series`: the raw samples of one series (millisecond times, float values,
  a stale flag per sample), what selectors read and range functions consume.
* :class:`Vec`: an instant vector evaluated at all ``N`` steps: one row per label
  set, ``values`` and ``present`` of shape ``(rows, N)``.
* :class:`Matrix`: series with samples, for range-vector arguments.
* A scalar is a float64 array of shape ``(N,)``; a string is a ``str``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from shoal.errors import PromQLError

Labels = dict[str, str]
LabelKey = tuple[tuple[str, str], ...]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

NAME = "__name__"
HIST = "__hist__"
"""Internal label of a native histogram's component series (shoal/promql/native.py);
never in an answer."""


def key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def without_name(labels: Mapping[str, str]) -> Labels:
    return {k: v for k, v in labels.items() if k != NAME}


@dataclasses.dataclass
class Series:
    labels: Labels
    t: I64
    v: F64
    stale: Mask | None = None

    def live(self) -> Series:
        """The series without its stale markers."""
        if self.stale is None or not self.stale.any():
            return self
        keep = ~self.stale
        return Series(self.labels, self.t[keep], self.v[keep], None)


@dataclasses.dataclass
class Matrix:
    series: list[Series]
    range_ms: int
    offset_ms: int
    at_ms: int | None


@dataclasses.dataclass
class Vec:
    labels: list[Labels]
    values: F64
    present: Mask

    @classmethod
    def empty(cls, steps: int) -> Vec:
        return cls([], np.zeros((0, steps)), np.zeros((0, steps), dtype=bool))

    @property
    def steps(self) -> int:
        return int(self.values.shape[1])

    def select(self, rows: Sequence[int] | npt.NDArray[np.intp]) -> Vec:
        idx = np.asarray(rows, dtype=np.intp)
        return Vec([self.labels[i] for i in idx], self.values[idx], self.present[idx])

    def compact(self) -> Vec:
        """Rows that are present at some step."""
        keep = np.flatnonzero(self.present.any(axis=1))
        if len(keep) == len(self.labels):
            return self
        return self.select(keep)


def merge_rows(labels: Iterable[Labels], values: F64, present: Mask) -> Vec:
    """Rows with equal label sets joined into one; an overlap at some step is an error."""
    label_list = list(labels)
    index: dict[LabelKey, int] = {}
    groups: list[list[int]] = []
    for i, lab in enumerate(label_list):
        k = key(lab)
        slot = index.get(k)
        if slot is None:
            index[k] = len(groups)
            groups.append([i])
        else:
            groups[slot].append(i)
    if len(groups) == len(label_list):
        return Vec(label_list, values, present)
    out_v = np.zeros((len(groups), values.shape[1]))
    out_p = np.zeros((len(groups), values.shape[1]), dtype=bool)
    out_l: list[Labels] = []
    for g, rows in enumerate(groups):
        out_l.append(label_list[rows[0]])
        if len(rows) == 1:
            out_v[g] = values[rows[0]]
            out_p[g] = present[rows[0]]
            continue
        counts = present[rows].sum(axis=0)
        if (counts > 1).any():
            raise PromQLError(
                "vector cannot contain metrics with the same labelset", error_type="execution"
            )
        for r in rows:
            m = present[r]
            out_v[g][m] = values[r][m]
            out_p[g] |= m
    return Vec(out_l, out_v, out_p)


def latest(
    series: Iterable[Series], eff: I64, lookback_ms: int
) -> Iterator[tuple[Series, I64, Mask]]:
    """Per series, at each evaluation time of ``eff``: the index of its latest sample no
    older than ``lookback_ms`` and whether there is one (a stale marker counts as none).
    Series with no such sample at any time are left out."""
    for s in series:
        if not len(s.t):
            continue
        idx = np.searchsorted(s.t, eff, side="right") - 1
        ok = idx >= 0
        idx = np.maximum(idx, 0)
        ok &= s.t[idx] >= eff - lookback_ms
        if s.stale is not None:
            ok &= ~s.stale[idx]
        if ok.any():
            yield s, idx, ok
