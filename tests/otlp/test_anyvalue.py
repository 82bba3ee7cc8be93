"""The attribute/body text encoding round-trips every OTLP value."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from shoal.otlp import anyvalue

_scalars = st.one_of(
    st.text().map(lambda s: AnyValue(string_value=s)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda d: AnyValue(double_value=d)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.binary().map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)


def _extend(children: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
    arrays = st.lists(children, max_size=4).map(
        lambda vs: AnyValue(array_value=ArrayValue(values=vs))
    )
    kvlists = st.lists(st.tuples(st.text(max_size=8), children), max_size=4).map(
        lambda kvs: AnyValue(
            kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs])
        )
    )
    return st.one_of(arrays, kvlists)


any_values = st.recursive(_scalars, _extend, max_leaves=12)


def _same(a: AnyValue, b: AnyValue) -> bool:
    """Equality that treats NaN as equal to NaN."""
    if a.WhichOneof("value") != b.WhichOneof("value"):
        return False
    kind = a.WhichOneof("value")
    if kind == "double_value":
        x, y = a.double_value, b.double_value
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    if kind == "array_value":
        return len(a.array_value.values) == len(b.array_value.values) and all(
            _same(x, y) for x, y in zip(a.array_value.values, b.array_value.values, strict=True)
        )
    if kind == "kvlist_value":
        xs, ys = a.kvlist_value.values, b.kvlist_value.values
        return len(xs) == len(ys) and all(
            x.key == y.key and _same(x.value, y.value) for x, y in zip(xs, ys, strict=True)
        )
    return a == b


@given(any_values)
def test_encode_decode_round_trip(value: AnyValue) -> None:
    text, tag = anyvalue.encode(value)
    assert isinstance(text, str)
    assert _same(anyvalue.decode(text, tag), value)


@given(any_values)
def test_json_round_trip(value: AnyValue) -> None:
    obj = json.loads(json.dumps(anyvalue.to_json(value)))
    assert _same(anyvalue.from_json(obj), value)


@given(st.text())
def test_strings_carry_no_type(text: str) -> None:
    assert anyvalue.encode(AnyValue(string_value=text)) == (text, None)


def test_documented_renderings() -> None:
    assert anyvalue.encode(AnyValue(int_value=-42)) == ("-42", "int")
    assert anyvalue.encode(AnyValue(double_value=0.1)) == ("0.1", "double")
    assert anyvalue.encode(AnyValue(double_value=float("nan"))) == ("NaN", "double")
    assert anyvalue.encode(AnyValue(double_value=float("-inf"))) == ("-Infinity", "double")
    assert anyvalue.encode(AnyValue(bool_value=True)) == ("true", "bool")
    assert anyvalue.encode(AnyValue(bytes_value=b"\x00\xff")) == ("AP8=", "bytes")
    assert anyvalue.encode(AnyValue()) == ("", "empty")
    items = [AnyValue(int_value=1), AnyValue(string_value="a")]
    arr = AnyValue(array_value=ArrayValue(values=items))
    assert anyvalue.encode(arr) == ('{"values":[{"intValue":"1"},{"stringValue":"a"}]}', "array")
    kv = AnyValue(
        kvlist_value=KeyValueList(values=[KeyValue(key="k", value=AnyValue(bool_value=False))])
    )
    assert anyvalue.encode(kv) == ('{"values":[{"key":"k","value":{"boolValue":false}}]}', "kvlist")
