"""Prometheus remote-write bodies -> rows of the ``metrics`` table, column by column.

ptars turns the message into Arrow (one struct per series, its labels and samples as
lists); labels, names and metadata are then handled per series with Arrow and NumPy,
and the per-series columns are repeated for their samples with ``take``.

The rows are stored so that the PromQL view (:mod:`shoal.promql.mapping`) reads back
exactly the labels that were written: the scope ``prometheus.remote_write`` tells the
view to take the metric name as it is (no unit or ``_total`` suffixes added); ``job``
becomes the resource attributes ``service.namespace``/``service.name`` it comes from
(split at the first ``/``), ``instance`` becomes ``service.instance.id``, every other
label a point attribute. Counters (by their metadata) are monotonic cumulative sums,
everything else gauges; the metadata's type, family name, unit and help are kept.
A stale marker (the NaN with bits ``0x7ff0000000000002``) becomes a point with OTLP's
no-recorded-value flag, which the view reads as staleness.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import DecodeError, UnsupportedMediaTypeError
from shoal.promwrite import histograms, proto
from shoal.rows.columns import empty_lists, empty_maps, hash_text, nulls, series_ids
from shoal.rows.known import KnownSeries, gather
from shoal.rows.protoarrow import ProtoArrow
from shoal.rows.result import DecodeResult, all_null
from shoal.schema import METRICS_SCHEMA, REMOTE_WRITE_SCOPE, UTC_US

V1 = "prometheus.WriteRequest"
V2 = "io.prometheus.write.v2.Request"
STALE_NAN = 0x7FF0000000000002
NO_RECORDED_VALUE = 1
_SPECIAL = ("__name__", "job", "instance")
_FAMILY_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created", "_info")
_EXEMPLARS = METRICS_SCHEMA.field("exemplars").type
_MAP = pa.map_(pa.string(), pa.string())


def message_of(content_type: str) -> str:
    """The proto message a ``Content-Type`` names (1.0 when it names none); raises
    :class:`UnsupportedMediaTypeError` for any other media type or message."""
    media, _, params = content_type.partition(";")
    if media.strip().lower() != "application/x-protobuf":
        raise UnsupportedMediaTypeError(
            f"unsupported content type {content_type!r}: send application/x-protobuf "
            f"(proto={V1} or proto={V2})"
        )
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "proto":
            value = value.strip().strip('"')
            if value not in (V1, V2):
                raise UnsupportedMediaTypeError(
                    f"unsupported remote-write message {value!r}: send {V1} or {V2}"
                )
            return value
    return V1


@dataclasses.dataclass
class Written:
    """What a request held: its rows, and the counts the 2.0 response headers report."""

    result: DecodeResult
    samples: int
    exemplars: int
    histograms: int = 0


_DECODER = ProtoArrow(
    lambda: [
        proto.V1_FILE.SerializeToString(),
        proto.V2_FILE.SerializeToString(),
        proto.V1_RAW_FILE.SerializeToString(),
    ]
)
_RAW_KEY = b"\xfc"
"""First byte of the keys made from a 1.0 series' label bytes: a byte UTF-8 never holds,
so no key made from decoded labels (which start with a label name) is one of them."""


_KNOWN = KnownSeries(max_series=200_000, max_bytes=64 << 20)
"""Series seen before, across requests and tenants (a row depends on the label set only)."""


def decode(body: bytes, message: str, known: KnownSeries | None = _KNOWN) -> Written:
    """Decode an uncompressed (snappy already undone) remote-write body of ``message``.

    The columns of each distinct label set come from ``known`` when it has them
    (``None``: work every series out)."""
    if known is not None and message == V1:
        seen = _decode_v1_raw(body, known)
        if seen is not None:
            return seen
    batch = _DECODER.batch(message, body, f"body is not a valid {message}")
    series = batch.column("timeseries").flatten()
    n = len(series)
    symbols: pa.Array | None = None
    if message == V2:
        symbols = batch.column("symbols")[0].values
        labels, v2_meta, created = _v2(batch, series)
        key_extra: list[pa.Array] | None = v2_meta.key_columns()

        def metas(names: list[str | None], positions: np.ndarray[Any, Any]) -> list[Meta]:
            return v2_meta.metas(names, positions)
    else:
        labels = _v1(series)
        created = np.zeros(n, dtype=np.int64)
        metadata = _v1_metadata(batch)
        key_extra = None
        if metadata:  # 1.0 sends metadata in requests of their own; these are rare
            known = None

        def metas(names: list[str | None], positions: np.ndarray[Any, Any]) -> list[Meta]:
            if not metadata:
                return [Meta()] * len(names)
            per_name = {name: _family_meta(str(name or ""), metadata) for name in set(names)}
            return [per_name[name] for name in names]

    def build(positions: np.ndarray[Any, Any]) -> pa.Table:
        subset = labels.subset(positions, n)
        return _series_columns(subset, len(positions), lambda names: metas(names, positions))

    if known is None or not n:
        table = build(np.arange(n))
        rows = np.arange(n)
        named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
    else:
        table, rows, named = known.rows(_keys(labels, n, key_extra), build)
    written = _rows(_Samples.of(series), table, rows, named, created, series, symbols)
    if n and _has_entries(series.field("histograms")):
        written = _with_histograms(written, len(body), series, table, rows, named, created, symbols)
    return written


def _decode_v1_raw(body: bytes, known: KnownSeries) -> Written | None:
    """A 1.0 request decoded from its samples and the encoded bytes of its labels, which
    key the series cache; a series not yet cached is worked out from the request decoded
    in full. None for a request this does not cover (no series, metadata, exemplars,
    histograms, or bytes that are not a request): the full decoder takes it.

    The C scanner (:data:`SCAN_V1`) does the reading without the interpreter lock when it
    was built; else ptars does, with the lock."""
    if SCAN_V1 is not None:
        scanned = SCAN_V1(body)
        if scanned is None:
            return None
        keys, samples = _scanned(scanned)
    else:
        try:
            batch = _DECODER.batch(proto.V1_RAW, body, "")
        except DecodeError:
            return None
        series = batch.column("timeseries").flatten()
        if (
            not len(series)
            or _has_entries(batch.column("metadata"))
            or _has_entries(series.field("exemplars"))
            or _has_entries(series.field("histograms"))
        ):
            return None
        keys, samples = _raw_keys(series.field("labels"), len(series)), _Samples.of(series)
    n = len(keys)

    def build(positions: np.ndarray[Any, Any]) -> pa.Table:
        full = _DECODER.batch(V1, body, f"body is not a valid {V1}")
        subset = _v1(full.column("timeseries").flatten()).subset(positions, n)
        return _series_columns(subset, len(positions), lambda names: [Meta()] * len(names))

    table, rows, named = known.rows(keys, build)
    return _rows(samples, table, rows, named, None, None, None)


Scanned = tuple[int, bytes, bytes, bytes, bytes, bytes]
"""What ``_scan.scan_v1`` returns: series count, key offsets, keys, sample offsets,
values, timestamps (see ``shoal/promwrite/_scan.c``)."""


def _load_scanner() -> Callable[[bytes], Scanned | None] | None:
    try:
        from shoal.promwrite._scan import scan_v1
    except ImportError:  # built without a C compiler: ptars does the same work
        return None
    return scan_v1


SCAN_V1 = _load_scanner()


def _scanned(scanned: Scanned) -> tuple[pa.Array, _Samples]:
    """The cache keys and samples of a scanned request, as views of the scanner's bytes."""
    n, key_offsets, keys, sample_offsets, values, times = scanned
    key_array = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(key_offsets), pa.py_buffer(keys)]
    )
    counts = np.diff(np.frombuffer(sample_offsets, np.int32)).astype(np.int64)
    return key_array, _Samples(
        counts, np.frombuffer(values, np.float64), np.frombuffer(times, np.int64)
    )


