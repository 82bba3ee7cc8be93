"""The label sets of many series index rows at once, made column by column.

:func:`shoal.promql.labels.series_label_sets` makes each row's label set in Python: about
25 µs a row, half a second for one metric of 20,000 series. Most rows need none of what
makes that necessary, so here each label is a column (one per attribute key, ``job``,
``instance``, ``__name__``), matchers are tested once per distinct value, the rows are put
in label order by one sort of a string that orders as the label sets do, and only the
rows answered become dicts. :func:`label_sets` says None where a row may need more (a
histogram or summary expands into several series, promoted resource attributes, attribute
keys that sanitise to one label or to ``job``/``instance``/``__name__``, a key twice in
one map, a NUL character), and the caller makes those label sets row by row.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.promql import columns, mapping
from shoal.promql.matchers import LabelMatcher
from shoal.promql.model import NAME, Labels
from shoal.storage.series_rows import plain

_EXPANDED = ("histogram", "summary")
"""Metric types whose series expose several label sets (buckets, quantiles, sum, count)."""
_SET_BY_MAPPING = frozenset({NAME, "job", "instance"})
_INFO = ("metric_name", "metric_type", "metric_unit", "is_monotonic", "verbatim")
"""What a row's exposed name depends on (:attr:`MetricInfo.base`)."""
_SEP = "\x00"


def label_sets(
    table: pa.Table, promote: tuple[str, ...] = (), matchers: Sequence[LabelMatcher] = ()
) -> list[Labels] | None:
    """The distinct label sets of the index rows ``table`` that every one of ``matchers``
    selects, in label order (as :func:`shoal.promql.labels.series_label_sets` lists them,
    then filtered by :func:`shoal.promql.matchers.matches_all`); None where a row needs
    its label sets made one by one."""
    if promote or "verbatim" not in table.column_names or _expanded(table):
        return None
    if table.num_rows == 0:
        return []
    found = _label_columns(table)
    if found is None:
        return None
    keep = np.ones(table.num_rows, dtype=bool)
    for matcher in matchers:
        column = found.get(matcher.name)
        wanted = matcher.test
        keep &= columns.matching(column, wanted) if column is not None else wanted("")
    if not keep.all():
        found = {name: values.filter(pa.array(keep)) for name, values in found.items()}
    order = _label_order(found)
    names = list(found)
    ordered = [found[name].take(order) for name in names]
    values = [column.to_pylist() for column in ordered]
    label_sets: list[Labels] = list(map(_label_set_maker(tuple(names)), *values))
    for name, column in zip(names, ordered, strict=True):
        if column.null_count:  # no such label in these rows' sets
            for row in np.flatnonzero(np.asarray(column.is_null())).tolist():
                del label_sets[row][name]
    return label_sets


@functools.lru_cache(maxsize=256)
def _label_set_maker(names: tuple[str, ...]) -> Callable[..., Labels]:
    """A function of one value per name that returns the dict of them: written out as a
    dict display, three times faster than ``dict(zip(names, values))`` per row (20,000
    label sets: 8 ms against 24). The names enter the code as ``repr`` literals only."""
    params = ", ".join(f"v{i}" for i in range(len(names)))
    items = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
    made: Callable[..., Labels] = eval(f"lambda {params}: {{{items}}}")
    return made


def _expanded(table: pa.Table) -> bool:
    types = plain(pc.unique(table.column("metric_type"))).to_pylist()
    return any(t in _EXPANDED for t in types)


def _label_columns(table: pa.Table) -> dict[str, pa.Array] | None:
    """Each label's value per row (null where the row has none), in the order a label
    set holds them: attribute labels by attribute key, then ``job``, ``instance`` and
    ``__name__``; None where a row needs more than this."""
    attributes = table.column("attributes")
    keys = columns.distinct_keys(attributes)
    labels = [mapping.label_name(k) for k in keys]
    if len(set(labels)) < len(labels) or _SET_BY_MAPPING & set(labels):
        return None
    found: dict[str, pa.Array] = {}
    for k, label in zip(keys, labels, strict=True):
        values = _values(attributes, k)
        if values is None:
            return None
        found[label] = values
    resource = table.column("resource_attributes")
    identity = {k: _values(resource, k) for k in sorted(mapping.IDENTIFYING)}
    name, namespace, instance = (
        identity[mapping.SERVICE_NAME],
        identity[mapping.SERVICE_NAMESPACE],
        identity[mapping.SERVICE_INSTANCE_ID],
    )
    if name is None or namespace is None or instance is None:
        return None
    joined = pc.binary_join_element_wise(namespace, name, "/")
    found["job"] = pc.if_else(pc.is_null(namespace), name, joined)
    found["instance"] = instance
    exposed = _exposed_names(table)
    if exposed is None:
        return None
    found[NAME] = exposed
    return found


def _values(maps: pa.ChunkedArray, key: str) -> pa.Array | None:
    """Each row's value under ``key`` as plain text, null where it has none or it is
    empty or null; None where a row holds the key twice."""
    looked = columns.lookup_once(maps, key)
    if looked is None:
        return None
    text = plain(looked)
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    if text.null_count < len(text) and pc.any(pc.match_substring(text, _SEP)).as_py():
        return None
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _exposed_names(table: pa.Table) -> pa.Array | None:
    """Each row's exposed metric name (:attr:`MetricInfo.base`), worked out once per
    distinct metric."""
    first, per_row = columns.distinct_rows(table, _INFO)
    picked = table.select(list(_INFO)).take(pa.array(first)).to_pylist()
    bases = [
        mapping.MetricInfo(
            str(row["metric_name"]),
            str(row["metric_type"]),
            str(row["metric_unit"] or ""),
            row["is_monotonic"],
            None,
            "",
            bool(row["verbatim"]),
        ).base
        for row in picked
    ]
    return pa.array(bases, pa.string()).take(pa.array(per_row))


def _label_order(found: dict[str, pa.Array]) -> pa.Array:
    """The rows in label order, each distinct label set once: sorted by a string of the
    labels in name order, ``name NUL value NUL`` each, which compares as the sorted
    (name, value) pairs of :func:`shoal.promql.model.key` do."""
    pieces = [
        pc.binary_join_element_wise(pa.scalar(name), found[name], pa.scalar(""), _SEP)
        for name in sorted(found)
    ]
    rows = len(found[NAME])
    text = pc.binary_join_element_wise(*pieces, pa.scalar(""), null_handling="skip")
    order = pc.array_sort_indices(text)
    ordered = text.take(order)
    if rows < 2:
        return order
    same = np.asarray(pc.equal(ordered.slice(1), ordered.slice(0, rows - 1)), dtype=bool)
    return order.filter(pa.array(np.concatenate([[True], ~same])))
