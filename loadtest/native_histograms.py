"""Native histograms in remote-write bodies, encoded by hand (independently of shoal's
decoder): ``Histogram{count_int=1 | count_float=2, sum=3, schema=4 (sint32),
zero_threshold=5, zero_count_int=6 | zero_count_float=7, negative_spans=8,
negative_deltas=9 (sint64) | negative_counts=10, positive_spans=11, positive_deltas=12 |
positive_counts=13, reset_hint=14, timestamp=15, custom_values=16, start_timestamp=17}``,
``BucketSpan{offset=1 (sint32), length=2}``; a 1.0 ``TimeSeries`` holds them in field 4,
a 2.0 one in field 3.

Buckets are given by Prometheus index: bucket ``i`` of schema ``s`` holds values in
``(base^(i-1), base^i]``, ``base = 2^(2^-s)``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Mapping, Sequence

from loadtest.remote_write import Symbols, field, label, sample, varint

DEFAULT_ZERO_THRESHOLD = 2.0**-128
GAUGE = 3


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _double(number: int, value: float) -> bytes:
    return varint((number << 3) | 1) + struct.pack("<d", value)


def _int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


@dataclasses.dataclass
class NativeHistogram:
    """One histogram sample; counts by Prometheus bucket index (0 counts are sent as
    they are, inside a span). ``gap`` is the longest run of absent buckets a span
    bridges with zero counts (a longer one starts a new span), as clients do."""

    t_ms: int
    schema: int = 0
    positive: Mapping[int, float] = dataclasses.field(default_factory=dict)
    negative: Mapping[int, float] = dataclasses.field(default_factory=dict)
    zero_count: float = 0
    zero_threshold: float = DEFAULT_ZERO_THRESHOLD
    sum: float = 0.0
    count: float | None = None
    floats: bool = False
    reset_hint: int = 0
    custom_values: Sequence[float] = ()
    start_ms: int = 0
    gap: int = 2

    @property
    def total(self) -> float:
        if self.count is not None:
            return self.count
        return sum(self.positive.values()) + sum(self.negative.values()) + self.zero_count

    def encode(self) -> bytes:
        out = bytearray()
        out += _double(2, float(self.total)) if self.floats else _int(1, int(self.total))
        out += _double(3, self.sum)
        out += _int(4, zigzag(self.schema))
        out += _double(5, self.zero_threshold)
        if self.floats:
            out += _double(7, float(self.zero_count))
        else:
            out += _int(6, int(self.zero_count))
        for buckets, spans_at in ((self.negative, 8), (self.positive, 11)):
            spans, counts = self.spans(buckets)
            out += b"".join(
                field(spans_at, _int(1, zigzag(offset)) + _int(2, length))
                for offset, length in spans
            )
            if not counts:
                continue
            if self.floats:
                out += field(spans_at + 2, b"".join(struct.pack("<d", c) for c in counts))
            else:
                deltas = [int(c) - int(p) for c, p in zip(counts, [0, *counts[:-1]], strict=True)]
                out += field(spans_at + 1, b"".join(varint(zigzag(d)) for d in deltas))
        if self.reset_hint:
            out += _int(14, self.reset_hint)
        out += _int(15, self.t_ms)
        if self.custom_values:
            out += field(16, b"".join(struct.pack("<d", v) for v in self.custom_values))
        if self.start_ms:
            out += _int(17, self.start_ms)
        return bytes(out)

    def spans(self, buckets: Mapping[int, float]) -> tuple[list[tuple[int, int]], list[float]]:
        """The spans (offset, length) and the counts in them, gaps of up to ``gap``
        buckets bridged with zeros."""
        spans: list[tuple[int, int]] = []
        counts: list[float] = []
        end = 0
        for index in sorted(buckets):
            if spans and index - end <= self.gap:
                counts += [0] * (index - end)
                spans[-1] = (spans[-1][0], spans[-1][1] + index - end + 1)
            else:
                spans.append((index - end if spans else index, 1))
            counts.append(buckets[index])
            end = index + 1
        return spans, counts


Series = tuple[Mapping[str, str], Sequence[tuple[int, float]], Sequence[NativeHistogram]]


def encode_v1(series: Iterable[Series]) -> bytes:
    """The uncompressed 1.0 WriteRequest for ``(labels, samples, histograms)``."""
    body = bytearray()
    for labels, samples, histograms in series:
        ts = b"".join(field(1, label(k, v)) for k, v in sorted(labels.items()))
        ts += b"".join(field(2, sample(t, v)) for t, v in samples)
        ts += b"".join(field(4, h.encode()) for h in histograms)
        body += field(1, ts)
    return bytes(body)


def encode_v2(series: Iterable[tuple[Series, Mapping[str, object]]]) -> bytes:
    """The uncompressed 2.0 Request for ``((labels, samples, histograms), extra)``;
    ``extra`` may hold ``type`` (int), ``help``, ``unit`` and ``created`` (ms, the
    series' created timestamp of 2.0 before rc.4) and ``exemplars``."""
    symbols = Symbols()
    timeseries = bytearray()
    for (labels, samples, histograms), extra in series:
        ts = symbols.refs(labels)
        ts += b"".join(field(2, sample(t, v)) for t, v in samples)
        ts += b"".join(field(3, h.encode()) for h in histograms)
        for ex_labels, value, t in extra.get("exemplars", ()):  # type: ignore[attr-defined]
            ex = symbols.refs(ex_labels) + _double(2, value) + _int(3, t)
            ts += field(4, ex)
        meta = _int(1, int(extra.get("type", 0)))  # type: ignore[call-overload]
        meta += _int(3, symbols.ref(str(extra.get("help", ""))))
        meta += _int(4, symbols.ref(str(extra.get("unit", ""))))
        ts += field(5, meta)
        if extra.get("created"):
            ts += _int(6, int(extra["created"]))  # type: ignore[call-overload]
        timeseries += field(5, ts)
    return symbols.encode() + bytes(timeseries)