@dataclasses.dataclass
class _Samples:
    """Every sample of a request: per series its count; per sample its series, value and
    time (milliseconds)."""

    counts: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    t_ms: np.ndarray[Any, Any]
    owner: np.ndarray[Any, Any] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.owner = _owners_of(self.counts)

    @classmethod
    def of(cls, series: pa.StructArray) -> _Samples:
        """The samples of decoded series, copied (a view would keep the request's
        decoded buffers alive while its rows wait for their flush)."""
        samples = series.field("samples")
        flat = samples.flatten()
        return cls(
            _lengths(samples),
            flat.field("value").to_numpy(zero_copy_only=False).copy(),
            flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64),
        )


def _raw_keys(labels: pa.ListArray, n: int) -> pa.Array:
    """Per series, the encoded bytes of its labels, then each label's length: two label
    lists whose bytes run together alike still differ in where each label ends.

    Both parts are views of the decoded buffers (a series' labels are contiguous bytes,
    their lengths contiguous integers), joined once."""
    flat = labels.flatten()
    per_list = np.asarray(labels.offsets)
    per_list = per_list - per_list[0]
    offsets = flat.buffers()[1]
    bounds = (
        np.frombuffer(offsets, np.int32)[flat.offset : flat.offset + len(flat) + 1]
        if offsets is not None
        else np.zeros(1, dtype=np.int32)
    )
    data = flat.buffers()[2] or pa.py_buffer(b"")
    together = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(bounds[per_list].astype(np.int32)), data]
    )
    lengths = pa.py_buffer(np.diff(bounds).astype("<u4"))
    ends = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer((per_list * 4).astype(np.int32)), lengths]
    )
    out: pa.Array = pc.binary_join_element_wise(_RAW_KEY, together, ends, b"")
    return out


