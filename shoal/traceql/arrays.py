"""Array attributes' elements, for TraceQL's comparisons.

An OTLP array value is stored as the OTLP/JSON of its ``ArrayValue`` with the type tag
``array`` (:mod:`shoal.otlp.anyvalue`). TraceQL compares an array element by element,
as Tempo does since its vParquet4 blocks: a comparison holds for the array when it
holds for one of its elements. :func:`explode` turns a column of arrays into one row
per primitive element (string, int, double, bool; nested arrays and key-value lists are
not elements) with the row it came from. Each distinct array text is parsed once; the
rows are then expanded with numpy, never element by element in Python.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]

Elements = tuple[I64, dict[str, tuple[Any, BOOL]]]
"""The row each element belongs to, and per TraceQL type (string, int, float, bool) the
elements' values and which elements hold that type."""

_KINDS = {"stringValue": "string", "intValue": "int", "doubleValue": "float",
          "boolValue": "bool"}  # fmt: skip


def _primitives(text: str) -> list[tuple[str, Any]]:
    try:
        values = json.loads(text).get("values", [])
    except (ValueError, AttributeError):
        return []
    out: list[tuple[str, Any]] = []
    for value in values:
        if not isinstance(value, dict) or len(value) != 1:
            continue
        ((key, item),) = value.items()
        kind = _KINDS.get(key)
        if kind == "int":
            out.append((kind, int(item)))
        elif kind == "float":
            out.append((kind, float(item)))  # "NaN", "Infinity" included
        elif kind is not None:
            out.append((kind, item))
    return out


def explode(text: pa.Array, rows: BOOL) -> Elements | None:
    """The primitive elements of the arrays in ``text`` at ``rows``; None if there are none."""
    where = np.flatnonzero(rows)
    if not len(where):
        return None
    encoded = pc.dictionary_encode(text.take(pa.array(where)))
    distinct = [_primitives(t) for t in encoded.dictionary.to_pylist()]
    lengths = np.array([len(d) for d in distinct], dtype=np.int64)
    flat = [e for d in distinct for e in d]
    if not flat:
        return None
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    which = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = lengths[which]
    parent = np.repeat(where.astype(np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    position = np.repeat(starts[which], counts) + (np.arange(int(counts.sum())) - first)
    kinds = np.array([k for k, _ in flat])[position]
    typed: dict[str, tuple[Any, BOOL]] = {}
    for kind in ("string", "int", "float", "bool"):
        mask = kinds == kind
        if not mask.any():
            continue
        picked = [v if k == kind else None for k, v in flat]
        if kind == "string":
            values: Any = pa.array(picked, pa.string()).take(pa.array(position))
        else:
            dtype = {"int": np.int64, "float": np.float64, "bool": np.bool_}[kind]
            filler = {"int": 0, "float": 0.0, "bool": False}[kind]
            column: npt.NDArray[Any] = np.array(
                [filler if v is None else v for v in picked], dtype=dtype
            )
            values = column[position]
        typed[kind] = (values, mask)
    return parent, typed
