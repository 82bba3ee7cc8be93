"""Columns kept for senders that export the same metrics, resources and scopes again.

The per-metric columns and the resource and scope columns of a request's rows are kept
by everything they are made of. Decoding a sequence of requests that share some of
those and differ in others (a description, a unit, metadata, a kind, a temporality,
the number of points per metric, the resource, the scope) gives exactly the rows that
decoding each of them with nothing kept gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from shoal.errors import DecodeError
from shoal.otlp import attributes, common, decode, metrics
from shoal.rows.cache import DecodeCache

from .json_helpers import identical
from .test_fuzz import metrics_requests

NAMES = ["m", "http.requests"]
RESOURCES = [{"service.name": "a"}, {"service.name": "b", "host.name": "h"}, {}]
SCOPES = ["", "lib", "other"]

MetricSpec = tuple[str, str, str, tuple[tuple[str, str], ...], str, int, bool, int]
RequestSpec = list[tuple[int, list[tuple[int, list[MetricSpec]]]]]

metric_specs = st.tuples(
    st.sampled_from(NAMES),
    st.sampled_from(["", "A description."]),
    st.sampled_from(["", "s", "By"]),
    st.sampled_from([(), (("unit.family", "x"),), (("unit.family", "y"),)]),
    st.sampled_from(["gauge", "sum", "histogram"]),
    st.integers(0, 2),  # temporality
    st.booleans(),  # monotonic
    st.integers(1, 3),  # points
)
request_specs = st.lists(
    st.tuples(
        st.integers(0, len(RESOURCES) - 1),
        st.lists(
            st.tuples(st.integers(0, len(SCOPES) - 1), st.lists(metric_specs, max_size=3)),
            min_size=1,
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=2,
)


def _kv(key: str, value: str) -> KeyValue:
    kv = KeyValue(key=key)
    kv.value.string_value = value
    return kv


def _metric(spec: MetricSpec) -> Metric:
    name, description, unit, metadata, kind, temporality, monotonic, points = spec
    m = Metric(name=name, description=description, unit=unit)
    m.metadata.extend(_kv(k, v) for k, v in metadata)
    container = getattr(m, kind)
    if kind != "gauge":
        container.aggregation_temporality = temporality
    if kind == "sum":
        container.is_monotonic = monotonic
    for i in range(points):
        point = container.data_points.add(time_unix_nano=1_700_000_000_000_000_000 + i)
        point.attributes.append(_kv("i", str(i)))
        if kind == "histogram":
            point.count = 1
        else:
            point.as_double = float(i)
    return m


def _request(spec: RequestSpec) -> bytes:
    request = ExportMetricsServiceRequest()
    for resource, scopes in spec:
        rm = request.resource_metrics.add()
        rm.resource.attributes.extend(_kv(k, v) for k, v in RESOURCES[resource].items())
        for scope, specs in scopes:
            sm = rm.scope_metrics.add()
            sm.scope.name = SCOPES[scope]
            sm.metrics.extend(_metric(s) for s in specs)
    return request.SerializeToString()


@contextmanager
def _nothing_kept() -> Iterator[None]:
    """The repeat caches swapped for ones that keep nothing, then put back."""
    saved = (common._taken, metrics._metric_blocks, metrics._metric_rows, attributes._lists)
    common._taken = DecodeCache(0, 0)
    metrics._metric_blocks = DecodeCache(0, 0)
    metrics._metric_rows = DecodeCache(0, 0)
    attributes._lists = DecodeCache(0, 0)
    try:
        yield
    finally:
        common._taken, metrics._metric_blocks, metrics._metric_rows, attributes._lists = saved


def _outcome(signal: str, body: bytes) -> tuple[pa.Table, int, list[str]] | str:
    try:
        result = decode(signal, body)
    except DecodeError as exc:
        return str(exc)
    return result.table, result.rejected, result.errors


def _same(signal: str, body: bytes) -> None:
    kept = _outcome(signal, body)
    with _nothing_kept():
        fresh = _outcome(signal, body)
    if isinstance(kept, str) or isinstance(fresh, str):
        assert kept == fresh
        return
    assert identical(kept[0], fresh[0])  # NaN equal to NaN: a generated value may be NaN
    assert kept[1:] == fresh[1:]


@settings(max_examples=150, deadline=None)
@given(sequence=st.lists(request_specs, min_size=2, max_size=6))
def test_rows_with_kept_columns_are_the_rows_decoded_afresh(sequence: list[RequestSpec]) -> None:
    for spec in sequence + sequence:  # the second time round, everything is kept
        _same("metrics", _request(spec))


@settings(max_examples=60, deadline=None)
@given(sequence=st.lists(metrics_requests(), min_size=1, max_size=4))
def test_any_requests_decode_alike_kept_or_afresh(
    sequence: list[ExportMetricsServiceRequest],
) -> None:
    for request in sequence + sequence:
        _same("metrics", request.SerializeToString())


def test_logs_of_the_same_resources_and_scopes_are_decoded_alike() -> None:
    """Logs and spans keep their resource and scope columns the same way."""
    bodies = []
    for resource, records in ((0, 2), (1, 2), (0, 3), (0, 2)):
        request = ExportLogsServiceRequest()
        rl = request.resource_logs.add()
        rl.resource.attributes.extend(_kv(k, v) for k, v in RESOURCES[resource].items())
        sl = rl.scope_logs.add()
        for i in range(records):
            sl.log_records.add(time_unix_nano=1_700_000_000_000_000_000 + i).body.string_value = "x"
        bodies.append(request.SerializeToString())
    for body in bodies + bodies:
        _same("logs", body)
    kept = decode("logs", bodies[0]).table.column("resource_attributes").to_pylist()
    assert kept == [[("service.name", "a")]] * 2


def test_attribute_lists_of_the_same_bytes_cut_elsewhere_are_other_lists() -> None:
    """Kept attribute maps are found by the lists' bytes and by where each entry and each
    list ends: the same bytes cut into entries or lists elsewhere decode as themselves.
    (Two encoded KeyValues run together are one valid KeyValue: the later fields win.)"""
    x, y, z = (_kv(k, v).SerializeToString() for k, v in (("a", "1"), ("b", "2"), ("c", "3")))
    cuts = [
        [[x, y + z]],  # two entries
        [[x + y, z]],  # the same bytes, the first entry ending elsewhere
        [[x, y], [z]],  # the same entries in two lists
        [[x], [y, z]],  # ... ending elsewhere
    ]
    decoded = []
    for lists in cuts + cuts:
        array = pa.array(lists, pa.list_(pa.binary()))
        kept = attributes.decode_lists(array)
        with _nothing_kept():
            fresh = attributes.decode_lists(array)
        assert kept.values.to_pylist() == fresh.values.to_pylist()
        assert kept.set_hash.tolist() == fresh.set_hash.tolist()
        decoded.append(kept.values.to_pylist())
    assert decoded[0] == [[("a", "1"), ("c", "3")]]
    assert decoded[1] == [[("b", "2"), ("c", "3")]]
    assert decoded[2] == [[("a", "1"), ("b", "2")], [("c", "3")]]
    assert decoded[3] == [[("a", "1")], [("b", "2"), ("c", "3")]]
    assert not attributes.decode_lists(
        pa.array(cuts[0], pa.list_(pa.binary()))
    ).set_hash.flags.writeable