@dataclasses.dataclass
class _Labels:
    """Every label of every series, flattened: the series it belongs to, name, value."""

    owner: np.ndarray[Any, Any]
    names: pa.Array
    values: pa.Array

    def subset(self, positions: np.ndarray[Any, Any], n: int) -> _Labels:
        """The labels of the series at ``positions`` (ascending), renumbered from 0."""
        if len(positions) == n:
            return self
        renumber = np.full(n, -1, dtype=np.int64)
        renumber[positions] = np.arange(len(positions))
        owner = renumber[self.owner]
        keep = owner >= 0
        mask = pa.array(keep)
        return _Labels(owner[keep], self.names.filter(mask), self.values.filter(mask))


def _keys(labels: _Labels, n: int, extra: list[pa.Array] | None) -> pa.Array:
    """Per series, its label set (and ``extra`` columns) as one byte string.

    The separators are bytes UTF-8 never holds, and the decoder refuses invalid UTF-8,
    so two different label sets never share a key."""
    pairs = pc.binary_join_element_wise(
        labels.names.cast(pa.binary()), labels.values.cast(pa.binary()), b"\xff"
    )
    per_series = pa.ListArray.from_arrays(pa.array(_offsets(labels.owner, n)), pairs)
    keys = pc.binary_join(per_series, b"\xfe")
    if extra:
        keys = pc.binary_join_element_wise(keys, *[e.cast(pa.binary()) for e in extra], b"\xfd")
    out: pa.Array = keys
    return out


