"""The Prometheus remote-write messages, described in code.

Remote-Write 1.0's ``prometheus.WriteRequest`` and 2.0's ``io.prometheus.write.v2.Request``
carry labels, float samples, exemplars and metadata; their descriptors are written here
(field numbers as the specifications define them) and handed to ptars, which decodes a
body straight into Arrow. Native histograms (field ``histograms`` of either version) are
described as undecoded bytes there (ptars builds every array a descriptor names, present
or not), and decoded on their own, by :data:`HISTOGRAM_FILE`, only in a request that
holds any (shoal/promwrite/histograms.py).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from shoal.rows.protoarrow import FIELD, ProtoArrow, file_descriptor

_F = FIELD
V1_FILE = file_descriptor(
    "prometheus",
    {
        "WriteRequest": [
            ("timeseries", 1, _F.TYPE_MESSAGE, True, ".prometheus.TimeSeries"),
            ("metadata", 3, _F.TYPE_MESSAGE, True, ".prometheus.MetricMetadata"),
        ],
        "TimeSeries": [
            ("labels", 1, _F.TYPE_MESSAGE, True, ".prometheus.Label"),
            ("samples", 2, _F.TYPE_MESSAGE, True, ".prometheus.Sample"),
            ("exemplars", 3, _F.TYPE_MESSAGE, True, ".prometheus.Exemplar"),
            ("histograms", 4, _F.TYPE_BYTES, True),
        ],
        "Label": [("name", 1, _F.TYPE_STRING), ("value", 2, _F.TYPE_STRING)],
        "Sample": [("value", 1, _F.TYPE_DOUBLE), ("timestamp", 2, _F.TYPE_INT64)],
        "Exemplar": [
            ("labels", 1, _F.TYPE_MESSAGE, True, ".prometheus.Label"),
            ("value", 2, _F.TYPE_DOUBLE),
            ("timestamp", 3, _F.TYPE_INT64),
        ],
        "MetricMetadata": [
            ("type", 1, _F.TYPE_INT32),
            ("metric_family_name", 2, _F.TYPE_STRING),
            ("help", 4, _F.TYPE_STRING),
            ("unit", 5, _F.TYPE_STRING),
        ],
    },
)

V2_FILE = file_descriptor(
    "io.prometheus.write.v2",
    {
        "Request": [
            ("symbols", 4, _F.TYPE_STRING, True),
            ("timeseries", 5, _F.TYPE_MESSAGE, True, ".io.prometheus.write.v2.TimeSeries"),
        ],
        "TimeSeries": [
            ("labels_refs", 1, _F.TYPE_UINT32, True),
            ("samples", 2, _F.TYPE_MESSAGE, True, ".io.prometheus.write.v2.Sample"),
            ("histograms", 3, _F.TYPE_BYTES, True),
            ("exemplars", 4, _F.TYPE_MESSAGE, True, ".io.prometheus.write.v2.Exemplar"),
            ("metadata", 5, _F.TYPE_MESSAGE, False, ".io.prometheus.write.v2.Metadata"),
            ("created_timestamp", 6, _F.TYPE_INT64),
        ],
        "Sample": [("value", 1, _F.TYPE_DOUBLE), ("timestamp", 2, _F.TYPE_INT64)],
        "Exemplar": [
            ("labels_refs", 1, _F.TYPE_UINT32, True),
            ("value", 2, _F.TYPE_DOUBLE),
            ("timestamp", 3, _F.TYPE_INT64),
        ],
        "Metadata": [
            ("type", 1, _F.TYPE_INT32),
            ("help_ref", 3, _F.TYPE_UINT32),
            ("unit_ref", 4, _F.TYPE_UINT32),
        ],
    },
)

V1_RAW_FILE = file_descriptor(
    "prometheus.raw",
    {
        "WriteRequest": [
            ("timeseries", 1, _F.TYPE_MESSAGE, True, ".prometheus.raw.TimeSeries"),
            ("metadata", 3, _F.TYPE_BYTES, True),
        ],
        "TimeSeries": [
            ("labels", 1, _F.TYPE_BYTES, True),
            ("samples", 2, _F.TYPE_MESSAGE, True, ".prometheus.raw.Sample"),
            ("exemplars", 3, _F.TYPE_BYTES, True),
            ("histograms", 4, _F.TYPE_BYTES, True),
        ],
        "Sample": [("value", 1, _F.TYPE_DOUBLE), ("timestamp", 2, _F.TYPE_INT64)],
    },
)
"""1.0's ``WriteRequest`` with each label, exemplar and metadata entry left as its encoded
bytes: the wire format is the same, and a request whose series were all seen before
needs no more than its samples decoded and its label bytes as cache keys."""

V1 = "prometheus.WriteRequest"
V2 = "io.prometheus.write.v2.Request"
V1_RAW = "prometheus.raw.WriteRequest"

HISTOGRAM_FILE = file_descriptor(
    "shoal.promwrite.histogram",
    {
        "Histogram": [
            ("count_int", 1, _F.TYPE_UINT64),
            ("count_float", 2, _F.TYPE_DOUBLE),
            ("sum", 3, _F.TYPE_DOUBLE),
            ("schema", 4, _F.TYPE_SINT32),
            ("zero_threshold", 5, _F.TYPE_DOUBLE),
            ("zero_count_int", 6, _F.TYPE_UINT64),
            ("zero_count_float", 7, _F.TYPE_DOUBLE),
            ("negative_spans", 8, _F.TYPE_MESSAGE, True, ".shoal.promwrite.histogram.BucketSpan"),
            ("negative_deltas", 9, _F.TYPE_SINT64, True),
            ("negative_counts", 10, _F.TYPE_DOUBLE, True),
            ("positive_spans", 11, _F.TYPE_MESSAGE, True, ".shoal.promwrite.histogram.BucketSpan"),
            ("positive_deltas", 12, _F.TYPE_SINT64, True),
            ("positive_counts", 13, _F.TYPE_DOUBLE, True),
            ("reset_hint", 14, _F.TYPE_INT32),
            ("timestamp", 15, _F.TYPE_INT64),
            ("custom_values", 16, _F.TYPE_DOUBLE, True),
            ("start_timestamp", 17, _F.TYPE_INT64),
        ],
        "BucketSpan": [("offset", 1, _F.TYPE_SINT32), ("length", 2, _F.TYPE_UINT32)],
        "Histograms": [
            ("histograms", 1, _F.TYPE_MESSAGE, True, ".shoal.promwrite.histogram.Histogram")
        ],
    },
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
