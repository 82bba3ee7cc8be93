"""The metric browser's column-wise answers (label names and values over every series)
are the same as the label sets of every series, built one by one, would give.

Random series with the awkward cases: attribute keys that sanitise to one label
(joined with ";"), empty values, attributes named ``le``, ``quantile``, ``job``,
promoted resource attributes, histograms, summaries, exponential histograms and
resources with target_info attributes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql import candidates, columns, label_columns, labels, mapping, meta
from shoal.promql.matchers import LabelMatcher, matches_all
from shoal.promql.model import key
from shoal.promql.source import _resources
from shoal.schema import METRICS_SCHEMA
from shoal.storage import series_rows as series_index

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
    held=st.booleans(),
)
def test_column_wise_answers_equal_the_label_sets(
    rows: list[dict[str, object]], promote: tuple[str, ...], label: str, held: bool
) -> None:
    table = _index(rows)
    if held:  # as the series index hands its rows out: strings dictionary-encoded
        table = series_index.hold(table)
    resources = _resources(table)
    targets = mapping.target_label_sets(resources)
    one_by_one: dict[object, dict[str, str]] = {}
    for raw in resources.column("resource_attributes").to_pylist():
        found = mapping.target_labels(dict(raw))
        if found is not None:
            one_by_one.setdefault(key(found), found)
    assert targets == list(one_by_one.values())
    resource_maps = table.column("resource_attributes")
    beyond = any(
        k not in mapping.IDENTIFYING and v
        for r in rows
        for k, v in r["resource"].items()  # type: ignore[attr-defined]
    )
    assert columns.any_key_besides(resource_maps, sorted(mapping.IDENTIFYING)) == beyond
    assert beyond or not targets  # none is looked for where no resource has more
    label_sets = labels.series_label_sets(table, promote) + targets
    names = {name for labels in label_sets for name in labels}
    assert meta._all_label_names(table, resources, promote) == names
    values = meta._all_label_values(label, table, resources, promote)
    expected = {labels[label] for labels in label_sets if labels.get(label)}
    assert values is None or values == expected


matchers = st.builds(
    LabelMatcher,
    name=st.sampled_from(["host", "http_method", "job", "instance", "zone", "region", "le"]),
    op=st.sampled_from(["=", "!=", "=~", "!~"]),
    value=st.sampled_from(["", "a", "b", "GET", "api", "shop/api", "eu", "a|b", ".+", "sh.*", ";"]),
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(series_rows, max_size=12),
    promote=st.sampled_from([(), ("region",), ("region", "team")]),
    chosen=st.lists(matchers, min_size=1, max_size=3),
    split=st.integers(0, 12),
    held=st.booleans(),
)
def test_narrowing_keeps_every_row_whose_label_set_matches(
    rows: list[dict[str, object]],
    promote: tuple[str, ...],
    chosen: list[LabelMatcher],
    split: int,
    held: bool,
) -> None:
    """Index rows narrowed column-wise give the label sets that testing every row's label
    set gives (plain or dictionary-encoded, in chunks that are slices)."""
    whole = _index(rows)
    split = min(split, whole.num_rows)
    parts = [whole.slice(0, split), whole.slice(split)]
    if held:  # each part its own dictionaries
        parts = [series_index.hold(part) for part in parts]
    table = pa.concat_tables(parts)
    every = [ls for ls in labels.series_label_sets(table, promote) if matches_all(ls, chosen)]
    narrowed = candidates.narrow(table, chosen, promote)
    assert narrowed.num_rows <= table.num_rows
    assert meta._matching(table, chosen, promote) == sorted(every, key=key)


def test_narrowing_reads_only_the_rows_holding_the_value() -> None:
    rows = [
        {"attributes": {"host": f"h{i % 10}"}, "resource": {"service.instance.id": f"i{i}"}}
        for i in range(100)
    ]
    table = _index(
        [
            {"metric_name": "cpu", "metric_type": "gauge", "bounds": [], "quantiles": [], **r}
            for r in rows
        ]
    )
    one = candidates.narrow(table, [LabelMatcher("instance", "=", "i7")], ())
    assert one.column("series_id").to_pylist() == [7]
    some = candidates.narrow(table, [LabelMatcher("host", "=~", "h[12]")], ())
    assert some.num_rows == 20
    both = [LabelMatcher("host", "=", "h3"), LabelMatcher("instance", "=~", "i[0-9]3")]
    assert candidates.narrow(table, both, ()).column("series_id").to_pylist() == list(
        range(13, 100, 10)
    )
    unnarrowed = candidates.narrow(table, [LabelMatcher("host", "!=", "h1")], ())
    assert unnarrowed.num_rows == 100  # an absent label matches: nothing to narrow on


def test_a_label_that_two_attribute_keys_join_is_found_under_either_key() -> None:
    attributes = [
        {"http.method": "GET"},
        {"http_method": "GET"},
        {"http.method": "a", "http_method": "b"},
    ]
    table = _index(
        [
            {"metric_name": "cpu", "metric_type": "gauge", "bounds": [], "quantiles": [],
             "attributes": a, "resource": {}}
            for a in attributes
        ]
    )  # fmt: skip
    get = [LabelMatcher("http_method", "=", "GET")]
    assert [ls["http_method"] for ls in meta._matching(table, get, ())] == ["GET"]  # one set
    assert candidates.narrow(table, get, ()).num_rows == 3  # joined: not narrowed
    joined = meta._matching(table, [LabelMatcher("http_method", "=", "a;b")], ())
    assert [ls["http_method"] for ls in joined] == ["a;b"]


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


def test_map_lookups_read_plain_and_encoded_maps_and_slices_alike() -> None:
    maps = pa.array(
        [[("a", "1"), ("b", "2")], [], [("b", "3"), ("b", "4")], [("a", "")], [("c", "5")]],
        MAP,
    )
    whole = pa.table({"m": maps})
    for table in (whole, series_index.hold(whole)):
        column = table.column("m")
        assert columns.lookup(column, "b").to_pylist() == ["2", "", "3", "", ""]
        sliced = pa.chunked_array([column.chunk(0).slice(2, 3)])
        assert columns.lookup(sliced, "b").to_pylist() == ["3", "", ""]
        keys, values, rows = columns.entries(sliced)
        assert keys.to_pylist() == ["b", "b", "a", "c"] and rows.tolist() == [0, 0, 1, 2]
        assert values.to_pylist() == ["3", "4", "", "5"]
        assert columns.valued_keys(sliced) == {"b", "c"}
        assert columns.values_under(sliced, "b") == {"3", "4"}
        assert columns.lookup_once(sliced, "b") is None  # "b" twice in one row
        assert columns.rows_with(sliced, "b", lambda v: v == "4").tolist() == [0]


map_rows = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", ""]), st.sampled_from(["1", "2", "", None])),
        max_size=4,
    ),
    min_size=1,
    max_size=12,
)


@given(map_rows, map_rows, st.integers(0, 3), st.sampled_from(["a", "b", "c", "x"]))
@settings(max_examples=150, deadline=None)
def test_map_reads_agree_with_reading_row_by_row(
    first: list[list[tuple[str, str | None]]],
    second: list[list[tuple[str, str | None]]],
    cut: int,
    key: str,
) -> None:
    """Chunks encoded apart (two dictionaries), sliced, with null values and a key twice
    in a row: the first entry of a row wins, an empty value is no value."""
    expected_lookup = []
    expected_kept = []
    rows = first[cut:] + second
    for row in rows:
        values = [v for k, v in row if k == key]
        expected_lookup.append(values[0] if values and values[0] is not None else "")
        expected_kept += [(k, v) for k, v in row if v]
    parts = [pa.table({"m": pa.array(part, MAP)}) for part in (first, second)]
    plain_maps = pa.chunked_array(
        [parts[0].column("m").chunk(0).slice(cut), parts[1]["m"].chunk(0)]
    )
    held = [series_index.hold(part).column("m").chunk(0) for part in parts]
    encoded = pa.chunked_array([held[0].slice(cut), held[1]])
    twice = any(sum(k == key for k, _ in row) > 1 for row in rows)
    for maps in (plain_maps, encoded):
        assert columns.lookup(maps, key).to_pylist() == expected_lookup
        coded = columns.lookup_encoded(maps, key).to_pylist()
        assert [v or "" for v in coded] == expected_lookup
        assert columns.valued_keys(maps) == {k for k, _ in expected_kept}
        assert columns.values_under(maps, key) == {v for k, v in expected_kept if k == key}
        firsts = columns.values_under_once(maps, key)
        assert (firsts is None) == twice
        assert firsts is None or firsts == set(expected_lookup) - {""}
        assert columns.distinct_keys(maps) == sorted({k for row in rows for k, _ in row})
        assert columns.any_key_besides(maps, [key]) == any(k != key for k, _ in expected_kept)
        wanted = {"1"}.__contains__
        holding = {i for i, row in enumerate(rows) for k, v in row if k == key and v == "1"}
        assert set(columns.rows_with(maps, key, wanted).tolist()) == holding
        assert set(columns.rows_with(maps, key, columns.Equal("1")).tolist()) == holding
        besides = {
            i for i, row in enumerate(rows) for k, v in row if k == key and v not in (None, "1")
        }
        unequal = columns.rows_with(maps, key, columns.Equal("1", negated=True))
        assert set(unequal.tolist()) == besides
        once = columns.lookup_once(maps, key)
        assert (once is None) == twice
        if once is not None:
            assert [v or "" for v in once.to_pylist()] == expected_lookup


def test_among_reads_plain_and_encoded_strings_alike() -> None:
    texts = pa.array(["a", None, "b", "c", "a"], pa.string())
    encoded = pa.chunked_array(
        [texts.slice(0, 2).dictionary_encode(), texts.slice(2).dictionary_encode()]
    )
    for column in (pa.chunked_array([texts]), encoded):
        assert columns.among(column, ["a", "c"]).to_pylist() == [True, False, False, True, True]
        assert columns.among(column, []).to_pylist() == [False] * 5


def test_a_selector_without_a_metric_name_makes_label_sets_only_for_its_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``{instance="i7"}`` over 2,000 series makes the label sets of the rows holding the
    value, not of every series (at a million series that was seconds and a gigabyte)."""
    rows = [
        {
            "metric_name": f"m{i % 5}",
            "metric_type": "gauge",
            "attributes": {"host": f"h{i % 10}", "n": str(i)},
            "resource": {"service.name": "api", "service.instance.id": f"i{i % 400}"},
            "bounds": [],
            "quantiles": [],
        }
        for i in range(2000)
    ]
    table = series_index.hold(_index(rows))
    made: list[int] = []
    real = label_columns.label_sets

    def counted(
        rows: pa.Table, promote: tuple[str, ...] = (), matchers: Sequence[LabelMatcher] = ()
    ) -> list[dict[str, str]] | None:
        made.append(rows.num_rows)
        return real(rows, promote, matchers)

    monkeypatch.setattr(label_columns, "label_sets", counted)
    found = meta._matching(table, [LabelMatcher("instance", "=", "i7")], ())
    assert made == [5] and len(found) == 5  # i7 is series 7, 407, 807, 1207, 1607
    assert {ls["instance"] for ls in found} == {"i7"}


