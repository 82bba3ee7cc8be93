"""Native histograms of remote write (1.0 and 2.0) -> the histogram columns of ``metrics``.

A native histogram lands in the columns an OTLP exponential histogram fills, with the
same meaning (docs/remote-write.md), so that both read back alike through SQL and PromQL:

- the schema is OTLP's scale: both put bucket boundaries at the powers of
  ``base = 2^(2^-schema)``;
- Prometheus' bucket ``i`` holds ``(base^(i-1), base^i]``, OTLP's bucket ``i`` holds
  ``(base^i, base^(i+1)]``: Prometheus' index ``i`` is OTLP's ``i - 1``. A side's spans
  and their counts (delta-encoded in an integer histogram, absolute in a float one)
  become OTLP's dense list, from the spans' first bucket to their last, each gap between
  two spans buckets of count 0; the offset is the OTLP index of the first;
- the zero bucket's count and threshold, the count and the sum are the same;
- custom buckets (schema -53) are an explicit-bucket histogram: ``custom_values`` are the
  bounds, and each bucket of the spans (the one past the last bound is +Inf) its count;
- reset hint GAUGE (a gauge histogram) is aggregation temporality 0 (unspecified: read
  as it is, like a gauge); any other hint is cumulative (2), its resets found as for
  every cumulative series; a start timestamp (2.0) is the start time;
- a stale marker (a sum with the bits of the stale NaN) is a row of flag 1, sum NaN.

What the columns cannot hold, or what is not a valid histogram, is refused one
histogram at a time and counted, with the reason; the rest of the request is stored.
The columns hold integer counts, so a float histogram is stored when every count is a
whole number and refused otherwise. The dense lists hold the gaps between spans, which
cost the sender almost nothing: a request may expand to :func:`budget` buckets, and the
histograms past that are refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.promwrite import proto
from shoal.rows.protoarrow import ProtoArrow
from shoal.rows.result import Rejections
from shoal.schema import METRICS_SCHEMA, UTC_US

STALE_NAN = 0x7FF0000000000002
NO_RECORDED_VALUE = 1
CUSTOM_BUCKETS = -53
MIN_SCHEMA, MAX_SCHEMA = -4, 8
GAUGE = 3
"""``ResetHint.GAUGE`` of 1.0, ``RESET_HINT_GAUGE`` of 2.0."""
CUMULATIVE, UNSPECIFIED = 2, 0
BUDGET_PER_BYTE = 16
MIN_BUDGET = 1 << 20

NOT_WHOLE = "float native histogram has a count that is not a whole number (stored: integers)"
_F64_LIST = pa.list_(pa.float64())
_DECODER = ProtoArrow(lambda: [proto.HISTOGRAM_FILE.SerializeToString()])

Ints = np.ndarray[Any, np.dtype[np.int64]]
Mask = np.ndarray[Any, np.dtype[np.bool_]]


@dataclasses.dataclass
class Histograms:
    """The stored histograms of a request: per row its series (ascending, as sent) and
    the columns that are the histogram's; how many were refused, and why."""

    owner: Ints
    columns: dict[str, pa.Array]
    rejected: int
    errors: list[str]


def budget(body_bytes: int) -> int:
    """The most buckets (gaps included) the histograms of a body of ``body_bytes`` may
    expand to: 16 per byte (8-byte counts: 128 bytes of memory per byte sent), at least
    2^20."""
    return max(MIN_BUDGET, BUDGET_PER_BYTE * body_bytes)