def _offsets(owner: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    """List offsets for entries sorted by series (``owner`` ascending)."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return offsets


def _v1(series: pa.StructArray) -> _Labels:
    labels = series.field("labels")
    flat = labels.flatten()
    return _Labels(_owners(labels), flat.field("name"), flat.field("value"))


def _v1_metadata(batch: pa.RecordBatch) -> dict[str, Meta]:
    column = batch.column("metadata")
    if not len(column) or not len(column[0].values):
        return {}
    return {
        m["metric_family_name"]: Meta(
            proto.V1_TYPES.get(m["type"], "unknown"), m["metric_family_name"], m["help"], m["unit"]
        )
        for m in column[0].as_py() or []
    }


@dataclasses.dataclass
class _V2Meta:
    """The 2.0 metadata of each series: type, help and unit."""

    kinds: pa.Array
    helps: pa.Array
    units: pa.Array

    def key_columns(self) -> list[pa.Array]:
        return [self.kinds.cast(pa.string()), self.helps, self.units]

    def metas(self, names: list[str | None], positions: np.ndarray[Any, Any]) -> list[Meta]:
        take = pa.array(positions)
        kinds = self.kinds.take(take).to_pylist()
        helps = self.helps.take(take).to_pylist()
        units = self.units.take(take).to_pylist()
        return [
            Meta(proto.V1_TYPES.get(int(k), "unknown"), str(name or ""), h, u)
            for k, name, h, u in zip(kinds, names, helps, units, strict=True)
        ]


def _v2(
    batch: pa.RecordBatch, series: pa.StructArray
) -> tuple[_Labels, _V2Meta, np.ndarray[Any, Any]]:
    symbols = batch.column("symbols")[0].values
    if len(series) and (len(symbols) == 0 or symbols[0].as_py() != ""):
        raise DecodeError("the symbols table must start with the empty string")
    refs = series.field("labels_refs")
    if (
        len(series)
        and pc.any(pc.not_equal(pc.bit_wise_and(pc.list_value_length(refs), 1), 0)).as_py()
    ):
        raise DecodeError("a series' labels_refs has an odd length")
    flat = _symbols(symbols, refs.flatten())
    owners = _owners(refs)[0::2]
    found = _Labels(owners, flat.take(pa.array(np.arange(0, len(flat), 2))),
                    flat.take(pa.array(np.arange(1, len(flat), 2))))  # fmt: skip
    meta = series.field("metadata")
    v2_meta = _V2Meta(
        meta.field("type"),
        _symbols(symbols, meta.field("help_ref")),
        _symbols(symbols, meta.field("unit_ref")),
    )
    created = series.field("created_timestamp").to_numpy(zero_copy_only=False)
    return found, v2_meta, np.asarray(created, dtype=np.int64)


def _symbols(symbols: pa.Array, refs: pa.Array) -> pa.Array:
    if len(refs) and pc.max(refs).as_py() >= len(symbols):
        raise DecodeError("a symbol reference is beyond the symbols table")
    return symbols.take(refs)


def _has_entries(lists: pa.ListArray) -> bool:
    """Whether any list holds an entry (counted off its values: reading the offsets of
    a list array with nulls, as ptars leaves absent fields, costs ten times more)."""
    return len(lists.flatten()) > 0


def _lengths(lists: pa.ListArray) -> np.ndarray[Any, Any]:
    """Entries per list (none in a null list), read off the offsets."""
    return np.diff(np.asarray(lists.offsets)).astype(np.int64)


def _owners(lists: pa.ListArray) -> np.ndarray[Any, Any]:
    """Per entry of the lists, the list it is in."""
    return _owners_of(_lengths(lists))


def _owners_of(counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per entry, the list it is in, from each list's count of entries."""
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _names(labels: _Labels, n: int) -> list[str | None]:
    """Each series' ``__name__`` (None when it has none); checks the label sets too."""
    if len(labels.names) and pc.any(pc.equal(pc.utf8_length(labels.names), 0)).as_py():
        raise DecodeError("a label has an empty name")
    if len(labels.names):
        keys = pa.table({"o": labels.owner, "n": labels.names})
        dup = keys.group_by(["o", "n"]).aggregate([([], "count_all")])
        if pc.max(dup.column("count_all")).as_py() > 1:
            raise DecodeError("a label name appears twice in one series")
    return list(_pick(labels, "__name__", n))


def _pick(labels: _Labels, name: str, n: int) -> np.ndarray[Any, Any]:
    """Per series, the value of label ``name`` (None where absent or empty)."""
    out = np.full(n, None, dtype=object)
    mask = pc.and_(pc.equal(labels.names, name), pc.not_equal(labels.values, "")).to_numpy(
        zero_copy_only=False
    )
    out[labels.owner[mask]] = labels.values.filter(pa.array(mask)).to_numpy(zero_copy_only=False)
    return out


@dataclasses.dataclass(frozen=True)
class Meta:
    kind: str = "unknown"
    family: str = ""
    help: str = ""
    unit: str = ""


def _family_meta(name: str, metadata: dict[str, Meta]) -> Meta:
    """1.0 sends metadata per family: ``foo`` for ``foo_bucket``, ``foo_total`` or ``foo``."""
    for suffix in _FAMILY_SUFFIXES:
        if suffix and not name.endswith(suffix):
            continue
        found = metadata.get(name[: len(name) - len(suffix)] if suffix else name)
        if found is not None:
            return found
    return Meta()


@functools.lru_cache(maxsize=1 << 16)
def _entry_hash(key: str, value: str) -> int:
    return hash_text(key, "", value)


@functools.lru_cache(maxsize=1 << 16)
def _name_hash(name: str) -> int:
    return hash_text(name)


def _set_hashes(owner: np.ndarray[Any, Any], keys: list[str], values: list[str], n: int) -> Any:
    hashes = np.fromiter(
        (_entry_hash(k, v) for k, v in zip(keys, values, strict=True)), np.uint64, len(keys)
    )
    out = np.zeros(n, dtype=np.uint64)
    np.add.at(out, owner, hashes)
    return out


def _resource(
    job: np.ndarray[Any, Any], instance: np.ndarray[Any, Any]
) -> tuple[pa.MapArray, np.ndarray[Any, Any], pa.Array]:
    """Per series: its resource attributes from job (``ns/name`` or ``name``) and
    instance, their set hash, and the service name; computed once per distinct pair."""
    distinct: dict[tuple[Any, Any], int] = {}
    index = np.fromiter(
        (distinct.setdefault(pair, len(distinct)) for pair in zip(job, instance, strict=True)),
        np.int64,
        len(job),
    )
    entries: list[list[tuple[str, str]]] = []
    for j, inst in distinct:
        items: list[tuple[str, str]] = []
        if j:
            namespace, name = j.split("/", 1) if "/" in j else ("", j)
            items.append(("service.name", name))
            if namespace:
                items.append(("service.namespace", namespace))
        if inst:
            items.append(("service.instance.id", inst))
        entries.append(sorted(items))
    hashes = np.array(
        [sum(_entry_hash(k, v) for k, v in items) % (1 << 64) for items in entries],
        dtype=np.uint64,
    )
    services = pa.array([dict(items).get("service.name") for items in entries], pa.string())
    take = pa.array(index)
    return pa.array(entries, _MAP).take(take), hashes[index], services.take(take)


def _map(owner: np.ndarray[Any, Any], keys: pa.Array, values: pa.Array, n: int) -> pa.MapArray:
    """A map per series from entries sorted by series (``owner`` ascending)."""
    return pa.MapArray.from_arrays(pa.array(_offsets(owner, n)), keys, values)


def _series_columns(
    labels: _Labels, n_series: int, metas_of: Callable[[list[str | None]], list[Meta]]
) -> pa.Table:
    """The columns each of ``n_series`` series repeats on its samples, one row per series;
    ``metric_name`` is null for a series without one. Raises DecodeError for label sets
    that can never be stored."""
    names = _names(labels, n_series)
    metas = metas_of(names)
    # attributes: every label but __name__, job and instance, with a value
    keep = pc.and_(
        pc.invert(pc.is_in(labels.names, pa.array(_SPECIAL))), pc.not_equal(labels.values, "")
    ).to_numpy(zero_copy_only=False)
    a_owner = labels.owner[keep]
    a_keys = labels.names.filter(pa.array(keep))
    a_values = labels.values.filter(pa.array(keep))
    order = np.argsort(a_owner, kind="stable")
    a_owner, a_keys, a_values = a_owner[order], a_keys.take(order), a_values.take(order)
    attributes = _map(a_owner, a_keys, a_values, n_series)
    resource, resource_hash, service = _resource(
        _pick(labels, "job", n_series), _pick(labels, "instance", n_series)
    )
    name_index: dict[Any, int] = {}
    by_name = np.fromiter(
        (name_index.setdefault(x, len(name_index)) for x in names), np.int64, n_series
    )
    name_hash = np.array([_name_hash(str(x or "")) for x in name_index], dtype=np.uint64)[by_name]
    point_hash = _set_hashes(a_owner, a_keys.to_pylist(), a_values.to_pylist(), n_series)
    # what the metadata decides, once per distinct (metadata, name)
    meta_index: dict[tuple[Meta, Any], int] = {}
    by_meta = pa.array(
        np.fromiter(
            (meta_index.setdefault(k, len(meta_index)) for k in zip(metas, names, strict=True)),
            np.int64,
            n_series,
        )
    )
    distinct = list(meta_index)
    counter = [
        m.kind == "counter" and bool(x) and (x == m.family or x == m.family + "_total")
        for m, x in distinct
    ]
    metadata_rows = [
        [("prometheus.type", m.kind)] + ([("prometheus.family", m.family)] if m.family else [])
        for m, _ in distinct
    ]
    per_meta: dict[str, pa.Array] = {
        "metric_description": pa.array([m.help or None for m, _ in distinct], pa.string()),
        "metric_unit": pa.array([m.unit or None for m, _ in distinct], pa.string()),
        "metric_type": pa.array(["sum" if c else "gauge" for c in counter], pa.string()),
        "aggregation_temporality": pa.array([2 if c else None for c in counter], pa.int32()),
        "is_monotonic": pa.array([True if c else None for c in counter], pa.bool_()),
        "metric_metadata": pa.array(metadata_rows, _MAP),
    }
    columns: dict[str, pa.Array] = {
        "metric_name": pa.array(names, pa.string()),
        "series_id": series_ids(name_hash, point_hash, resource_hash),
        "attributes": attributes,
        "resource_attributes": resource,
        "service_name": service,
        **{name: array.take(by_meta) for name, array in per_meta.items()},
    }
    return pa.table(
        list(columns.values()),
        schema=pa.schema([METRICS_SCHEMA.field(name) for name in columns]),
    )


@functools.lru_cache(maxsize=8)
def _constants(n: int) -> dict[str, pa.Array]:
    """The columns equal in every row of a remote-written request of ``n`` rows
    (arrays are immutable, so one set serves every request of that size)."""
    empty = empty_maps(n)
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    return {f.name: nulls(n, f.type) for f in METRICS_SCHEMA} | {
        "attributes_types": empty,
        "metric_metadata_types": empty,
        "resource_attributes_types": empty,
        "scope_name": pa.array(np.full(n, REMOTE_WRITE_SCOPE, dtype=object), pa.string()),
        "scope_attributes": empty,
        "scope_attributes_types": empty,
        "resource_dropped_attributes_count": zeros,
        "scope_dropped_attributes_count": zeros,
        # defaults, replaced where a request holds other values
        "start_time_unix_nano": zeros,
        "start_timestamp": nulls(n, UTC_US),
        "flags": zeros,
        "exemplars": empty_lists(n, _EXEMPLARS),
    }


def _rows(
    samples: _Samples,
    table: pa.Table,
    rows: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    created_ms: np.ndarray[Any, Any] | None,
    series: pa.StructArray | None,
    symbols: pa.Array | None,
) -> Written:
    """The request's rows: series ``i``'s columns are row ``rows[i]`` of ``table``, repeated
    for its samples; the samples of series without a name are refused.

    ``created_ms`` None: no series has a created timestamp. ``series`` (the decoded
    series, for their exemplars) None: no series has exemplars."""
    counts, owner, values, t_ms = samples.counts, samples.owner, samples.values, samples.t_ms
    if named.all():  # the common case: nothing to refuse, nothing to leave out
        errors: list[str] = []
        rejected = 0
    else:
        errors = [f"series {i}: no __name__ label" for i in np.flatnonzero(~named)[:10]]
        rejected = int(counts[~named].sum())
        take = np.flatnonzero(named[owner])
        owner, values, t_ms = owner[take], values[take], t_ms[take]
    n = len(owner)
    gathered = gather(table, rows[owner])
    # every column of the schema, in its order: nulls and constants, then this request's
    columns: dict[str, pa.Array | pa.ChunkedArray] = dict(_constants(n))
    columns.update(zip(gathered.column_names, gathered.columns, strict=True))
    columns.update(
        {
            "timestamp": pa.array(t_ms * 1000).view(UTC_US),  # a 10th of the cost of typing it
            "time_unix_nano": pa.array(t_ms * 1_000_000),
            "value": pa.array(values),
        }
    )
    # the columns most requests leave at their defaults are built only where they do not
    stale = values.view(np.uint64) == np.uint64(STALE_NAN)
    if stale.any():
        columns["value"] = pa.array(np.where(stale, np.nan, values))
        columns["flags"] = pa.array(np.where(stale, NO_RECORDED_VALUE, 0).astype(np.int64))
    start = created_ms[owner] * 1_000_000 if created_ms is not None else None
    if start is not None and start.any():
        columns["start_time_unix_nano"] = pa.array(start)
        columns["start_timestamp"] = pa.array(start // 1000, UTC_US, mask=start <= 0)
    exemplar_count = 0
    if series is not None:
        exemplars, exemplar_count = _exemplars(series, owner, counts, named, n, symbols)
        if exemplar_count:
            columns["exemplars"] = exemplars
    arrays = list(columns.values())
    result = pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)
    return Written(
        DecodeResult(result, n, rejected, errors, all_null(arrays, n)), n, exemplar_count
    )


def _with_histograms(
    written: Written,
    body_bytes: int,
    series: pa.StructArray,
    table: pa.Table,
    rows: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    created_ms: np.ndarray[Any, Any],
    symbols: pa.Array | None,
) -> Written:
    """``written`` and the request's native histograms (shoal/promwrite/histograms.py):
    their rows after the float samples', the series' exemplars on its last histogram
    when it has no float sample."""
    found = histograms.decode(
        series.field("histograms"), named, created_ms, histograms.budget(body_bytes)
    )
    n = len(found.owner)
    gathered = gather(table, rows[found.owner])
    columns: dict[str, pa.Array | pa.ChunkedArray] = dict(_constants(n))
    columns.update(zip(gathered.column_names, gathered.columns, strict=True))
    columns.update(found.columns)
    only = np.bincount(found.owner, minlength=len(series)) * (
        _lengths(series.field("samples")) == 0
    )
    exemplars, exemplar_count = _exemplars(series, found.owner, only, named, n, symbols)
    if exemplar_count:
        columns["exemplars"] = exemplars
    arrays = list(columns.values())
    before = written.result
    table = pa.concat_tables([before.table, pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)])
    mine = all_null(arrays, n)
    result = DecodeResult(
        table.combine_chunks(),
        before.accepted + n,
        before.rejected + found.rejected,
        before.errors + found.errors,
        None
        if before.all_null is None
        else tuple(a and b for a, b in zip(before.all_null, mine, strict=True)),
    )
    return Written(result, written.samples, written.exemplars + exemplar_count, n)


