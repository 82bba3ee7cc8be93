"""OTLP metrics requests read by the C scanner (``shoal/otlp/_scan.c``) and gathered from
known series (``shoal.otlp.scanned``), against the decoder in Python, their oracle.

For every body, the scanned path either leaves the request to the full decoder (None)
or gives exactly its rows: the same table, row for row and column for column, whether
the series are new or known, and whatever else the cache holds. Bodies are written
field by field, so that they hold what exporters rarely send: unknown fields, fields out
of order or given twice, points without a value or a time, histograms among gauges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from loadtest import payloads
from shoal.errors import DecodeError
from shoal.otlp import metrics, scanned, wire
from shoal.rows.known import KnownSeries
from shoal.rows.result import DecodeResult
from tests.wire_fields import (
    Damage,
    damages,
    double,
    field,
    fixed64,
    unknown_fields,
    varint,
    varint_field,
)

SCAN = scanned.SCAN_METRICS


def test_the_scanner_is_built() -> None:
    """The install compiles it (setup.py): where a C compiler exists, as on every machine
    the tests run on, it must be there, or the tests below would test nothing."""
    assert SCAN is not None


needs_scanner = pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")


# -- writing bodies field by field --------------------------------------------------------

words = st.sampled_from(["", "a", "b", "svc", "é"])


@st.composite
def key_values(draw: st.DrawFn) -> bytes:
    value = draw(
        st.one_of(
            st.builds(lambda s: field(1, s.encode()), words),
            st.builds(lambda i: varint_field(3, i), st.integers(-2, 2)),
            st.builds(lambda b: varint_field(2, b), st.integers(0, 1)),
        )
    )
    return field(1, draw(st.sampled_from(["k", "service.name", "x"])).encode()) + field(2, value)


def pooled(strategy: st.SearchStrategy[Any], key: str) -> st.SearchStrategy[Any]:
    """One of a few values drawn once per example and shared by all its draws: so that the
    points, metrics and bodies of one example meet the same attributes, metric, scope or
    resource again, under another kind of metric or beside other fields."""
    return st.shared(st.lists(strategy, min_size=1, max_size=2), key=key).flatmap(st.sampled_from)


def _shuffled(draw: st.DrawFn, parts: list[bytes]) -> bytes:
    if draw(st.booleans()):
        draw(st.randoms()).shuffle(parts)  # fields in any order
    return b"".join(parts)


attribute_fields = st.lists(key_values(), max_size=2).map(
    lambda kvs: b"".join(field(7, kv) for kv in kvs)
)


@st.composite
def points(draw: st.DrawFn, plain: bool) -> bytes:
    """A ``NumberDataPoint``; ``plain``: one the scanner must take."""
    parts = [draw(pooled(attribute_fields, "attributes"))]
    value = draw(st.sampled_from(["double", "int"] if plain else ["double", "int", "none", "both"]))
    if value in ("double", "both"):
        parts.append(double(4, draw(st.floats())))
    if value in ("int", "both"):
        parts.append(fixed64(6, draw(st.integers(-(2**63), 2**63 - 1))))
    times = [1, 2, 10**18] if plain else [1, 2, 10**18, 0, 2**63]
    if plain or draw(st.integers(0, 9)):  # mostly with a time, sometimes 0 or past int64
        parts.append(fixed64(3, draw(st.sampled_from(times))))
    if draw(st.booleans()):
        starts = [0, 1, 5 * 10**17] if plain else [0, 1, 5 * 10**17, 2**64 - 1]
        parts.append(fixed64(2, draw(st.sampled_from(starts))))
    if draw(st.booleans()):
        parts.append(varint_field(8, draw(st.sampled_from([0, 1] if plain else [0, 1, 2**32]))))
    if not plain and not draw(st.integers(0, 20)):
        parts.append(field(5, b""))  # an exemplar
    parts += draw(unknown_fields(9, 12))
    return _shuffled(draw, parts)


@st.composite
def metric_fields(draw: st.DrawFn, plain: bool) -> list[bytes]:
    """A metric's fields but its data: name, description, unit, metadata."""
    parts = [field(1, draw(st.sampled_from(["up", "m"] if plain else ["up", "m", ""])).encode())]
    if draw(st.booleans()):
        parts.append(field(2, draw(words).encode()))
    if draw(st.booleans()):
        parts.append(field(3, draw(words).encode()))
    parts += [field(12, kv) for kv in draw(st.lists(key_values(), max_size=1))]
    return parts + draw(unknown_fields(13, 20))