def decode(
    lists: pa.ListArray, named: Mask, created_ms: Ints | None, max_buckets: int
) -> Histograms:
    """The histograms of every series (``lists``: per series its encoded ``Histogram``
    messages). ``named``: which series have a name; ``created_ms``: the series' created
    timestamps (2.0 before rc.4), None when none has one; ``max_buckets``: the most
    buckets the histograms may expand to. Raises DecodeError for bytes that are not a
    ``Histogram``."""
    per_series = _lengths(lists)
    series = np.repeat(np.arange(len(lists), dtype=np.int64), per_series)
    h = _messages(pc.list_flatten(lists))
    rej = Rejections()
    keep = np.ones(len(series), dtype=np.bool_)
    rej.mask("native histogram of a series without __name__", ~named[series], keep)
    stale = _numbers(h, "sum").view(np.uint64) == np.uint64(STALE_NAN)
    schema = _numbers(h, "schema").astype(np.int64)
    custom = schema == CUSTOM_BUCKETS
    exponential = (schema >= MIN_SCHEMA) & (schema <= MAX_SCHEMA)
    check = keep & ~stale  # a stale marker says only that the series ended: not checked
    _check_header(h, rej, check, custom, exponential)
    sides = (_Side.of(h, "positive", check), _Side.of(h, "negative", check))
    _check_buckets(h, sides, rej, check, custom, max_buckets)
    keep &= check | stale
    return _rows(h, keep, stale, custom, sides, series[keep], created_ms, rej)


def _messages(encoded: pa.Array) -> pa.StructArray:
    """The ``Histogram`` messages ``encoded``, decoded at once (one struct per message)."""
    wrapper = b"".join(b"\x0a" + proto.varint(len(m)) + m for m in encoded.to_pylist())
    what = "a native histogram is not a valid Histogram message"
    batch = _DECODER.batch(proto.HISTOGRAMS, wrapper, what)
    flat: pa.StructArray = pc.list_flatten(batch.column("histograms"))
    return flat


def _numbers(h: pa.StructArray, name: str, fill: float | None = None) -> np.ndarray[Any, Any]:
    """Field ``name`` of every histogram as NumPy (nulls as ``fill``)."""
    field = h.field(name)
    if fill is not None:
        field = field.fill_null(fill)
    return np.asarray(field.to_numpy(zero_copy_only=False))


