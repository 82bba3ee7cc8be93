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
LOOKBACK_MS = 300_000
"""How far back an instant selector looks for a series' latest sample (Prometheus' default)."""
HIST = "__hist__"
"""Internal label of a native histogram's component series (shoal/promql/native.py);
never in an answer."""


def key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def without_name(labels: Mapping[str, str]) -> Labels:
    return {k: v for k, v in labels.items() if k != NAME}


def evaluation_times(ts: I64, at_ms: int | None, offset_ms: int) -> I64:
    """The times a selector reads at, for the evaluation steps ``ts``: ``@`` pins them to
    one time, ``offset`` moves them back."""
    return (np.full(len(ts), at_ms) if at_ms is not None else ts) - offset_ms


def key_without_name(k: LabelKey) -> LabelKey:
    """``key(without_name(labels))`` from ``key(labels)``: still sorted, so no sort again."""
    if k and k[0][0] == NAME:  # the usual place: "__name__" sorts before lowercase names
        return k[1:]
    return tuple(pair for pair in k if pair[0] != NAME)


@dataclasses.dataclass
class Series:
    labels: Labels
    t: I64
    v: F64
    stale: Mask | None = None
    key: LabelKey | None = None
    """``key(labels)``, when its maker had it at hand (a label set is never changed in
    place, so the key stays true)."""

    def live(self) -> Series:
        """The series without its stale markers."""
        if self.stale is None or not self.stale.any():
            return self
        keep = ~self.stale
        return Series(self.labels, self.t[keep], self.v[keep], None, self.key)


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


Value = Vec | Matrix | F64 | str
"""What an expression evaluates to: instant vector, range vector, scalar or string."""


def merge_rows(
    labels: Iterable[Labels],
    values: F64,
    present: Mask,
    keys: Sequence[LabelKey] | None = None,
) -> Vec:
    """Rows with equal label sets joined into one; an overlap at some step is an error.
    ``keys``: each label set's :func:`key`, when the caller has them."""
    label_list = list(labels)
    index: dict[LabelKey, int] = {}
    groups: list[list[int]] = []
    for i, lab in enumerate(label_list):
        k = key(lab) if keys is None else keys[i]
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


def stack_rows(
    labels: list[Labels],
    values: Sequence[npt.ArrayLike],
    present: Sequence[npt.ArrayLike],
    steps: int,
    *,
    merge: bool = False,
) -> Vec:
    """Rows built one at a time, as a Vec of ``steps`` columns; ``merge``: rows with equal
    label sets joined by :func:`merge_rows`."""
    if not labels:
        return Vec.empty(steps)
    stacked_v, stacked_p = np.vstack(values), np.vstack(present)
    if merge:
        return merge_rows(labels, stacked_v, stacked_p)
    return Vec(labels, stacked_v, stacked_p)


def latest_values(
    series: Sequence[Series], eff: I64, lookback_ms: int, times: bool = False
) -> tuple[list[Series], F64, Mask]:
    """:func:`latest` for all ``series`` at once: the series with a sample at some
    evaluation time, their latest values (``times``: those samples' times in seconds) as
    a matrix (a row per series, a column per time) and whether each is present.

    The series are laid end to end and one ``searchsorted`` finds every sample, a key
    being the series' number times a span longer than any series plus the time from the
    earliest sample; where those keys would not fit in 63 bits, one series at a time."""
    lives = [s for s in series if len(s.t)]
    if not lives:
        return [], np.zeros((0, len(eff))), np.zeros((0, len(eff)), dtype=bool)
    lengths = np.array([len(s.t) for s in lives], dtype=np.int64)
    t = np.concatenate([s.t for s in lives]).astype(np.int64, copy=False)
    base = int(t.min())
    span = int(t.max()) - base + 2
    if span * len(lives) >= 2**62:
        found = list(latest(lives, eff, lookback_ms))
        rows = [s for s, _, _ in found]
        if not rows:
            return [], np.zeros((0, len(eff))), np.zeros((0, len(eff)), dtype=bool)
        picked = [(s.t[i] / 1000.0) if times else s.v[i] for s, i, _ in found]
        return rows, np.vstack(picked), np.vstack([ok for _, _, ok in found])
    starts = np.cumsum(lengths) - lengths
    keys = np.repeat(np.arange(len(lives), dtype=np.int64) * span, lengths) + (t - base)
    row = (np.arange(len(lives), dtype=np.int64) * span)[:, None]
    high = np.clip(eff.astype(np.int64) - base, -1, span - 2)[None, :]
    idx = np.searchsorted(keys, row + high, side="right").astype(np.int64, copy=False) - 1
    ok = idx >= starts[:, None]
    idx = np.maximum(idx, starts[:, None])
    ok &= t[idx] >= (eff - lookback_ms)[None, :]
    if any(s.stale is not None for s in lives):
        stale = np.concatenate(
            [s.stale if s.stale is not None else np.zeros(len(s.t), dtype=bool) for s in lives]
        )
        ok &= ~stale[idx]
    keep = np.asarray(ok.any(axis=1), dtype=bool)
    if times:
        picked = t[idx] / 1000.0
    else:
        picked = np.concatenate([s.v for s in lives]).astype(np.float64, copy=False)[idx]
    if keep.all():
        return lives, picked, ok
    kept = [s for s, k in zip(lives, keep.tolist(), strict=True) if k]
    return kept, picked[keep], ok[keep]


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