@st.composite
def metric(draw: st.DrawFn, plain: bool) -> bytes:
    parts = list(draw(pooled(metric_fields(plain), f"metric {plain}")))
    data = [field(1, p) for p in draw(st.lists(points(plain), min_size=int(plain), max_size=3))]
    kind = draw(st.sampled_from([5, 7] if plain else [5, 7, 7, 9, 11, 0]))
    if kind == 7:  # a sum: temporality and monotonicity
        if draw(st.booleans()):
            data.append(varint_field(2, draw(st.integers(0, 2))))
        if draw(st.booleans()):
            data.append(varint_field(3, draw(st.integers(0, 1))))
    if kind:  # the data anywhere among the other fields, which keep their pooled order
        parts.insert(draw(st.integers(0, len(parts))), field(kind, _shuffled(draw, data)))
    if not plain and not draw(st.integers(0, 20)):  # a oneof set twice
        parts.append(field(5, b""))
    return b"".join(parts)


@st.composite
def scope_fields(draw: st.DrawFn) -> bytes:
    inner = [field(1, draw(words).encode())]
    if draw(st.booleans()):
        inner.append(field(2, draw(words).encode()))
    inner += [field(3, kv) for kv in draw(st.lists(key_values(), max_size=1))]
    return field(1, b"".join(inner))


@st.composite
def scope(draw: st.DrawFn, plain: bool) -> bytes:
    parts = [draw(pooled(scope_fields(), "scope"))]
    parts += [field(2, m) for m in draw(st.lists(metric(plain), min_size=int(plain), max_size=3))]
    if draw(st.booleans()):
        parts.append(field(3, draw(words).encode()))
    return _shuffled(draw, parts)


@st.composite
def resource_fields(draw: st.DrawFn) -> list[bytes]:
    inner = b"".join(field(1, kv) for kv in draw(st.lists(key_values(), max_size=2)))
    if draw(st.booleans()):
        inner += varint_field(2, draw(st.integers(0, 3)))
    return [field(1, inner)] if draw(st.integers(0, 5)) else []


@st.composite
def resource(draw: st.DrawFn, plain: bool) -> bytes:
    parts = list(draw(pooled(resource_fields(), "resource")))
    parts += [field(2, s) for s in draw(st.lists(scope(plain), min_size=1, max_size=2))]
    if draw(st.booleans()):
        parts.append(field(3, draw(words).encode()))
    return _shuffled(draw, parts)


@st.composite
def requests(draw: st.DrawFn, plain: bool = False) -> bytes:
    """An ``ExportMetricsServiceRequest``; ``plain``: one of gauges and sums whose every
    point makes a row, with nothing given twice, which the scanner must take."""
    parts = [field(1, r) for r in draw(st.lists(resource(plain), min_size=1, max_size=2))]
    parts += draw(unknown_fields(2, 9))
    return _shuffled(draw, parts)


# -- the oracle ------------------------------------------------------------------------------


def _full(body: bytes) -> DecodeResult | DecodeError:
    try:
        return metrics.decode(wire.to_struct("metrics", body))
    except DecodeError as exc:
        return exc