distinct_columns = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "", None]),
        st.sampled_from([True, False, None]),
        st.sampled_from([0, 7, -3, None, 1 << 40, -(1 << 40)]),
        st.sampled_from(["x", "y", None]),
    ),
    max_size=30,
)


@given(distinct_columns, st.integers(0, 30), st.booleans())
@settings(max_examples=200, deadline=None)
def test_distinct_rows_finds_each_combination_where_it_first_appears(
    rows: list[tuple[str | None, bool | None, int | None, str | None]], cut: int, slots: bool
) -> None:
    """Strings encoded in two chunks with their own dictionaries, booleans, integers
    beyond the slot table, plain strings, nulls in each; the combinations numbered
    through the slot table or through a hash."""
    cut = min(cut, len(rows))
    names = ["s", "b", "i", "p"]
    parts = [
        list(zip(*part, strict=True)) if part else [[]] * 4 for part in (rows[:cut], rows[cut:])
    ]
    types = [pa.string(), pa.bool_(), pa.int64(), pa.string()]
    table = pa.table(
        {
            name: pa.chunked_array(
                [
                    pa.array(list(part[i]), t).dictionary_encode()
                    if name == "s"
                    else pa.array(list(part[i]), t)
                    for part in parts
                ],
                pa.dictionary(pa.int32(), pa.string()) if name == "s" else t,
            )
            for i, (name, t) in enumerate(zip(names, types, strict=True))
        }
    )
    seen: dict[tuple[object, ...], int] = {}
    expected_numbers = [seen.setdefault(row, len(seen)) for row in rows]
    expected_first = [expected_numbers.index(n) for n in range(len(seen))]
    if not slots:
        original, columns._SLOTS = columns._SLOTS, 1
    try:
        first, numbered = columns.distinct_rows(table, names)
    finally:
        if not slots:
            columns._SLOTS = original
    assert first.tolist() == expected_first
    assert numbered.tolist() == expected_numbers
