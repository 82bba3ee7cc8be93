"""Metric results: series of values at each evaluation step, and the steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]


@dataclasses.dataclass
class Series:
    """One series: its labels, and per step its value where ``present``."""

    labels: dict[str, str]
    values: F64
    present: BOOL

    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))


@dataclasses.dataclass(frozen=True)
class Steps:
    """The evaluation times: ``start``, ``start + step``, ... up to ``end`` (nanoseconds)."""

    start: int
    end: int
    step: int

    @property
    def times(self) -> I64:
        count = (self.end - self.start) // self.step + 1 if self.step > 0 else 1
        return self.start + np.arange(count, dtype=np.int64) * max(self.step, 1)

    @property
    def count(self) -> int:
        return len(self.times)


@dataclasses.dataclass
class Scalar:
    """A number per step (a literal, or a scalar-producing expression)."""

    values: F64


Value = list[Series] | Scalar


def sort_key(labels: dict[str, str]) -> str:
    """Series order of Loki's answers: by the label set's text."""
    return "{" + ", ".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"
