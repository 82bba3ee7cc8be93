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
    test = matcher.test
    if sources:
        found[columns.rows_with(attributes, sources[0], test)] = True
    resource = table.column("resource_attributes")
    # a row holding a key twice is kept if either entry matches: more than the label
    # set (its first entry's) may match, never fewer, as narrowing asks
    held = [
        k for k in promote if k not in mapping.IDENTIFYING and mapping.label_name(k) == matcher.name
    ]
    if matcher.name == "instance":
        held.append(mapping.SERVICE_INSTANCE_ID)
    for k in held:
        found[columns.rows_with(resource, k, test)] = True
    if matcher.name == "job":
        name = columns.lookup(resource, mapping.SERVICE_NAME)
        namespace = columns.lookup(resource, mapping.SERVICE_NAMESPACE)
        joined = pc.binary_join_element_wise(namespace, name, "/")
        found |= columns.matching(pc.if_else(pc.equal(namespace, ""), name, joined), test)
    return found
