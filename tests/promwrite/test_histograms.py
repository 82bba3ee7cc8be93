"""Native histograms of remote write, decoded on their own: each lands in the columns an
OTLP exponential histogram of the same observations fills (the real OpenTelemetry SDK
makes that one), float, gauge, custom-bucket and stale histograms as documented, what
cannot be stored refused one histogram at a time with its reason, and no input makes the
decoder fail any other way than with a DecodeError."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

from loadtest.native_histograms import (
    GAUGE,
    NativeHistogram,
    Series,
    encode_v1,
    encode_v2,
    zigzag,
)
from loadtest.remote_write import field, varint
from shoal import otlp
from shoal.errors import DecodeError
from shoal.promwrite.decode import V1, V2, Written, decode
from shoal.promwrite.histograms import MIN_BUDGET, NOT_WHOLE


def _rows(written: Written) -> list[dict[str, Any]]:
    return [r for r in written.result.table.to_pylist() if r["metric_type"] != "gauge"]


def _buckets(offset: int, counts: list[int]) -> dict[int, int]:
    """OTLP index -> count, the buckets that hold any."""
    return {offset + i: c for i, c in enumerate(counts) if c}


def prometheus_index(value: float, schema: int) -> int:
    """The Prometheus bucket holding ``value`` > 0: bucket ``i`` is
    ``(base^(i-1), base^i]``, so ``i = ceil(log_base(value))``."""
    return math.ceil(math.log2(value) * 2.0**schema)


def test_a_histogram_lands_where_the_sdk_puts_the_same_observations() -> None:
    rng = random.Random(5)
    values = [0.0, 0.0] + [math.exp(rng.uniform(-6, 9)) for _ in range(300)]
    reader = InMemoryMetricReader()
    aggregation = ExponentialBucketHistogramAggregation(max_size=160, max_scale=3)
    provider = MeterProvider(
        metric_readers=[reader], views=[View(instrument_name="lat", aggregation=aggregation)]
    )
    instrument = provider.get_meter("t").create_histogram("lat")
    for value in values:
        instrument.record(value)
    data = reader.get_metrics_data()
    assert data is not None
    request = encode_metrics(data)
    provider.shutdown()
    sdk = otlp.decode("metrics", request.SerializeToString()).table.to_pylist()[0]
    scale = sdk["exp_scale"]
    assert scale <= 3  # the SDK lowered it to fit 160 buckets
    positive: dict[int, int] = {}
    for value in values:
        if value:
            index = prometheus_index(value, scale)
            positive[index] = positive.get(index, 0) + 1
    sent = NativeHistogram(
        1_000,
        schema=scale,
        positive=positive,
        zero_count=2,
        zero_threshold=0.0,
        sum=math.fsum(values),
    )
    ours = _rows(decode(encode_v1([({"__name__": "lat"}, [], [sent])]), V1))[0]
    for column in ("metric_type", "exp_scale", "exp_zero_count", "exp_zero_threshold", "count"):
        assert ours[column] == sdk[column], column
    assert ours["sum"] == pytest.approx(sdk["sum"], rel=1e-12)
    assert _buckets(ours["exp_positive_offset"], ours["exp_positive_bucket_counts"]) == _buckets(
        sdk["exp_positive_offset"], sdk["exp_positive_bucket_counts"]
    )
    assert ours["exp_negative_bucket_counts"] == [] and ours["exp_negative_offset"] == 0


def test_spans_gaps_and_both_sides_become_the_dense_lists() -> None:
    sent = NativeHistogram(
        2_000,
        schema=1,
        positive={-2: 3, -1: 1, 4: 5, 9: 2},  # spans [-2, -1], [4], [9]
        negative={1: 4, 3: 0, 4: 6},  # one span, a bucket of 0 inside it
        zero_count=2,
        zero_threshold=0.001,
        sum=12.5,
    )
    assert sent.spans(sent.positive)[0] == [(-2, 2), (4, 1), (4, 1)]
    row = _rows(decode(encode_v1([({"__name__": "lat", "job": "api"}, [], [sent])]), V1))[0]
    assert row["metric_name"] == "lat" and row["service_name"] == "api"
    assert row["metric_type"] == "exponential_histogram" and row["aggregation_temporality"] == 2
    assert row["is_monotonic"] is None and row["time_unix_nano"] == 2 * 10**9
    assert (row["count"], row["sum"], row["exp_scale"]) == (23, 12.5, 1)
    assert (row["exp_zero_count"], row["exp_zero_threshold"]) == (2, 0.001)
    # Prometheus' bucket i is OTLP's i - 1
    assert row["exp_positive_offset"] == -3
    assert row["exp_positive_bucket_counts"] == [3, 1, 0, 0, 0, 0, 5, 0, 0, 0, 0, 2]
    assert row["exp_negative_offset"] == 0
    assert row["exp_negative_bucket_counts"] == [4, 0, 0, 6]
    assert row["bucket_counts"] is None and row["explicit_bounds"] is None
    assert row["flags"] == 0 and row["value"] is None and row["min"] is None


def test_float_gauge_custom_stale_and_start_times_in_one_request() -> None:
    t = 10_000
    series: list[tuple[Series, dict[str, object]]] = [
        (({"__name__": "temp"}, [(t, 21.5)], []), {"type": 2}),
        (
            ({"__name__": "rpc"}, [], [NativeHistogram(t, 0, {1: 2}, start_ms=t - 5_000)]),
            {"type": 3, "created": t - 9_000},
        ),
        (  # rc.3's created timestamp of the series, when the histogram has none
            ({"__name__": "rpc_old"}, [], [NativeHistogram(t, 0, {1: 2})]),
            {"created": t - 9_000, "exemplars": [({"trace_id": "ab" * 16}, 1.5, t)]},
        ),
        (({"__name__": "whole"}, [], [NativeHistogram(t, 2, {3: 4.0}, floats=True)]), {}),
        (({"__name__": "parts"}, [], [NativeHistogram(t, 2, {3: 0.5}, floats=True)]), {}),
        (({"__name__": "queue"}, [], [NativeHistogram(t, 0, {2: 7}, reset_hint=GAUGE)]), {}),
        (
            (
                {"__name__": "classic"},
                [],
                [
                    NativeHistogram(
                        t, -53, {0: 1, 3: 4}, zero_threshold=0, custom_values=[0.1, 1, 5]
                    )
                ],
            ),
            {},
        ),
        (({"__name__": "gone"}, [], [NativeHistogram(t, sum=_stale(), count=0)]), {}),
    ]
    written = decode(encode_v2(series), V2)
    rows = {r["metric_name"]: r for r in _rows(written)}
    assert written.samples == 1 and written.histograms == 6 and written.exemplars == 1
    assert written.result.rejected == 1 and written.result.errors == [f"{NOT_WHOLE} (1)"]
    assert "parts" not in rows and written.result.accepted == 7
    assert rows["rpc"]["start_time_unix_nano"] == (t - 5_000) * 10**6
    assert rows["rpc_old"]["start_time_unix_nano"] == (t - 9_000) * 10**6
    assert rows["rpc_old"]["exemplars"][0]["trace_id"] == "ab" * 16
    assert rows["whole"]["exp_positive_bucket_counts"] == [4] and rows["whole"]["count"] == 4
    assert rows["queue"]["aggregation_temporality"] == 0
    classic = rows["classic"]
    assert classic["metric_type"] == "histogram" and classic["exp_scale"] is None
    assert classic["explicit_bounds"] == [0.1, 1, 5]
    assert classic["bucket_counts"] == [1, 0, 0, 4] and classic["count"] == 5
    gone = rows["gone"]
    assert gone["flags"] == 1 and math.isnan(gone["sum"]) and gone["count"] is None
    assert gone["exp_scale"] is None and gone["exp_positive_bucket_counts"] is None


def _stale() -> float:
    return float(struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0])


def _valid(t: int = 1) -> NativeHistogram:
    return NativeHistogram(t, 0, {1: 1})


BAD: list[tuple[str, NativeHistogram | bytes]] = [
    ("schema is neither", NativeHistogram(1, 9, {1: 1})),
    ("schema is neither", NativeHistogram(1, -5, {1: 1})),
    ("not a whole number", NativeHistogram(1, 0, {1: 1.25}, floats=True)),
    ("not a whole number", NativeHistogram(1, 0, {1: -1.0}, floats=True)),
    ("not a whole number", NativeHistogram(1, 0, {1: 2.0}, count=math.nan, floats=True)),
    ("negative bucket count", NativeHistogram(1, 0, {1: 3, 2: -1})),
    ("custom_values", NativeHistogram(1, 0, {1: 1}, custom_values=[1.0])),
    ("zero bucket or negative", NativeHistogram(1, -53, {0: 1}, custom_values=[1.0])),
    (
        "strictly increasing",
        NativeHistogram(1, -53, {0: 1}, zero_threshold=0, custom_values=[2, 1]),
    ),
    (
        "strictly increasing",
        NativeHistogram(1, -53, {0: 1}, zero_threshold=0, custom_values=[1, math.inf]),
    ),
    (
        "beyond its custom_values",
        NativeHistogram(1, -53, {2: 1}, zero_threshold=0, custom_values=[1]),
    ),
    ("beyond int32", NativeHistogram(1, 0, {-(2**31): 1})),
    (f"past {MIN_BUDGET} buckets", NativeHistogram(1, 8, {-(10**6): 1, 10**6: 1})),
]


def _with_field(histogram: NativeHistogram, extra: bytes) -> bytes:
    return histogram.encode() + extra


SPANS = [  # hand-made bodies: spans that do not fit the counts, a late negative offset
    (
        "as many buckets",
        _with_field(NativeHistogram(1), field(11, b"\x08\x02\x10\x02") + field(12, b"\x02")),
    ),
    (
        "negative offset after the first",
        _with_field(
            NativeHistogram(1),
            field(11, b"\x08\x02\x10\x01")
            + field(11, b"\x08\x03\x10\x01")
            + field(12, b"\x02\x00"),
        ),
    ),
    (
        "both integer and float",
        _with_field(NativeHistogram(1, 0, {1: 1}), field(13, b"\0" * 8)),
    ),
    ("count beyond int64", b"\x08" + b"\xff" * 9 + b"\x01" + NativeHistogram(1).encode()[2:]),
]


@pytest.mark.parametrize(("words", "bad"), BAD + SPANS)
def test_what_cannot_be_stored_is_refused_alone_with_its_reason(
    words: str, bad: NativeHistogram | bytes
) -> None:
    encoded = bad if isinstance(bad, bytes) else bad.encode()
    body = encode_v1([({"__name__": "ok"}, [(1, 1.0)], [_valid()])])
    body += field(1, field(1, field(1, b"__name__") + field(2, b"bad")) + field(4, encoded))
    written = decode(body, V1)
    assert written.result.rejected == 1, written.result.errors
    assert words in written.result.errors[0]
    assert written.samples == 1 and written.histograms == 1
    assert {r["metric_name"] for r in _rows(written)} == {"ok"}


def test_a_nameless_series_refuses_its_histograms_too() -> None:
    body = encode_v1([({"job": "x"}, [(1, 1.0)], [_valid(), _valid(2)])])
    written = decode(body, V1)
    assert written.result.rejected == 3 and written.result.accepted == 0
    assert any(
        "native histogram of a series without __name__ (2)" in e for e in written.result.errors
    )


def test_a_histogram_that_is_not_a_message_is_a_decode_error() -> None:
    body = field(1, field(1, field(1, b"__name__") + field(2, b"x")) + field(4, b"\x0a\x05ab"))
    with pytest.raises(DecodeError, match="not a valid Histogram"):
        decode(body, V1)


@st.composite
def histograms(draw: st.DrawFn) -> NativeHistogram:
    schema = draw(st.integers(-4, 8))
    floats = draw(st.booleans())
    counts = st.integers(0, 2**40).map(float) if floats else st.integers(0, 2**50)
    sides = [draw(st.dictionaries(st.integers(-3000, 3000), counts, max_size=12)) for _ in range(2)]
    return NativeHistogram(
        draw(st.integers(0, 2**41)),
        schema,
        sides[0],
        sides[1],
        zero_count=draw(counts),
        zero_threshold=draw(st.sampled_from([0.0, 2.0**-128, 1e-3])),
        sum=draw(st.floats(allow_nan=False)),
        floats=floats,
        reset_hint=draw(st.integers(0, 3)),
        gap=draw(st.integers(0, 4)),
    )


def _dense(buckets: dict[int, float]) -> tuple[int, list[int]]:
    """What OTLP's columns hold for Prometheus buckets: the offset (OTLP index of the
    first, Prometheus' minus one) and every count from the first to the last."""
    if not buckets:
        return 0, []
    low, high = min(buckets), max(buckets)
    return low - 1, [int(buckets.get(i, 0)) for i in range(low, high + 1)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sent=st.lists(st.lists(histograms(), min_size=1, max_size=3), min_size=1, max_size=4),
    v2=st.booleans(),
)
def test_random_histograms_decode_to_their_expanded_buckets(
    sent: list[list[NativeHistogram]], v2: bool
) -> None:
    series: list[Series] = [({"__name__": f"h{i}"}, [], hs) for i, hs in enumerate(sent)]
    body = encode_v2([(s, {}) for s in series]) if v2 else encode_v1(series)
    written = decode(body, V2 if v2 else V1)
    assert written.result.rejected == 0, written.result.errors
    rows = _rows(written)
    expected = [(f"h{i}", h) for i, hs in enumerate(sent) for h in hs]
    assert written.histograms == len(rows) == len(expected)
    for row, (name, h) in zip(rows, expected, strict=True):
        assert row["metric_name"] == name and row["time_unix_nano"] == h.t_ms * 10**6
        assert row["exp_scale"] == h.schema and row["count"] == int(h.total)
        assert row["exp_zero_count"] == int(h.zero_count)
        assert row["aggregation_temporality"] == (0 if h.reset_hint == GAUGE else 2)
        assert (row["exp_positive_offset"], row["exp_positive_bucket_counts"]) == _dense(
            dict(h.positive)
        )
        assert (row["exp_negative_offset"], row["exp_negative_bucket_counts"]) == _dense(
            dict(h.negative)
        )


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120), v2=st.booleans())
def test_any_bytes_as_a_histogram_decode_or_raise_decode_error(data: bytes, v2: bool) -> None:
    series = field(1, field(1, b"__name__") + field(2, b"x")) + field(4, data)
    body = field(1, series)
    if v2:
        body = field(4, b"") + field(4, b"__name__") + field(4, b"x")
        body += field(5, field(1, b"\x01\x02") + field(3, data))
    try:
        written = decode(body, V2 if v2 else V1)
    except DecodeError:
        return
    assert written.histograms + written.result.rejected == 1


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(0, 6)), max_size=4),
    deltas=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=12),
    schema=st.integers(-60, 12),
    bounds=st.lists(st.floats(), max_size=4),
)
def test_random_spans_and_deltas_are_stored_or_refused_never_a_crash(
    spans: list[tuple[int, int]], deltas: list[int], schema: int, bounds: list[float]
) -> None:
    extra = b"".join(field(11, b"\x08" + varint(zigzag(o)) + b"\x10" + varint(n)) for o, n in spans)
    if deltas:
        extra += field(12, b"".join(varint(zigzag(d)) for d in deltas))
    h = NativeHistogram(1, schema, zero_threshold=0, custom_values=bounds)
    body = encode_v1([({"__name__": "x"}, [], [])]) + field(
        1, field(1, field(1, b"__name__") + field(2, b"x")) + field(4, h.encode() + extra)
    )
    written = decode(body, V1)
    assert written.histograms + written.result.rejected == 1