def _same(got: pa.ChunkedArray, expected: pa.ChunkedArray) -> bool:
    """Equal columns; floats bit for bit (NaN equals NaN of the same payload)."""
    if got.type != pa.float64():
        return bool(got.equals(expected))
    bits = [np.asarray(c.combine_chunks().fill_null(0)).view(np.uint64) for c in (got, expected)]
    nulls = [np.asarray(c.combine_chunks().is_null()) for c in (got, expected)]
    return bool(np.array_equal(*bits) and np.array_equal(*nulls))


def _agree(body: bytes, known: KnownSeries) -> bool:
    """The scanned path gives the full decoder's rows for ``body``, or leaves it to it;
    whether it took the body."""
    expected = _full(body)
    try:
        got = scanned.decode(body, known)
    except DecodeError:
        assert isinstance(expected, DecodeError), "a body the full decoder takes was refused"
        return True
    if got is None:
        return False
    assert isinstance(expected, DecodeResult), "a body the full decoder refuses was taken"
    assert (got.accepted, got.rejected, got.errors) == (
        expected.accepted,
        expected.rejected,
        expected.errors,
    )
    assert got.table.schema == expected.table.schema
    for name in expected.table.column_names:
        assert _same(got.table.column(name), expected.table.column(name)), name
    assert all(column.num_chunks == 1 for column in got.table.columns)
    # what the WAL's accounting takes from the decoder instead of asking the table
    rows = got.table.num_rows
    assert got.all_null == tuple(column.null_count == rows for column in got.table.columns)
    return True


@needs_scanner
@settings(max_examples=100, deadline=None)
@given(bodies=st.lists(requests(plain=True) | requests(), min_size=1, max_size=4))
def test_requests_get_the_rows_of_the_full_decoder_new_or_known(bodies: list[bytes]) -> None:
    """Each body twice, through one cache shared by all: first its series are new, then
    known, and keys of other bodies that differ from them in one field are in the cache."""
    known = KnownSeries(max_series=1000, max_bytes=1 << 20)
    for body in bodies + bodies:
        _agree(body, known)


@needs_scanner
@settings(max_examples=100, deadline=None)
@given(body=requests(plain=True))
def test_plain_requests_are_scanned(body: bytes) -> None:
    assert _agree(body, KnownSeries(max_series=1000, max_bytes=1 << 20))


@needs_scanner
@settings(max_examples=100, deadline=None)
@given(body=requests(), damage=damages)
def test_damaged_bodies_are_left_to_the_decoder_or_read_as_it_reads_them(
    body: bytes, damage: Damage
) -> None:
    """Cut short or with bytes changed, after the intact body filled the cache: a body is
    never read otherwise than the full decoder reads it, and never crashes the scanner."""
    known = KnownSeries(max_series=1000, max_bytes=1 << 20)
    _agree(body, known)
    _agree(damage.to(body), known)


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=64))
def test_any_bytes(body: bytes) -> None:
    _agree(body, KnownSeries(max_series=1000, max_bytes=1 << 20))


_POINT = fixed64(3, 5) + double(4, 1.5)
_GAUGE = field(1, b"up") + field(5, field(1, _POINT))


def _request(metric: bytes, scope: bytes = b"", resource: bytes = b"") -> bytes:
    return field(1, resource + field(2, scope + field(2, metric)))


def _point(point: bytes) -> bytes:
    return _request(field(1, b"up") + field(5, field(1, point)))


