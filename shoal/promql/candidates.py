"""Which series index rows a selector's label matchers can select, worked out column-wise.

A selector without a metric name (``{instance="host-7"}``) reads the index rows of
every metric. Testing its matchers against each row's label set means making that
label set in Python first: seconds and about a kilobyte per series at a million
series. Here a matcher that an absent label cannot satisfy (it does not match ``""``)
keeps only the rows holding a value it matches where that label's value can come
from: an attribute whose key maps to the label's name, the resource's
``service.instance.id`` (``instance``) or ``service.namespace``/``service.name``
(``job``), or a promoted resource attribute. Each distinct value is tested once.

The rows kept are a superset of the rows whose label sets match: a label that several
attribute keys would join (``a;b``), and ``__name__``, ``le`` and ``quantile``, are not
narrowed on. The caller still tests the label sets of the rows kept, so the answer is
the same; only fewer label sets are made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.promql import columns, mapping
from shoal.promql.matchers import LabelMatcher
from shoal.promql.model import NAME

_NOT_NARROWED = frozenset({NAME, "le", "quantile"})

Mask = np.ndarray[Any, np.dtype[np.bool_]]


def narrow(table: pa.Table, matchers: Sequence[LabelMatcher], promote: tuple[str, ...]) -> pa.Table:
    """The rows of ``table`` (series index rows) that ``matchers`` may select."""
    keep: Mask | None = None
    for matcher in matchers:
        if matcher.name in _NOT_NARROWED or matcher.matches(""):
            continue
        rows = _rows_matching(table, matcher, promote)
        if rows is not None:
            keep = rows if keep is None else keep & rows
    if keep is None or bool(keep.all()):
        return table
    return table.filter(pa.array(keep))


def _rows_matching(table: pa.Table, matcher: LabelMatcher, promote: tuple[str, ...]) -> Mask | None:
    """The rows with a value ``matcher`` matches in a place its label can come from;
    None when the label may be joined from several attribute keys."""
    attributes = table.column("attributes")
    keys = columns.distinct_keys(attributes)
    sources = [k for k in keys if mapping.label_name(k) == matcher.name]
    if len(sources) > 1:
        return None
    found = np.zeros(table.num_rows, dtype=bool)
    if sources:
        found[columns.rows_with(attributes, sources[0], matcher.matches)] = True
    resource = table.column("resource_attributes")
    per_row: list[pa.ChunkedArray] = []
    if matcher.name == "instance":
        per_row.append(columns.lookup_encoded(resource, mapping.SERVICE_INSTANCE_ID))
    elif matcher.name == "job":
        name = columns.lookup(resource, mapping.SERVICE_NAME)
        namespace = columns.lookup(resource, mapping.SERVICE_NAMESPACE)
        joined = pc.binary_join_element_wise(namespace, name, "/")
        per_row.append(pc.if_else(pc.equal(namespace, ""), name, joined))
    per_row += [
        columns.lookup_encoded(resource, k)
        for k in promote
        if k not in mapping.IDENTIFYING and mapping.label_name(k) == matcher.name
    ]
    for column in per_row:
        found |= _matched(column, matcher)
    return found


def _matched(values: pa.ChunkedArray, matcher: LabelMatcher) -> Mask:
    """Which of ``values`` (null: no value, which ``matcher`` does not match) ``matcher``
    matches, each distinct value tested once: through the codes where they are encoded."""
    if pa.types.is_dictionary(values.type):
        parts = [columns.codes_where(chunk, matcher.matches) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    return columns.matching(values, matcher.matches)
