"""A batch of log entries as columns, with their labels, as LogQL's pipeline sees them.

:class:`Frame` holds each entry's time (nanoseconds), line, and labels as one string
column per label name (null: the entry does not have it; Loki drops labels whose value
is empty, so an empty value reads as absent too). Each label has a category, as Loki's
categorised answers name them: a stream label, structured metadata, or a label a parser
or formatter made. Stream labels are dictionary columns over the few streams, so they
cost one index per entry. Every stage works on whole columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

STREAM = 0
METADATA = 1
PARSED = 2

I64 = npt.NDArray[np.int64]


@dataclasses.dataclass
class Label:
    category: int
    values: pa.Array


@dataclasses.dataclass
class Frame:
    ts: I64
    line: pa.Array
    labels: dict[str, Label]

    @property
    def rows(self) -> int:
        return len(self.ts)

    def column(self, name: str) -> pa.Array:
        """The label's values as strings, null where an entry does not have it."""
        label = self.labels.get(name)
        if label is None:
            return pa.nulls(self.rows, pa.string())
        values = label.values
        if pa.types.is_dictionary(values.type):
            values = values.cast(pa.string())
        return values

    def value_or_empty(self, name: str) -> pa.Array:
        """The label's values with absent ones as ``""`` (how a filter compares them)."""
        return pc.fill_null(self.column(name), "")

    def set(self, name: str, values: pa.Array, category: int = PARSED) -> None:
        """Give every entry the label ``name`` (null: none), keeping an existing label's
        category."""
        values = pc.if_else(pc.equal(values, ""), None, values) if len(values) else values
        old = self.labels.get(name)
        self.labels[name] = Label(old.category if old is not None else category, values)

    def filter(self, mask: pa.Array) -> Frame:
        """The entries where ``mask`` holds (null counts as false)."""
        mask = pc.fill_null(mask, False)
        keep = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.bool_)
        if keep.all():
            return self
        return Frame(
            self.ts[keep],
            self.line.filter(mask),
            {n: Label(lb.category, lb.values.filter(mask)) for n, lb in self.labels.items()},
        )

    def take(self, indices: I64) -> Frame:
        index = pa.array(indices, pa.int64())
        return Frame(
            self.ts[indices],
            self.line.take(index),
            {n: Label(lb.category, lb.values.take(index)) for n, lb in self.labels.items()},
        )


def empty() -> Frame:
    return Frame(np.zeros(0, dtype=np.int64), pa.array([], pa.string()), {})


def per_stream(values: Sequence[str | None], stream: pa.Array) -> pa.Array:
    """A label taking ``values[i]`` on the entries of stream ``i`` (a dictionary column)."""
    return pa.DictionaryArray.from_arrays(stream, pa.array(list(values), pa.string()))


def concat(frames: Sequence[Frame]) -> Frame:
    """One frame of the entries of ``frames``, in order."""
    frames = [f for f in frames if f.rows]
    if not frames:
        return empty()
    if len(frames) == 1:
        return frames[0]
    names: dict[str, int] = {}
    for f in frames:
        for name, label in f.labels.items():
            names.setdefault(name, label.category)
    labels = {}
    for name, category in names.items():
        parts = [
            f.column(name) if name in f.labels else pa.nulls(f.rows, pa.string()) for f in frames
        ]
        labels[name] = Label(category, pa.concat_arrays(parts))
    return Frame(
        np.concatenate([f.ts for f in frames]),
        pa.concat_arrays([f.line.cast(pa.string()) for f in frames]),
        labels,
    )


def codes(values: pa.Array) -> tuple[npt.NDArray[np.int64], list[str | None]]:
    """Integer codes of a label's values (-1: absent or empty) and the distinct values."""
    if pa.types.is_dictionary(values.type):
        # a stream label's dictionary has an entry per stream: equal values, once each
        merged = values.dictionary.dictionary_encode()
        encoded = pa.DictionaryArray.from_arrays(
            merged.indices.take(values.indices), merged.dictionary
        )
    else:
        encoded = values.dictionary_encode()
    dictionary = encoded.dictionary.to_pylist()
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    if encoded.indices.null_count:
        indices = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), -1, indices)
    indices = np.asarray(indices, dtype=np.int64)
    blank = [i for i, v in enumerate(dictionary) if v is None or v == ""]
    if blank:
        indices = np.where(np.isin(indices, blank), -1, indices)
    return indices, dictionary


def group(frame: Frame, names: Iterable[str]) -> tuple[I64, list[dict[str, str]]]:
    """Each entry's group, by its values of the labels ``names``, and each group's labels
    (absent labels left out)."""
    names = sorted(n for n in names if n in frame.labels)
    n = frame.rows
    if not names or not n:
        return np.zeros(n, dtype=np.int64), [{}]
    columns = [codes(frame.labels[name].values) for name in names]
    tables = [values for _, values in columns]
    radix = 1
    for values in tables:
        radix *= len(values) + 1
    if radix >= 2**62:  # too many combinations for one integer: group the code rows
        stacked = np.stack([idx for idx, _ in columns], axis=1)
        rows, inverse = np.unique(stacked, axis=0, return_inverse=True)
        found = [
            {nm: tables[i][c] for i, (nm, c) in enumerate(zip(names, row, strict=True))
             if c >= 0 and tables[i][c]}
            for row in rows.tolist()
        ]  # fmt: skip
        return inverse.reshape(-1).astype(np.int64), [dict(sorted(f.items())) for f in found]
    combined = np.zeros(n, dtype=np.int64)
    for idx, values in columns:
        combined = combined * (len(values) + 1) + (idx + 1)
    uniques, inverse = np.unique(combined, return_inverse=True)
    out: list[dict[str, str]] = []
    for key in uniques.tolist():
        labels: dict[str, str] = {}
        for name, values in zip(reversed(names), reversed(tables), strict=True):
            key, code = divmod(key, len(values) + 1)
            if code:
                value = values[code - 1]
                if value:
                    labels[name] = value
        out.append(dict(sorted(labels.items())))
    return inverse.astype(np.int64), out


def label_sets(frame: Frame, categories: Mapping[int, bool] | None = None) -> list[str]:
    """The names of the labels of the given categories (all by default)."""
    return [
        name
        for name, label in frame.labels.items()
        if categories is None or categories.get(label.category, False)
    ]
