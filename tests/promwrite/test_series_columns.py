"""What a remote-written series becomes, worked out column-wise for a whole request, equals
what working it out one series at a time gives, and its series id never moves.

The per-series reference below follows the mapping as documented (docs/rationale.md):
``__name__`` becomes the metric name, ``job`` and ``instance`` the resource attributes,
every other label with a value a point attribute; the series id hashes all three."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.errors import DecodeError
from shoal.promwrite.labels import Labels, Meta
from shoal.promwrite.rows import _entry_hash, _name_hash, series_columns
from shoal.rows.columns import series_ids

SeriesLabels = list[tuple[str, str]]


def _labels(series: list[SeriesLabels]) -> Labels:
    owner = np.array([i for i, pairs in enumerate(series) for _ in pairs], dtype=np.int64)
    names = pa.array([k for pairs in series for k, _ in pairs], pa.string())
    values = pa.array([v for pairs in series for _, v in pairs], pa.string())
    return Labels(owner, names, values)


def _resource(job: str | None, instance: str | None) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    if job:  # "namespace/name", or a name alone; a name may be empty ("ns/")
        *namespace, found["service.name"] = job.split("/", 1)
        if namespace and namespace[0]:
            found["service.namespace"] = namespace[0]
    if instance:
        found["service.instance.id"] = instance
    return sorted(found.items())


def _one(pairs: SeriesLabels, meta: Meta) -> dict[str, Any]:
    """One series' columns, worked out on its own."""
    given_ = {k: v for k, v in pairs if v}
    name = given_.get("__name__")
    attributes = [(k, v) for k, v in pairs if k not in ("__name__", "job", "instance") and v]
    resource = _resource(given_.get("job"), given_.get("instance"))
    point = sum(_entry_hash(k, v) for k, v in attributes) % (1 << 64)
    resource_hash = sum(_entry_hash(k, v) for k, v in resource) % (1 << 64)
    series_id = series_ids(
        np.array([_name_hash(name or "")], np.uint64),
        np.array([point], np.uint64),
        np.array([resource_hash], np.uint64),
    )[0].as_py()
    families = (meta.family, meta.family + "_total")
    counter = meta.kind == "counter" and bool(name) and name in families
    metadata = [("prometheus.type", meta.kind)]
    if meta.family:
        metadata.append(("prometheus.family", meta.family))
    return {
        "metric_name": name,
        "series_id": series_id,
        "attributes": attributes,
        "resource_attributes": resource,
        "service_name": dict(resource).get("service.name"),
        "metric_description": meta.help or None,
        "metric_unit": meta.unit or None,
        "metric_type": "sum" if counter else "gauge",
        "aggregation_temporality": 2 if counter else None,
        "is_monotonic": True if counter else None,
        "metric_metadata": metadata,
    }


LABEL_NAMES = st.sampled_from(["__name__", "job", "instance", "mode", "le", "zone", "ä"])
LABEL_VALUES = st.sampled_from(
    ["", "up", "node", "shop/api", "a/b/c", "/x", "ns/", "h1:9100", "idle", "é"]
)
SERIES = st.lists(
    st.dictionaries(LABEL_NAMES, LABEL_VALUES, max_size=5).map(lambda d: list(d.items())),
    max_size=12,
)
METAS = [
    Meta(),
    Meta("counter", "up", "Up.", "1"),
    Meta("counter", "node"),
    Meta("gauge", "", "", "seconds"),
]


@settings(max_examples=300, deadline=None)
@given(
    series=SERIES,
    meta_picks=st.lists(st.integers(0, len(METAS) - 1), max_size=12),
    one=st.booleans(),
)
def test_a_request_worked_out_at_once_equals_each_series_worked_out_alone(
    series: list[SeriesLabels], meta_picks: list[int], one: bool
) -> None:
    if one:  # the cached path hands every series the same Meta object
        metas = [Meta()] * len(series)
    else:
        picks = (meta_picks * len(series))[: len(series)] or [0] * len(series)
        metas = [Meta(*vars(METAS[p]).values()) for p in picks]  # equal, not the same objects
    table = series_columns(_labels(series), len(series), lambda names: metas)
    expected = [_one(pairs, meta) for pairs, meta in zip(series, metas, strict=True)]
    assert table.to_pylist() == expected


def test_the_series_id_of_a_label_set_does_not_move() -> None:
    """Stored data is keyed by these ids: the same labels must keep giving them."""
    series = [
        [("__name__", "up"), ("job", "node"), ("instance", "h1:9100")],
        [("__name__", "cpu_seconds_total"), ("instance", "h1:9100"), ("mode", "idle")],
        [("__name__", "temp"), ("room", "lab"), ("empty", "")],
    ]
    table = series_columns(_labels(series), 3, lambda names: [Meta()] * len(names))
    assert table.column("series_id").to_pylist() == GOLDEN_IDS


GOLDEN_IDS = [-2819678260877093620, -6644822806736869656, -1326654348249037710]


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ([[("", "x"), ("__name__", "up")]], "a label has an empty name"),
        ([[("__name__", "up"), ("a", "1"), ("a", "2")]], "a label name appears twice"),
    ],
)
def test_label_sets_that_cannot_be_stored_are_refused(
    series: list[SeriesLabels], message: str
) -> None:
    with pytest.raises(DecodeError, match=message):
        series_columns(_labels(series), len(series), lambda names: [Meta()] * len(names))


def test_a_label_name_twice_in_two_series_is_no_duplicate() -> None:
    series = [[("__name__", "up"), ("a", "1")], [("__name__", "up"), ("a", "2")]]
    table = series_columns(_labels(series), 2, lambda names: [Meta()] * len(names))
    assert table.column("attributes").to_pylist() == [[("a", "1")], [("a", "2")]]
