"""Array helpers every layer uses alike.

:func:`unique` is ``np.unique`` without its hash table: numpy 2.4 finds the distinct
values of an array with no index asked for in a hash set, which costs several times a
sort, and twenty times one when most values are distinct (1,000,000 distinct int64s:
1.43 s against 71 ms, measured on this project's 2-core machine). A flush at a
million active series does exactly that on its coverage pairs.

:func:`find` looks many integers up among sorted ones. ``np.searchsorted`` makes about
twenty steps through a million keys for each, and when the keys are hashes the needles
come in no useful order, so every step misses the cache: a million lookups took 314-347
ms. Hashes spread evenly, so their top bits say nearly where each one stands: a table of
where each bucket of them starts finds most in one or two reads (95-118 ms).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def unique(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The distinct values of a 1-d array, ascending, found by sorting a copy (NaNs, like
    other values, are each kept: callers pass integers)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


_FEW = 4096
"""Needles below which :func:`find` binary-searches them (its table costs more)."""
_WIDEST = 32
"""Keys one bucket of :func:`find`'s table may hold before it sorts the needles instead
(keys that are not spread like hashes)."""


def find(keys: np.ndarray[Any, Any], needles: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """For each of ``needles``, the position of an equal value among ``keys`` (int64, in
    ascending order, not empty) where there is one, else some position in range: callers
    compare ``keys[found] == needles`` to tell."""
    if len(needles) < _FEW:
        return np.searchsorted(keys, needles).clip(max=len(keys) - 1)
    if len(needles) * 4 >= len(keys):
        found = _find_by_buckets(keys, needles)
        if found is not None:
            return found
    order = np.argsort(needles)  # in order, each search starts near the last one's end
    found = np.empty(len(needles), dtype=np.intp)
    found[order] = np.searchsorted(keys, needles[order]).clip(max=len(keys) - 1)
    return found


def _find_by_buckets(
    keys: np.ndarray[Any, Any], needles: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any] | None:
    """:func:`find` through a table of where each bucket of keys starts (as many buckets as
    keys, rounded up to a power of two, by their top bits); None where a bucket holds over
    ``_WIDEST`` keys."""
    bits = max(1, (len(keys) - 1).bit_length())

    def bucket(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        # the sign bit flipped, so that unsigned order is the signed keys' order
        unsigned = values.astype(np.int64, copy=False).view(np.uint64) ^ np.uint64(1 << 63)
        return (unsigned >> np.uint64(64 - bits)).astype(np.intp)

    counts = np.bincount(bucket(keys), minlength=1 << bits)
    if counts.max() > _WIDEST:
        return None
    starts = np.zeros(len(counts) + 1, dtype=np.intp)
    np.cumsum(counts, out=starts[1:])
    slots = bucket(needles)
    # most needles are the first key of their bucket: read that one for all of them
    found: np.ndarray[Any, Any] = np.minimum(starts[slots], len(keys) - 1)
    active = np.flatnonzero(keys[found] != needles)
    at = found[active] + 1
    ends = starts[slots[active] + 1]
    while active.size:  # one step along every unfinished bucket at a time
        inside = at < ends
        active, at, ends = active[inside], at[inside], ends[inside]
        hit = keys[at] == needles[active]
        found[active[hit]] = at[hit]
        active, at, ends = active[~hit], at[~hit] + 1, ends[~hit]
    return found
