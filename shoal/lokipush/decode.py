"""A Loki push body to rows of ``LOGS_SCHEMA``: the entry point of the codec.

Protobuf (``logproto.PushRequest``, already out of its snappy block) is decoded by ptars
straight into Arrow; the JSON body (``{"streams": [{"stream": {...}, "values": [["<ns>",
"<line>", {<metadata>}], ...]}]}``) by msgspec. Either way the entries become columns:

* ``resource_attributes``: the stream's labels, with ``service_name`` discovered as Loki 3
  does when the stream has none; ``service_name`` also in its own column;
* ``attributes``: the entry's structured metadata, plus ``detected_level`` (levels.py);
* ``body``: the line; ``timestamp``/``time_unix_nano``: the entry's time;
* ``trace_id``/``span_id``: the structured metadata's ``trace_id``/``span_id`` when they
  are ids (32 and 16 lowercase hex digits), so that SQL joins logs to spans;
* ``scope_name``: :data:`~shoal.schema.LOKI_PUSH_SCOPE`, which tells LogQL that the
  labels are Loki's own.

A body that cannot be read, a stream whose labels Loki would refuse, a timestamp that is
not a number: DecodeError (400) for the whole request, as Loki answers. An entry at or
before the epoch, or beyond int64 nanoseconds, is refused alone and counted.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import DecodeError
from shoal.lokipush import labels as lbl
from shoal.lokipush import levels
from shoal.lokipush.proto import DECODER, PUSH_REQUEST
from shoal.rows.columns import I64, empty_maps, flatten, list_offsets, nulls, timestamps
from shoal.rows.result import DecodeResult, Rejections, all_null
from shoal.schema import ATTRS, LOGS_SCHEMA, LOKI_PUSH_SCOPE

Pairs = tuple[tuple[str, str], ...]

_ONE_SECOND = 1_000_000_000


def decode(body: bytes, json: bool = False) -> DecodeResult:
    """Rows of the ``logs`` table from a push body (protobuf unless ``json``)."""
    if json:
        return _from_json(body)
    return _from_protobuf(body)


def _from_protobuf(body: bytes) -> DecodeResult:
    batch = DECODER.batch(PUSH_REQUEST, body, "body is not a Loki PushRequest")
    streams, _ = flatten(batch.column(0))
    texts = streams.field("labels").to_pylist()
    stream_labels = [lbl.parse(text or "") for text in texts]
    entries, stream_of = flatten(streams.field("entries"))
    stamp = entries.field("timestamp")
    seconds = stamp.field("seconds").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    nanos = stamp.field("nanos").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    with np.errstate(over="ignore"):
        ns = seconds * _ONE_SECOND + nanos
    overflow = (np.abs(seconds) > (2**63 - 1) // _ONE_SECOND) | stamp.is_null().to_numpy(
        zero_copy_only=False
    )
    metadata = _pairs_to_maps(entries.field("structuredMetadata"))
    lines = entries.field("line").fill_null("")
    return rows(stream_labels, stream_of, np.where(overflow, -1, ns), lines, metadata)


def _pairs_to_maps(lists: pa.Array) -> pa.MapArray:
    """A list of ``{name, value}`` structs per row as a map column."""
    if not len(lists):
        return empty_maps(0)
    pairs, _ = flatten(lists)
    offsets = pa.array(list_offsets(lists).astype(np.int32))
    names = pc.fill_null(pairs.field("name"), "")
    values = pc.fill_null(pairs.field("value"), "")
    return pa.MapArray.from_arrays(offsets, names, values, type=ATTRS)


class _Stream(msgspec.Struct):
    stream: dict[str, str] = {}
    values: list[list[Any]] = []


class _Push(msgspec.Struct):
    streams: list[_Stream] = []


_JSON = msgspec.json.Decoder(_Push)


def _from_json(body: bytes) -> DecodeResult:
    try:
        push = _JSON.decode(body)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"body is not a Loki JSON push request: {exc}") from None
    stream_labels: list[Pairs] = []
    stream_of: list[int] = []
    stamps: list[int] = []
    lines: list[str] = []
    offsets = [0]
    names: list[str] = []
    values: list[str] = []
    for s, stream in enumerate(push.streams):
        stream_labels.append(lbl.check(tuple(stream.stream.items()), lbl.render(stream.stream)))
        for e, value in enumerate(stream.values):
            where = f"streams[{s}].values[{e}]"
            stamp, line, meta = _entry(value, where)
            stamps.append(stamp)
            lines.append(line)
            stream_of.append(s)
            for k, v in meta.items():
                if not isinstance(v, str):
                    raise DecodeError(f"{where}: structured metadata {k!r} is not a string")
                names.append(k)
                values.append(v)
            offsets.append(len(names))
    metadata = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(names, pa.string()), pa.array(values, pa.string())
    )
    return rows(
        stream_labels,
        np.asarray(stream_of, dtype=np.int64),
        np.asarray(stamps, dtype=np.int64),
        pa.array(lines, pa.string()),
        metadata,
    )


def _entry(value: list[Any], where: str) -> tuple[int, str, dict[str, Any]]:
    if len(value) not in (2, 3):
        raise DecodeError(f"{where}: an entry is [timestamp, line] or [timestamp, line, metadata]")
    stamp, line = value[0], value[1]
    if not isinstance(stamp, str) or not isinstance(line, str):
        raise DecodeError(f"{where}: the timestamp and the line must be strings")
    try:
        ns = int(stamp)
    except ValueError:
        raise DecodeError(f"{where}: timestamp {stamp!r} is not a number of nanoseconds") from None
    meta = value[2] if len(value) == 3 else {}
    if not isinstance(meta, dict):
        raise DecodeError(f"{where}: structured metadata must be an object")
    return (ns if -(2**63) <= ns < 2**63 else -1), line, meta


def rows(
    stream_labels: list[Pairs],
    stream_of: I64,
    ns: I64,
    lines: pa.Array,
    metadata: pa.MapArray,
) -> DecodeResult:
    """The rows of a push's entries: each entry's stream (index into ``stream_labels``),
    time in nanoseconds (negative: out of range), line and structured metadata."""
    n = len(ns)
    rej = Rejections()
    keep = np.ones(n, dtype=np.bool_)
    rej.mask("entry timestamp is not after 1970 or beyond year 2262", ns <= 0, keep)
    labelled = [lbl.with_service_name(pairs) for pairs in stream_labels]
    streams = _label_maps(labelled)
    take = pa.array(stream_of, pa.int64())
    label_dicts = [dict(p) for p in labelled]
    stream_level = pa.array(
        [next((d[f] for f in levels.LEVEL_FIELDS if f in d), None) for d in label_dicts],
        pa.string(),
    )
    keys = levels.keys_of(metadata)
    found = levels.detect(lines, [stream_level.take(take), *levels.named_in(metadata, keys)])
    missing = pa.array(np.ones(n, dtype=np.bool_))
    if levels.DETECTED_LEVEL in keys:
        missing = pc.map_lookup(metadata, levels.DETECTED_LEVEL, "first").is_null()
    metadata = _append_where(metadata, levels.DETECTED_LEVEL, found, missing)
    trace_id = _hex_id(metadata, "trace_id", 32) if "trace_id" in keys else nulls(n, pa.string())
    span_id = _hex_id(metadata, "span_id", 16) if "span_id" in keys else nulls(n, pa.string())
    services = pa.array([d[lbl.SERVICE_NAME] for d in label_dicts], pa.string())
    safe = np.where(keep, ns, 0)
    columns: dict[str, pa.Array] = {
        "timestamp": timestamps(safe),
        "time_unix_nano": pa.array(safe, pa.int64()),
        "observed_timestamp": nulls(n, LOGS_SCHEMA.field("observed_timestamp").type),
        "observed_time_unix_nano": pa.array(np.zeros(n, np.int64)),
        "severity_number": pa.array(np.zeros(n, np.int32)),
        "severity_text": nulls(n, pa.string()),
        "body": lines,
        "body_type": nulls(n, pa.string()),
        "event_name": nulls(n, pa.string()),
        "trace_id": trace_id,
        "span_id": span_id,
        "flags": pa.array(np.zeros(n, np.int64)),
        "attributes": metadata,
        "attributes_types": empty_maps(n),
        "dropped_attributes_count": pa.array(np.zeros(n, np.int64)),
        "service_name": services.take(take),
        "resource_attributes": streams.take(take),
        "resource_attributes_types": empty_maps(n),
        "resource_dropped_attributes_count": pa.array(np.zeros(n, np.int64)),
        "resource_schema_url": nulls(n, pa.string()),
        "scope_name": pa.repeat(pa.scalar(LOKI_PUSH_SCOPE, pa.string()), n),
        "scope_version": nulls(n, pa.string()),
        "scope_attributes": empty_maps(n),
        "scope_attributes_types": empty_maps(n),
        "scope_dropped_attributes_count": pa.array(np.zeros(n, np.int64)),
        "scope_schema_url": nulls(n, pa.string()),
    }
    if not keep.all():
        return rej.result(columns, LOGS_SCHEMA, keep)
    arrays = [columns[f.name] for f in LOGS_SCHEMA]
    table = pa.Table.from_arrays(arrays, schema=LOGS_SCHEMA)
    return DecodeResult(table, n, 0, [], all_null(arrays, n))


def _label_maps(label_sets: list[Pairs]) -> pa.MapArray:
    offsets = np.zeros(len(label_sets) + 1, dtype=np.int32)
    np.cumsum([len(p) for p in label_sets], out=offsets[1:])
    keys = [k for p in label_sets for k, _ in p]
    values = [v for p in label_sets for _, v in p]
    return pa.MapArray.from_arrays(
        pa.array(offsets), pa.array(keys, pa.string()), pa.array(values, pa.string()), type=ATTRS
    )


def _append_where(maps: pa.MapArray, key: str, values: pa.Array, where: pa.Array) -> pa.MapArray:
    """``maps`` with the entry ``key: values[i]`` added at the end of each row ``where``
    holds (column-wise: the new entries are interleaved by index)."""
    add = np.asarray(where.to_numpy(zero_copy_only=False), dtype=np.bool_)
    if not add.any():
        return maps
    old = list_offsets(maps)
    if not old[-1] and add.all():  # no row has an entry yet: one each (no metadata sent)
        return pa.MapArray.from_arrays(
            pa.array(np.arange(len(maps) + 1, dtype=np.int32)),
            pa.repeat(pa.scalar(key, pa.string()), len(maps)),
            values.cast(pa.string()),
            type=ATTRS,
        )
    lengths = np.diff(old) + add
    new = np.zeros(len(maps) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    count = int(new[-1])
    # every old entry's position in the new arrays, then the added ones at each row's end
    source = np.empty(count, dtype=np.int64)
    old_count = int(old[-1])
    row_of_old = np.repeat(np.arange(len(maps)), np.diff(old))
    shift = new[:-1] - old[:-1]
    source[np.arange(old_count) + shift[row_of_old]] = np.arange(old_count)
    rows_added = np.nonzero(add)[0]
    source[new[rows_added + 1] - 1] = old_count + np.arange(len(rows_added))
    keys = pa.concat_arrays(
        [_map_part(maps.keys, maps), pa.array([key] * len(rows_added), pa.string())]
    )
    items = pa.concat_arrays(
        [_map_part(maps.items, maps), values.take(pa.array(rows_added)).cast(pa.string())]
    )
    order = pa.array(source)
    return pa.MapArray.from_arrays(
        pa.array(new.astype(np.int32)), keys.take(order), items.take(order), type=ATTRS
    )


def _map_part(part: pa.Array, maps: pa.MapArray) -> pa.Array:
    """The keys or items of ``maps``' own rows (a slice's children start anywhere)."""
    offsets = maps.offsets.to_numpy(zero_copy_only=False)
    return part.slice(int(offsets[0]), int(offsets[-1] - offsets[0])) if len(offsets) else part


def _hex_id(metadata: pa.MapArray, name: str, digits: int) -> pa.Array:
    """The metadata's ``name`` where it is an id of ``digits`` lowercase hex digits."""
    found = pc.map_lookup(metadata, name, "first")
    good = pc.match_substring_regex(found, f"^[0-9a-f]{{{digits}}}$")
    return pc.if_else(pc.fill_null(good, False), found, None)