@needs_scanner
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="no resources"),
        pytest.param(_request(field(1, b"up") + field(5, b"")), id="no points"),
        pytest.param(_point(fixed64(3, 5)), id="a point without a value"),
        pytest.param(_point(_POINT + fixed64(6, 2)), id="a point with both values"),
        pytest.param(_point(double(4, 1.5)), id="a point without a time"),
        pytest.param(_point(fixed64(3, 0) + double(4, 1.5)), id="time 0"),
        pytest.param(_point(fixed64(3, 2**63) + double(4, 1.5)), id="time beyond int64"),
        pytest.param(_point(_POINT + fixed64(2, 2**63)), id="start time beyond int64"),
        pytest.param(_point(_POINT + varint_field(8, 2**32)), id="flags beyond uint32"),
        pytest.param(_point(_POINT + field(5, b"")), id="an exemplar"),
        pytest.param(_point(_POINT + fixed64(3, 6)), id="a time given twice"),
        pytest.param(_point(_POINT + double(4, 2.0)), id="a value given twice"),
        pytest.param(_point(_POINT + varint_field(8, 1) * 2), id="flags given twice"),
        pytest.param(_point(varint_field(3, 5) + double(4, 1.5)), id="a time as a varint"),
        pytest.param(_point(_POINT + field(8, b"")), id="flags length-delimited"),
        pytest.param(
            _request(field(1, b"up") + field(5, varint_field(1, 3))), id="a point as a varint"
        ),
        pytest.param(_request(field(1, b"h") + field(9, b"")), id="a histogram"),
        pytest.param(_request(field(1, b"s") + field(11, b"")), id="a summary"),
        pytest.param(_request(field(1, b"e") + field(10, b"")), id="an exponential histogram"),
        pytest.param(_request(field(1, b"up")), id="no data field"),
        pytest.param(_request(field(5, field(1, _POINT))), id="no name"),
        pytest.param(_request(field(1, b"") + field(5, field(1, _POINT))), id="an empty name"),
        pytest.param(_request(field(1, b"up") + _GAUGE), id="a name given twice"),
        pytest.param(
            _request(varint_field(1, 3) + field(5, field(1, _POINT))), id="a name as a varint"
        ),
        pytest.param(_request(_GAUGE + field(5, b"")), id="a gauge given twice"),
        pytest.param(_request(_GAUGE + field(7, b"")), id="a gauge and a sum"),
        pytest.param(_request(_GAUGE + varint_field(3, 1)), id="a unit as a varint"),
        pytest.param(
            _request(field(1, b"c") + field(7, field(1, _POINT) + field(2, b"\x01"))),
            id="a temporality length-delimited",
        ),
        pytest.param(
            _request(field(1, b"c") + field(7, field(1, _POINT) + varint_field(3, 1) * 2)),
            id="monotonicity given twice",
        ),
        pytest.param(_request(_GAUGE, scope=field(1, b"") * 2), id="a scope given twice"),
        pytest.param(_request(_GAUGE, resource=field(1, b"") * 2), id="a resource given twice"),
        pytest.param(_request(_GAUGE, resource=varint_field(3, 1)), id="a schema url as a varint"),
        pytest.param(_request(_GAUGE) + b"\x0b\x0c", id="a group"),
        pytest.param(b"\x00\x00", id="field number 0"),
        pytest.param(_request(_GAUGE)[:-1], id="cut short"),
        pytest.param(varint(1 << 3) + b"\x01", id="resources as a varint"),
    ],
)
def test_what_the_scanner_leaves_to_the_decoder_in_python(body: bytes) -> None:
    assert SCAN is not None
    assert SCAN(body) is None


def test_a_plain_body_of_the_cases_above_is_scanned() -> None:
    """The cases above differ from this body in one thing each."""
    assert SCAN is not None
    assert SCAN(_request(_GAUGE)) is not None


