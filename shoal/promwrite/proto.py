"""The Prometheus remote-write and remote-read messages, described in code.

Remote-Write 1.0's ``prometheus.WriteRequest`` and 2.0's ``io.prometheus.write.v2.Request``
carry labels, float samples, exemplars and metadata; their descriptors are written here
(field numbers as the specifications define them) and handed to ptars, which decodes a
body straight into Arrow. Native histograms (field ``histograms`` of either version) are
described as undecoded bytes there (ptars builds every array a descriptor names, present
or not), and decoded on their own, by :data:`HISTOGRAM_FILE`, only in a request that
holds any (shoal/promwrite/histograms.py). Remote read's messages are in 1.0's file, as
in ``prompb``, beside the series, labels and samples they share; protobuf itself decodes
them (:mod:`shoal.promwrite.remote_read`).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from shoal.rows.protoarrow import ProtoArrow, file_descriptor

V1_FILE = file_descriptor(
    "prometheus",
    """
    message WriteRequest {
      repeated TimeSeries timeseries = 1;
      repeated MetricMetadata metadata = 3;
    }
    message TimeSeries {
      repeated Label labels = 1;
      repeated Sample samples = 2;
      repeated Exemplar exemplars = 3;
      repeated bytes histograms = 4;
    }
    message Label { string name = 1; string value = 2; }
    message Sample { double value = 1; int64 timestamp = 2; }
    message Exemplar { repeated Label labels = 1; double value = 2; int64 timestamp = 3; }
    message MetricMetadata {
      int32 type = 1;
      string metric_family_name = 2;
      string help = 4;
      string unit = 5;
    }
    message ReadRequest {
      repeated Query queries = 1;
      repeated int32 accepted_response_types = 2;
    }
    message Query {
      int64 start_timestamp_ms = 1;
      int64 end_timestamp_ms = 2;
      repeated LabelMatcher matchers = 3;
      ReadHints hints = 4;
    }
    message LabelMatcher { int32 type = 1; string name = 2; string value = 3; }
    message ReadHints {
      int64 step_ms = 1;
      string func = 2;
      int64 start_ms = 3;
      int64 end_ms = 4;
      repeated string grouping = 5;
      bool by = 6;
      int64 range_ms = 7;
    }
    message ReadResponse { repeated QueryResult results = 1; }
    message QueryResult { repeated TimeSeries timeseries = 1; }
    message ChunkedReadResponse {
      repeated ChunkedSeries chunked_series = 1;
      int64 query_index = 2;
    }
    message ChunkedSeries { repeated Label labels = 1; repeated Chunk chunks = 2; }
    message Chunk {
      int64 min_time_ms = 1;
      int64 max_time_ms = 2;
      int32 type = 3;
      bytes data = 4;
    }
    """,
)
"""Prometheus' ``prompb`` (types.proto, remote.proto): remote write 1.0's messages, and
remote read's (:mod:`shoal.promwrite.remote_read`), which share its ``TimeSeries``,
``Label`` and ``Sample``; enums as ``int32`` (the same varints on the wire)."""

V2_FILE = file_descriptor(
    "io.prometheus.write.v2",
    """
    message Request { repeated string symbols = 4; repeated TimeSeries timeseries = 5; }
    message TimeSeries {
      repeated uint32 labels_refs = 1;
      repeated Sample samples = 2;
      repeated bytes histograms = 3;
      repeated Exemplar exemplars = 4;
      Metadata metadata = 5;
      int64 created_timestamp = 6;
    }
    message Sample { double value = 1; int64 timestamp = 2; }
    message Exemplar { repeated uint32 labels_refs = 1; double value = 2; int64 timestamp = 3; }
    message Metadata { int32 type = 1; uint32 help_ref = 3; uint32 unit_ref = 4; }
    """,
)

V1_RAW_FILE = file_descriptor(
    "prometheus.raw",
    """
    message WriteRequest { repeated TimeSeries timeseries = 1; repeated bytes metadata = 3; }
    message TimeSeries {
      repeated bytes labels = 1;
      repeated Sample samples = 2;
      repeated bytes exemplars = 3;
      repeated bytes histograms = 4;
    }
    message Sample { double value = 1; int64 timestamp = 2; }
    """,
)
"""1.0's ``WriteRequest`` with each label, exemplar and metadata entry left as its encoded
bytes: the wire format is the same, and a request whose series were all seen before
needs no more than its samples decoded and its label bytes as cache keys."""

V1 = "prometheus.WriteRequest"
V2 = "io.prometheus.write.v2.Request"
V1_RAW = "prometheus.raw.WriteRequest"

HISTOGRAM_FILE = file_descriptor(
    "shoal.promwrite.histogram",
    """
    message Histogram {
      uint64 count_int = 1;
      double count_float = 2;
      double sum = 3;
      sint32 schema = 4;
      double zero_threshold = 5;
      uint64 zero_count_int = 6;
      double zero_count_float = 7;
      repeated BucketSpan negative_spans = 8;
      repeated sint64 negative_deltas = 9;
      repeated double negative_counts = 10;
      repeated BucketSpan positive_spans = 11;
      repeated sint64 positive_deltas = 12;
      repeated double positive_counts = 13;
      int32 reset_hint = 14;
      int64 timestamp = 15;
      repeated double custom_values = 16;
      int64 start_timestamp = 17;
    }
    message BucketSpan { sint32 offset = 1; uint32 length = 2; }
    message Histograms { repeated Histogram histograms = 1; }
    """,
)
"""A native histogram, the same message in 1.0 (``prometheus.Histogram``) and 2.0
(``io.prometheus.write.v2.Histogram``; ``start_timestamp`` is 2.0's since rc.4); the count
and the zero count are each a ``oneof`` of an integer and a float, so that which one was
sent is known (ptars leaves the other null). ``Histograms`` holds a request's histograms,
one after the other, to be decoded at once."""


def _oneof(message: descriptor_pb2.DescriptorProto, name: str, members: tuple[str, ...]) -> None:
    """Make ``members`` of ``message`` the ``oneof`` ``name``."""
    message.oneof_decl.add(name=name)
    for field in message.field:
        if field.name in members:
            field.oneof_index = len(message.oneof_decl) - 1


_oneof(HISTOGRAM_FILE.message_type[0], "count", ("count_int", "count_float"))
_oneof(HISTOGRAM_FILE.message_type[0], "zero_count", ("zero_count_int", "zero_count_float"))

HISTOGRAMS = "shoal.promwrite.histogram.Histograms"

V1_TYPES = {0: "unknown", 1: "counter", 2: "gauge", 3: "histogram", 4: "gaugehistogram",
            5: "summary", 6: "info", 7: "stateset"}  # fmt: skip
"""``MetricMetadata.type`` of 1.0 and ``Metadata.type`` of 2.0 (same numbers)."""


DECODER = ProtoArrow(
    lambda: [
        V1_FILE.SerializeToString(),
        V2_FILE.SerializeToString(),
        V1_RAW_FILE.SerializeToString(),
    ]
)


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint (a negative ``n`` as its 64-bit two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