def _exemplars(
    series: pa.StructArray,
    owner: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    n: int,
    symbols: pa.Array | None,
) -> tuple[pa.Array, int]:
    """The exemplars column: a series' exemplars on its last sample of the request."""
    if not _has_entries(series.field("exemplars")):
        return _constants(n)["exemplars"], 0
    lengths = _lengths(series.field("exemplars"))
    with_any = np.flatnonzero((lengths > 0) & named & (counts > 0))
    if not len(with_any):
        return _constants(n)["exemplars"], 0
    rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    last_row = {int(s): int(r) for r, s in enumerate(owner)}  # the last row of each series
    total = 0
    for s in with_any:
        items = series[int(s)].as_py()["exemplars"]
        out = []
        for ex in items:
            labels = _exemplar_labels(ex, symbols)
            out.append(
                {
                    "time_unix_nano": ex["timestamp"] * 1_000_000,
                    "value": ex["value"],
                    "value_int": None,
                    "trace_id": labels.get("trace_id"),
                    "span_id": labels.get("span_id"),
                    "filtered_attributes": [
                        (k, v)
                        for k, v in sorted(labels.items())
                        if k not in ("trace_id", "span_id")
                    ],
                    "filtered_attributes_types": [],
                }
            )
        rows[last_row[int(s)]] = out
        total += len(out)
    return pa.array(rows, _EXEMPLARS), total


def _exemplar_labels(ex: dict[str, Any], symbols: pa.Array | None) -> dict[str, str]:
    if symbols is None:
        return {lb["name"]: lb["value"] for lb in ex["labels"] if lb["value"]}
    refs = ex["labels_refs"]
    if len(refs) % 2 or any(r >= len(symbols) for r in refs):
        raise DecodeError("an exemplar's labels_refs are odd or beyond the symbols table")
    texts = [symbols[r].as_py() for r in refs]
    return {texts[i]: texts[i + 1] for i in range(0, len(texts), 2) if texts[i + 1]}
