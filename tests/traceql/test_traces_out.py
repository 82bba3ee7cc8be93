"""Spans rows back to OTLP: every field that was sent comes back, for generated requests."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData

from shoal.otlp import decode, tempo, traces_out
from tests.otlp.test_anyvalue import any_values

from .otlp_compare import triples

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(max_size=6)
keyvalues = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=v), texts, any_values),
    max_size=4,
    unique_by=lambda kv: kv.key,  # OTLP: keys are unique within a list
)
u32 = st.integers(0, 2**32 - 1)
ids16 = st.binary(min_size=16, max_size=16).filter(any)  # an all-zero id is invalid in OTLP
ids8 = st.binary(min_size=8, max_size=8).filter(any)


@st.composite
def valid_spans(draw: st.DrawFn) -> Span:
    start = draw(st.integers(1, 2**62))
    span = Span(
        trace_id=draw(ids16),
        span_id=draw(ids8),
        parent_span_id=draw(st.one_of(st.just(b""), ids8)),
        trace_state=draw(st.sampled_from(["", "a=b,c=d"])),
        flags=draw(u32),
        name=draw(texts),
        kind=draw(st.integers(0, 5)),  # type: ignore[arg-type]
        start_time_unix_nano=start,
        end_time_unix_nano=start + draw(st.integers(0, 10**12)),
        dropped_attributes_count=draw(u32),
        dropped_events_count=draw(u32),
        dropped_links_count=draw(u32),
    )
    span.attributes.extend(draw(keyvalues))
    for _ in range(draw(st.integers(0, 2))):
        event = span.events.add(
            time_unix_nano=draw(st.integers(0, 2**62)),
            name=draw(texts),
            dropped_attributes_count=draw(u32),
        )
        event.attributes.extend(draw(keyvalues))
    for _ in range(draw(st.integers(0, 2))):
        link = span.links.add(
            trace_id=draw(ids16),
            span_id=draw(ids8),
            trace_state=draw(st.sampled_from(["", "k=v"])),
            dropped_attributes_count=draw(u32),
            flags=draw(u32),
        )
        link.attributes.extend(draw(keyvalues))
    if draw(st.booleans()):
        span.status.code = draw(st.integers(0, 2))  # type: ignore[assignment]
        span.status.message = draw(texts)
    return span


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 3))):
        rs = req.resource_spans.add(schema_url=draw(st.sampled_from(["", "https://r"])))
        rs.resource.attributes.extend(draw(keyvalues))
        rs.resource.dropped_attributes_count = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(1, 2))):
            ss = rs.scope_spans.add(schema_url=draw(st.sampled_from(["", "https://s"])))
            ss.scope.name = draw(texts)
            ss.scope.version = draw(st.sampled_from(["", "1.2"]))
            ss.scope.attributes.extend(draw(keyvalues))
            ss.scope.dropped_attributes_count = draw(st.integers(0, 3))
            ss.spans.extend(draw(st.lists(valid_spans(), max_size=3)))
    return req


@FUZZ
@given(requests())
def test_rows_come_back_as_the_spans_sent(req: ExportTraceServiceRequest) -> None:
    if "double_value: nan" in str(req) or "double_value: -nan" in str(req):
        return  # NaN has no single bit pattern to come back as
    result = decode("spans", req.SerializeToString())
    assert result.rejected == 0
    data = traces_out.encode(result.table)
    assert triples(data.resource_spans) == triples(req.resource_spans)
    # Tempo's envelopes carry the same bytes
    assert TracesData.FromString(tempo.v1_protobuf(data)) == data
    v2 = tempo.TraceByIDResponse.FromString(tempo.v2_protobuf(data, 7))
    assert triples(v2.trace.resourceSpans) == triples(req.resource_spans)  # type: ignore[attr-defined]


def test_empty_rows_make_an_empty_trace() -> None:
    empty = decode("spans", b"").table
    assert traces_out.encode(empty) == TracesData()
    assert isinstance(empty, pa.Table)