@needs_scanner
def test_a_request_read_whole() -> None:
    """Keys laid out as the C source says; the points of gauges before those of sums."""
    attribute = field(7, field(1, b"k") + field(2, field(1, b"v")))
    sum_point = (
        fixed64(2, 3) + fixed64(3, 7) + fixed64(6, 2**63 + 5) + attribute + varint_field(8, 1)
    )
    sum_metric = field(1, b"c") + field(7, field(1, sum_point) + varint_field(2, 2))
    gauge_metric = field(1, b"g") + field(3, b"s") + field(5, field(1, _POINT))
    resource = field(1, field(1, field(1, b"service.name") + field(2, field(1, b"x"))))
    scope = field(1, field(1, b"lib")) + field(3, b"url")
    body = field(
        1,
        resource
        + field(2, scope[:-5] + field(2, sum_metric) + field(2, gauge_metric) + scope[-5:]),
    )
    assert SCAN is not None
    n, key_offsets, keys, times, starts, values, ints, is_int, flags = SCAN(body)
    assert n == 2
    gauge_m, sum_m = (
        field(1, b"g") + field(3, b"s") + b"g",
        field(1, b"c") + b"s" + varint_field(2, 2),
    )

    def key(m: bytes, attributes: bytes) -> bytes:
        sizes = b"".join(len(part).to_bytes(4, "little") for part in (resource, scope, m))
        return sizes + resource + scope + m + attributes

    first, second = key(gauge_m, b""), key(sum_m, attribute)
    assert keys == first + second
    assert list(memoryview(key_offsets).cast("i")) == [0, len(first), len(first) + len(second)]
    assert list(memoryview(times).cast("q")) == [5, 7]
    assert list(memoryview(starts).cast("q")) == [0, 3]
    assert list(memoryview(values).cast("d")) == [1.5, float(-(2**63) + 5)]
    assert list(memoryview(ints).cast("q")) == [0, -(2**63) + 5]
    assert list(is_int) == [0, 1]
    assert list(memoryview(flags).cast("q")) == [0, 1]


@needs_scanner
def test_only_bytes_are_scanned() -> None:
    """Both passes must read the same bytes: a mutable buffer could change in between."""
    assert SCAN is not None
    with pytest.raises(TypeError):
        SCAN(bytearray(_request(_GAUGE)))  # type: ignore[arg-type]


@needs_scanner
def test_an_exporters_requests_are_decoded_through_the_cache() -> None:
    """The load generator's requests (gauges and sums, four attributes, one resource):
    the second export of the same series is gathered from the cache, and both get the
    full decoder's rows."""
    known = KnownSeries(max_series=10_000, max_bytes=64 << 20)
    built: list[Any] = []
    for round_ in range(2):
        request = payloads.metrics_request(points=500, series=250, start_ns=10**18 + round_, seed=3)
        body = request.SerializeToString()
        before = len(known)
        assert _agree(body, known)
        built.append(len(known) - before)
    assert built[0] > 0  # the first export's series were new
    assert built[1] == 0  # the second's were all known


@needs_scanner
def test_the_sdks_counters_and_gauges_are_scanned_and_known_at_the_next_export() -> None:
    """The real OpenTelemetry SDK's export of counters, up-down counters and observable
    gauges (cumulative, with start times, int and double values, typed attributes): the
    scanner takes it, the rows are the full decoder's, and at the next export every
    series is known."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create({"service.name": "checkout", "deployment.replicas": 3}),
        metric_readers=[reader],
    )
    meter = provider.get_meter("shop.meter", "2.1.0")
    counter = meter.create_counter("orders.placed", unit="{order}", description="Orders")
    updown = meter.create_up_down_counter("queue.items", unit="{item}")
    level = [0.75]

    def observe(_options: CallbackOptions) -> list[Observation]:
        return [Observation(level[0], {"cpu": 0}), Observation(2.5, {"cpu": 1})]

    meter.create_observable_gauge("cpu.utilization", callbacks=[observe], unit="1")
    known = KnownSeries(max_series=1000, max_bytes=1 << 20)
    added = []
    try:
        for export in range(2):
            counter.add(3 + export, {"region": "eu", "vip": True})
            counter.add(2, {"region": "us", "vip": False})
            updown.add(-4 if export else 10, {"queue": "a"})
            level[0] += 0.5
            data = reader.get_metrics_data()
            assert data is not None
            body = encode_metrics(data).SerializeToString()
            assert SCAN is not None and SCAN(body) is not None
            before = len(known)
            assert _agree(body, known)
            added.append(len(known) - before)
    finally:
        provider.shutdown()
    assert added == [5, 0]