def _sent(h: pa.StructArray, name: str) -> Mask:
    """Which histograms hold the ``oneof`` member ``name``."""
    return np.asarray(h.field(name).is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _lengths(lists: pa.Array) -> Ints:
    return np.asarray(pc.list_value_length(lists).fill_null(0), dtype=np.int64)


def _whole(values: np.ndarray[Any, Any]) -> Mask:
    """Which float counts the integer columns hold exactly: whole, 0 to 2^63 - 1."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray((v >= 0) & (v < 2.0**63) & (np.floor(v) == v), dtype=np.bool_)


def _check_header(
    h: pa.StructArray, rej: Rejections, keep: Mask, custom: Mask, exponential: Mask
) -> None:
    """Refuse (clear in ``keep``) histograms whose schema, kind or counts cannot be stored."""
    rej.mask("native histogram schema is neither -4 to 8 nor -53", ~(custom | exponential), keep)
    floats = _sent(h, "count_float") | _sent(h, "zero_count_float")
    ints = _sent(h, "count_int") | _sent(h, "zero_count_int")
    for side in ("positive", "negative"):
        floats |= _lengths(h.field(f"{side}_counts")) > 0
        ints |= _lengths(h.field(f"{side}_deltas")) > 0
    rej.mask("native histogram has both integer and float counts", floats & ints, keep)
    for name in ("count_int", "zero_count_int"):
        over = _numbers(h, name, 0).astype(np.uint64) > np.uint64(2**63 - 1)
        rej.mask("native histogram count beyond int64", over, keep)
    for name in ("count_float", "zero_count_float"):
        rej.mask(NOT_WHOLE, ~_whole(_numbers(h, name, 0.0)), keep)
    bounds = h.field("custom_values")
    rej.mask(
        "exponential native histogram has custom_values",
        exponential & (_lengths(bounds) > 0),
        keep,
    )
    zero_or_negative = (
        (_numbers(h, "zero_threshold") != 0)
        | (_numbers(h, "zero_count_int", 0) != 0)
        | (_numbers(h, "zero_count_float", 0.0) != 0)
        | (_lengths(h.field("negative_spans")) > 0)
        | (_lengths(h.field("negative_deltas")) > 0)
        | (_lengths(h.field("negative_counts")) > 0)
    )
    rej.mask(
        "custom-bucket histogram has a zero bucket or negative buckets",
        custom & zero_or_negative,
        keep,
    )
    rej.mask(
        "custom-bucket histogram's custom_values are not strictly increasing and below +Inf",
        custom & ~_increasing(bounds),
        keep,
    )


def _increasing(bounds: pa.ListArray) -> Mask:
    """Per list: each value below the next, none NaN, none +Inf (the +Inf bucket is
    implied); -Inf may stand first."""
    lengths = _lengths(bounds)
    v = np.asarray(pc.list_flatten(bounds).to_numpy(zero_copy_only=False), dtype=np.float64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    bad = np.zeros(len(lengths), dtype=np.bool_)
    with np.errstate(invalid="ignore"):
        bad[owner[np.isnan(v) | (v == np.inf)]] = True
        same = owner[1:] == owner[:-1]
        bad[owner[1:][same & ~(v[1:] > v[:-1])]] = True
    return ~bad


def _running(values: np.ndarray[Any, Any], lengths: Ints) -> np.ndarray[Any, Any]:
    """Per run of ``lengths`` consecutive values, their running sum (integers wrap, as
    in the sender's int64 arithmetic)."""
    total = np.cumsum(values)
    before = np.concatenate([np.zeros(1, dtype=total.dtype), total])[np.cumsum(lengths) - lengths]
    return np.asarray(total - np.repeat(before, lengths))


def _within(lengths: Ints) -> Ints:
    """Per entry of runs of ``lengths``, its position in its run."""
    total = int(lengths.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)


@dataclasses.dataclass
class _Side:
    """One side (positive or negative) of the histograms being checked: per bucket of
    their spans, its histogram (position in the request), Prometheus index and count;
    per histogram, what is wrong with the side, and its first and last index."""

    owner: Ints
    index: Ints
    count: Ints
    bad_spans: Mask
    """The spans hold another number of buckets than there are counts."""
    late_negative: Mask
    """A span after the first has a negative offset (it would overlap the one before)."""
    first_negative: Mask
    """The first span's offset is negative (custom buckets allow none)."""
    negative: Mask
    """An integer bucket count below 0."""
    not_whole: Mask
    """A float bucket count that is not a whole number from 0 to 2^63 - 1."""
    first: Ints
    last: Ints
    has: Mask

    @classmethod
    def of(cls, h: pa.StructArray, side: str, check: Mask) -> _Side:
        n = len(h)
        spans = h.field(f"{side}_spans")
        per_hist = _lengths(spans)
        flat = pc.list_flatten(spans)
        offset = np.asarray(flat.field("offset").to_numpy(zero_copy_only=False), np.int64)
        length = np.asarray(flat.field("length").to_numpy(zero_copy_only=False), np.int64)
        span_owner = np.repeat(np.arange(n, dtype=np.int64), per_hist)
        first_span = _within(per_hist) == 0
        late_negative = np.zeros(n, dtype=np.bool_)
        late_negative[span_owner[~first_span & (offset < 0)]] = True
        first_negative = np.zeros(n, dtype=np.bool_)
        first_negative[span_owner[first_span & (offset < 0)]] = True
        deltas, counts = h.field(f"{side}_deltas"), h.field(f"{side}_counts")
        n_deltas, n_counts = _lengths(deltas), _lengths(counts)
        in_spans = np.bincount(span_owner, weights=length, minlength=n)
        bad_spans = in_spans != n_deltas + n_counts
        # only histograms whose spans fit their counts (and that hold deltas or counts,
        # never both: refused before) are expanded, so buckets line up with counts
        active = check & ~bad_spans
        on = active[span_owner]
        offset, length, span_owner = offset[on], length[on], span_owner[on]
        spans_of = np.bincount(span_owner, minlength=n).astype(np.int64)
        starts = _running(offset, spans_of) + _running(length, spans_of) - length
        index = np.repeat(starts, length) + _within(length)
        owner = np.repeat(span_owner, length)
        n_deltas, n_counts = np.where(active, n_deltas, 0), np.where(active, n_counts, 0)
        count = np.zeros(len(owner), dtype=np.int64)
        at = np.cumsum(n_deltas + n_counts) - n_deltas - n_counts  # each one's first bucket
        negative = np.zeros(n, dtype=np.bool_)
        summed = _running(_active_values(deltas, active, np.int64), n_deltas)
        count[np.repeat(at, n_deltas) + _within(n_deltas)] = summed
        negative[np.repeat(np.arange(n), n_deltas)[summed < 0]] = True
        floats = _active_values(counts, active, np.float64)
        whole = _whole(floats)
        count[np.repeat(at, n_counts) + _within(n_counts)] = np.where(whole, floats, 0)
        not_whole = np.zeros(n, dtype=np.bool_)
        not_whole[np.repeat(np.arange(n), n_counts)[~whole]] = True
        first = np.zeros(n, dtype=np.int64)
        last = np.zeros(n, dtype=np.int64)
        has = np.zeros(n, dtype=np.bool_)
        first[owner[::-1]] = index[::-1]  # indices increase along the spans
        last[owner] = index
        has[owner] = True
        return cls(
            owner, index, count, bad_spans, late_negative, first_negative, negative,
            not_whole, first, last, has,
        )  # fmt: skip


def _active_values(lists: pa.ListArray, active: Mask, dtype: type) -> np.ndarray[Any, Any]:
    """The values of the lists of ``active`` histograms, in order."""
    owner = np.repeat(np.arange(len(active)), _lengths(lists))
    values: np.ndarray[Any, Any] = np.asarray(
        pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=dtype
    )
    return np.asarray(values[active[owner]])


def _check_buckets(
    h: pa.StructArray,
    sides: tuple[_Side, _Side],
    rej: Rejections,
    keep: Mask,
    custom: Mask,
    max_buckets: int,
) -> None:
    """Refuse (clear in ``keep``) histograms whose buckets cannot be stored."""
    positive, negative = sides
    rej.mask(
        "native histogram's spans do not hold as many buckets as it has counts",
        positive.bad_spans | negative.bad_spans,
        keep,
    )
    rej.mask(
        "native histogram has a span with a negative offset after the first",
        positive.late_negative | negative.late_negative | (custom & positive.first_negative),
        keep,
    )
    rej.mask("native histogram has a negative bucket count", positive.negative, keep)
    rej.mask("native histogram has a negative bucket count", negative.negative, keep)
    rej.mask(NOT_WHOLE, positive.not_whole | negative.not_whole, keep)
    n_bounds = _lengths(h.field("custom_values"))
    rej.mask(
        "custom-bucket histogram has a bucket beyond its custom_values",
        custom & positive.has & (positive.last > n_bounds),
        keep,
    )
    width = np.zeros(len(keep), dtype=np.int64)
    for side in sides:
        offset = side.first - 1
        beyond = side.has & ((offset < -(2**31)) | (offset >= 2**31))
        rej.mask("native histogram bucket index beyond int32", ~custom & beyond, keep)
        width += np.where(side.has & ~custom, side.last - side.first + 1, 0)
    over = np.cumsum(np.where(keep, width, 0)) > max_buckets
    reason = f"native histograms expand past {max_buckets} buckets (gaps included) in a request"
    rej.mask(reason, over, keep)


def _rows(
    h: pa.StructArray,
    keep: Mask,
    stale: Mask,
    custom: Mask,
    sides: tuple[_Side, _Side],
    owner: Ints,
    created_ms: Ints | None,
    rej: Rejections,
) -> Histograms:
    """The columns of the kept histograms."""
    rows = np.flatnonzero(keep)
    k = len(rows)
    stale_k = stale[rows]
    custom_k = custom[rows] & ~stale_k
    exponential = ~stale_k & ~custom[rows]
    t_ms = _numbers(h, "timestamp").astype(np.int64)[rows]
    start_ms = _numbers(h, "start_timestamp").astype(np.int64)[rows]
    if created_ms is not None:
        start_ms = np.where(start_ms > 0, start_ms, created_ms[owner])
    start_ns = np.where(start_ms > 0, start_ms * 1_000_000, 0)
    gauge = _numbers(h, "reset_hint")[rows] == GAUGE
    bounds = h.field("custom_values").take(pa.array(rows)).cast(_F64_LIST)
    columns: dict[str, pa.Array] = {
        "timestamp": pa.array(t_ms * 1000).view(UTC_US),
        "time_unix_nano": pa.array(t_ms * 1_000_000),
        "start_timestamp": pa.array(start_ns // 1000, mask=start_ns <= 0).view(UTC_US),
        "start_time_unix_nano": pa.array(start_ns),
        "metric_type": pa.array(
            np.where(custom_k, "histogram", "exponential_histogram").astype(object), pa.string()
        ),
        "aggregation_temporality": pa.array(np.where(gauge, UNSPECIFIED, CUMULATIVE), pa.int32()),
        "is_monotonic": pa.nulls(k, pa.bool_()),
        "count": pa.array(_int_or_float(h, "count")[rows], mask=stale_k),
        "sum": pa.array(np.where(stale_k, np.nan, _numbers(h, "sum")[rows])),
        "bucket_counts": _dense(sides[0], rows, custom_k, np.zeros(k, np.int64), _lengths(bounds)),
        "explicit_bounds": pc.if_else(pa.array(custom_k), bounds, pa.nulls(k, _F64_LIST)),
        "exp_scale": pa.array(_numbers(h, "schema")[rows], pa.int32(), mask=~exponential),
        "exp_zero_count": pa.array(_int_or_float(h, "zero_count")[rows], mask=~exponential),
        "exp_zero_threshold": pa.array(_numbers(h, "zero_threshold")[rows], mask=~exponential),
        "flags": pa.array(np.where(stale_k, NO_RECORDED_VALUE, 0).astype(np.int64)),
    }
    for name, side in zip(("positive", "negative"), sides, strict=True):
        has = side.has[rows] & exponential
        first, last = side.first[rows], side.last[rows]
        columns[f"exp_{name}_offset"] = pa.array(
            np.where(has, first - 1, 0), pa.int32(), mask=~exponential
        )
        columns[f"exp_{name}_bucket_counts"] = _dense(
            side, rows, exponential, np.where(has, first, 0), np.where(has, last, -1)
        )
    for name, array in columns.items():  # not reached unless the code above is wrong
        if array.type != METRICS_SCHEMA.field(name).type:
            raise TypeError(f"column {name} is {array.type}")
    return Histograms(owner, columns, rej.total, rej.messages())


def _int_or_float(h: pa.StructArray, name: str) -> Ints:
    """The ``oneof`` ``name`` (``<name>_int`` or ``<name>_float``) of every histogram, as
    int64 (float ones were checked whole; absent is 0, as proto3 reads it)."""
    floats = _numbers(h, f"{name}_float", 0.0)
    ints = _numbers(h, f"{name}_int", 0).astype(np.uint64)
    whole = np.where(_whole(floats), floats, 0.0).astype(np.int64)
    return np.asarray(np.where(_sent(h, f"{name}_float"), whole, ints.astype(np.int64)))


def _dense(side: _Side, rows: Ints, valid: Mask, first: Ints, last: Ints) -> pa.Array:
    """Per row (histograms ``rows`` of the request): the counts of the side's buckets
    ``first`` to ``last`` (Prometheus indices) as a dense list, 0 where no span holds
    one; null where not ``valid``."""
    width = np.where(valid, last - first + 1, 0)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(width, out=offsets[1:])
    values: Ints = np.zeros(int(offsets[-1]), dtype=np.int64)
    row_of = np.full(len(side.first), -1, dtype=np.int64)  # histogram -> row
    row_of[rows[valid]] = np.flatnonzero(valid)
    row = row_of[side.owner]
    mine = row >= 0
    row = row[mine]
    values[offsets[row] + side.index[mine] - first[row]] = side.count[mine]
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values), mask=pa.array(~valid)
    )
