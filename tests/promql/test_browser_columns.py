"""The metric browser's column-wise answers (label names and values over every series)
are the same as the label sets of every series, built one by one, would give.

Random series with the awkward cases: attribute keys that sanitise to one label
(joined with ";"), empty values, attributes named ``le``, ``quantile``, ``job``,
promoted resource attributes, histograms, summaries, exponential histograms and
resources with target_info attributes.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql import labels, mapping, meta
from shoal.promql.source import _resources
from shoal.schema import METRICS_SCHEMA

KEYS = ["host", "http.method", "http_method", "le", "quantile", "job", "zone", "1st", "_x"]
VALUES = ["", "a", "b", "GET", "0.5"]
RESOURCE_KEYS = ["service.name", "service.namespace", "service.instance.id", "region", "team"]
TYPES = ["gauge", "sum", "histogram", "summary", "exponential_histogram"]
MAP = pa.map_(pa.string(), pa.string())

series_rows = st.fixed_dictionaries(
    {
        "metric_name": st.sampled_from(["cpu", "http.requests", "latency"]),
        "metric_type": st.sampled_from(TYPES),
        "attributes": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4),
        "resource": st.dictionaries(
            st.sampled_from(RESOURCE_KEYS), st.sampled_from(["", "api", "shop", "eu"]), max_size=4
        ),
        "bounds": st.lists(st.sampled_from([0.1, 0.5, 1.0, 2.5, 1e-7]), max_size=3, unique=True),
        "quantiles": st.lists(st.sampled_from([0.5, 0.9, 0.99]), max_size=2, unique=True),
    }
)


def _index(rows: list[dict[str, object]]) -> pa.Table:
    def field(name: str) -> pa.DataType:
        return METRICS_SCHEMA.field(name).type

    return pa.table(
        {
            "metric_name": pa.array([r["metric_name"] for r in rows], pa.string()),
            "metric_type": pa.array([r["metric_type"] for r in rows], pa.string()),
            "metric_unit": pa.array([""] * len(rows), pa.string()),
            "is_monotonic": pa.array([True] * len(rows), pa.bool_()),
            "aggregation_temporality": pa.array([2] * len(rows), pa.int32()),
            "series_id": pa.array(range(len(rows)), pa.int64()),
            "service_name": pa.array(
                [r["resource"].get("service.name") for r in rows],  # type: ignore[attr-defined]
                pa.string(),
            ),
            "attributes": pa.array([list(r["attributes"].items()) for r in rows], MAP),  # type: ignore[attr-defined]
            "resource_attributes": pa.array(
                [list(r["resource"].items()) for r in rows],
                MAP,  # type: ignore[attr-defined]
            ),
            "explicit_bounds": pa.array([r["bounds"] for r in rows], field("explicit_bounds")),
            "quantile_values": pa.array(
                [[{"quantile": q, "value": 1.0} for q in r["quantiles"]] for r in rows],  # type: ignore[attr-defined]
                field("quantile_values"),
            ),
            "verbatim": pa.array([False] * len(rows), pa.bool_()),
        }
    )


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(series_rows, max_size=12),
    promote=st.sampled_from([(), ("region",), ("region", "team")]),
    label=st.sampled_from(
        [
            "host",
            "http_method",
            "le",
            "quantile",
            "job",
            "instance",
            "zone",
            "key_1st",
            "key_x",
            "region",
            "nothing",
        ]
    ),
)
def test_column_wise_answers_equal_the_label_sets(
    rows: list[dict[str, object]], promote: tuple[str, ...], label: str
) -> None:
    table = _index(rows)
    resources = _resources(table)
    label_sets = labels.series_label_sets(table, promote) + mapping.target_label_sets(resources)
    names = {name for labels in label_sets for name in labels}
    assert meta._all_label_names(table, resources, promote) == names
    values = meta._all_label_values(label, table, resources, promote)
    expected = {labels[label] for labels in label_sets if labels.get(label)}
    assert values is None or values == expected


def test_remembered_answers_are_bounded_in_entries_and_in_series() -> None:
    from shoal.promql.source import _Answers

    answers = _Answers(max_entries=3, max_weight=10)
    answers.put("a", "A", 6)
    answers.put("b", "B", 6)  # 12 series > 10: the oldest goes
    assert answers.get("a") == (False, None) and answers.get("b") == (True, "B")
    answers.put("huge", "H", 11)  # never kept
    assert answers.get("huge") == (False, None)
    for k in "cde":
        answers.put(k, k.upper(), 1)
    assert [answers.get(k)[0] for k in "bcde"] == [False, True, True, True]


def test_the_fingerprint_moves_with_the_set_of_series_not_with_new_samples() -> None:
    from shoal.promql.source import fingerprint

    def rows(ids: list[int], firsts: list[int], lasts: list[int]) -> pa.Table:
        return pa.table({"series_id": ids, "first_ns": firsts, "last_ns": lasts})

    base = fingerprint(rows([1, 2], [10, 20], [30, 40]))
    assert fingerprint(rows([2, 1], [20, 10], [99, 99])) == base  # later samples only
    assert fingerprint(rows([1, 2, 3], [10, 20, 5], [30, 40, 5])) != base  # a new series
    assert fingerprint(rows([1, 2], [9, 20], [30, 40])) != base  # an earlier first row
