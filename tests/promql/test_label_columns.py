"""Label sets made column by column are the label sets made row by row.

:func:`shoal.promql.label_columns.label_sets` against
:func:`shoal.promql.labels.label_sets_by_row` filtered by ``matches_all``: on random
index rows in both forms (plain, and dictionary-encoded as the index holds them), with
the awkward cases the column-wise path must notice and hand back (keys that sanitise to
one label, ``job`` as an attribute, a key twice in one map, histograms, promoted resource
attributes), null values (no value, as in the row-by-row label sets), and the orders
that tell label sets apart (a value that is a prefix of another, names and values beyond
ASCII).
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql import label_columns, labels, meta
from shoal.promql.matchers import LabelMatcher, matches_all
from shoal.schema import METRICS_SCHEMA
from shoal.storage import series_rows as series_index

KEYS = ["host", "http.method", "zone", "1st", "_x", "é"]
AWKWARD_KEYS = ["http_method", "job", "instance"]
VALUES = ["", "a", "ab", "a b", "b", "Z", "é", "a;b"]
RESOURCE_KEYS = ["service.name", "service.namespace", "service.instance.id", "region"]
ENTRY = pa.struct([pa.field("key", pa.string(), False), ("value", pa.string())])
MAP = pa.map_(pa.string(), pa.string())

pairs = st.lists(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)),
    max_size=4,
    unique_by=lambda kv: kv[0],
)
rows = st.fixed_dictionaries(
    {
        "metric_name": st.sampled_from(["cpu", "http.requests", "bytes_total", "up"]),
        "metric_type": st.sampled_from(["gauge", "sum", "exponential_histogram"]),
        "metric_unit": st.sampled_from(["", "s", "By", "1", None]),
        "is_monotonic": st.sampled_from([True, False, None]),
        "verbatim": st.booleans(),
        "attributes": pairs,
        "resource": st.lists(
            st.tuples(st.sampled_from(RESOURCE_KEYS), st.sampled_from(["", "api", "shop", "i-1"])),
            max_size=4,
            unique_by=lambda kv: kv[0],
        ),
    }
)
awkward = st.one_of(
    st.just(("type", "histogram")),
    st.just(("type", "summary")),
    st.tuples(st.just("key"), st.sampled_from(AWKWARD_KEYS)),
    st.just(("twice", "host")),
    st.just(("null", "zone")),
)


def _table(found: list[dict[str, object]]) -> pa.Table:
    def field(name: str) -> pa.DataType:
        return METRICS_SCHEMA.field(name).type

    n = len(found)
    return pa.table(
        {
            "metric_name": pa.array([r["metric_name"] for r in found], pa.string()),
            "metric_type": pa.array([r["metric_type"] for r in found], pa.string()),
            "metric_unit": pa.array([r["metric_unit"] for r in found], pa.string()),
            "is_monotonic": pa.array([r["is_monotonic"] for r in found], pa.bool_()),
            "aggregation_temporality": pa.array([2] * n, pa.int32()),
            "series_id": pa.array(range(n), pa.int64()),
            "attributes": pa.array([r["attributes"] for r in found], MAP),
            "resource_attributes": pa.array([r["resource"] for r in found], MAP),
            "explicit_bounds": pa.array([[1.0]] * n, field("explicit_bounds")),
            "quantile_values": pa.array(
                [[{"quantile": 0.5, "value": 1.0}]] * n, field("quantile_values")
            ),
            "verbatim": pa.array([r["verbatim"] for r in found], pa.bool_()),
        }
    )


def _spoil(found: list[dict[str, object]], how: tuple[str, str], at: int) -> None:
    row = found[at % len(found)]
    kind, what = how
    attributes = list(row["attributes"])  # type: ignore[call-overload]
    if kind == "type":
        row["metric_type"] = what
    elif kind == "key":
        attributes.append((what, "v"))
    elif kind == "twice":
        attributes += [(what, "1"), (what, "2")]
    else:  # a null value, in place of the key's value where the row has the key
        attributes = [kv for kv in attributes if kv[0] != what] + [(what, None)]
    row["attributes"] = attributes


matchers = st.builds(
    LabelMatcher,
    name=st.sampled_from(["host", "http_method", "zone", "key_1st", "job", "instance", "__name__"]),
    op=st.sampled_from(["=", "!=", "=~", "!~"]),
    value=st.sampled_from(["", "a", "ab", "api", "shop/api", "cpu", "a.*", ".+", "up|cpu", "é"]),
)


@settings(max_examples=400, deadline=None)
@given(
    found=st.lists(rows, min_size=1, max_size=12),
    spoil=st.lists(st.tuples(awkward, st.integers(0, 11)), max_size=1),
    chosen=st.lists(matchers, max_size=2),
    held=st.booleans(),
    split=st.integers(0, 12),
    promote=st.sampled_from([(), ("region",)]),
)
def test_column_wise_label_sets_equal_the_row_by_row_ones(
    found: list[dict[str, object]],
    spoil: list[tuple[tuple[str, str], int]],
    chosen: list[LabelMatcher],
    held: bool,
    split: int,
    promote: tuple[str, ...],
) -> None:
    for how, at in spoil:
        _spoil(found, how, at)
    table = _table(found)
    if held:  # strings dictionary-encoded, as the index hands its rows out
        table = series_index.hold(table)
    cut = min(split, table.num_rows)  # two chunks, their dictionaries apart
    table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    expected = [ls for ls in labels.label_sets_by_row(table, promote) if matches_all(ls, chosen)]
    answer = label_columns.label_sets(table, promote, chosen)
    simple = not promote and all(how[0] == "null" for how, _ in spoil)  # null: no value
    assert answer is not None or not simple  # only the awkward cases go row by row
    if answer is not None:
        assert answer == expected
        assert [list(ls) for ls in answer] == [list(ls) for ls in expected]  # label order
    assert meta._matching(table, chosen, promote) == expected


def test_a_metric_of_many_hosts_in_label_order() -> None:
    found = [
        {
            "metric_name": "bench_metric_0",
            "metric_type": "gauge",
            "metric_unit": "",
            "is_monotonic": None,
            "verbatim": True,
            "attributes": [("host", f"host-{i}"), ("shard", str(i % 3))],
            "resource": [("service.name", "bench"), ("service.instance.id", f"host-{i}")],
        }
        for i in (10, 2, 1, 100)
    ]
    answer = label_columns.label_sets(series_index.hold(_table(found)))
    assert answer is not None
    assert [ls["host"] for ls in answer] == ["host-1", "host-10", "host-100", "host-2"]
    assert answer[0] == {
        "host": "host-1",
        "shard": "1",
        "job": "bench",
        "instance": "host-1",
        "__name__": "bench_metric_0",
    }
