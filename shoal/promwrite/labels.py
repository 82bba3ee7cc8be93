"""A remote-write request's series as Arrow and NumPy: labels, metadata, samples.

1.0 and 2.0 carry the same things differently: 1.0 labels as name/value strings with
metadata in requests of their own, 2.0 labels as references into a symbol table with
metadata on each series. :func:`v1_labels` and :func:`v2_labels` bring both to one
:class:`Labels` shape, per series; :class:`Samples` holds every sample of a request.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import DecodeError
from shoal.promwrite import proto

RAW_KEY = b"\xfc"
"""First byte of the keys made from a 1.0 series' label bytes: a byte UTF-8 never holds,
so no key made from decoded labels (which start with a label name) is one of them."""
SPECIAL = ("__name__", "job", "instance")
"""The labels that are not point attributes: the name, and the resource's two."""
_FAMILY_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created", "_info")


@dataclasses.dataclass
class Samples:
    """Every sample of a request: per series its count; per sample its series, value and
    time (milliseconds)."""

    counts: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    t_ms: np.ndarray[Any, Any]
    owner: np.ndarray[Any, Any] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.owner = owners_of(self.counts)

    @classmethod
    def of(cls, series: pa.StructArray) -> Samples:
        """The samples of decoded series, copied (a view would keep the request's
        decoded buffers alive while its rows wait for their flush)."""
        samples = series.field("samples")
        flat = samples.flatten()
        return cls(
            lengths(samples),
            flat.field("value").to_numpy(zero_copy_only=False).copy(),
            flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64),
        )


def raw_keys(labels: pa.ListArray, n: int) -> pa.Array:
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
    out: pa.Array = pc.binary_join_element_wise(RAW_KEY, together, ends, b"")
    return out


@dataclasses.dataclass
class Labels:
    """Every label of every series, flattened: the series it belongs to, name, value."""

    owner: np.ndarray[Any, Any]
    names: pa.Array
    values: pa.Array

    @functools.cached_property
    def named(self) -> tuple[np.ndarray[Any, Any], list[str | None]]:
        """Per label, the number of its name among the distinct names; those names."""
        encoded = pc.dictionary_encode(self.names, null_encoding="encode")
        return encoded.indices.to_numpy().astype(np.int64), encoded.dictionary.to_pylist()

    def called(self, names: tuple[str, ...]) -> np.ndarray[Any, Any]:
        """Per label, whether its name is one of ``names``."""
        codes, distinct_names = self.named
        wanted = np.fromiter((name in names for name in distinct_names), np.bool_)
        chosen: np.ndarray[Any, Any] = wanted[codes]
        return chosen

    @functools.cached_property
    def with_value(self) -> np.ndarray[Any, Any]:
        """Per label, whether it has a value (not empty)."""
        values = self.values
        if values.null_count or not pa.types.is_string(values.type):
            return np.asarray(pc.fill_null(pc.not_equal(values, ""), False), dtype=np.bool_)
        ends = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4)
        return np.diff(ends) > 0

    def subset(self, positions: np.ndarray[Any, Any], n: int) -> Labels:
        """The labels of the series at ``positions`` (ascending), renumbered from 0."""
        if len(positions) == n:
            return self
        renumber = np.full(n, -1, dtype=np.int64)
        renumber[positions] = np.arange(len(positions))
        owner = renumber[self.owner]
        keep = owner >= 0
        mask = pa.array(keep)
        return Labels(owner[keep], self.names.filter(mask), self.values.filter(mask))


def series_keys(labels: Labels, n: int, extra: list[pa.Array] | None) -> pa.Array:
    """Per series, its label set (and ``extra`` columns) as one byte string.

    The separators are bytes UTF-8 never holds, and the decoder refuses invalid UTF-8,
    so two different label sets never share a key."""
    pairs = pc.binary_join_element_wise(
        labels.names.cast(pa.binary()), labels.values.cast(pa.binary()), b"\xff"
    )
    per_series = pa.ListArray.from_arrays(pa.array(offsets(labels.owner, n)), pairs)
    keys = pc.binary_join(per_series, b"\xfe")
    if extra:
        keys = pc.binary_join_element_wise(keys, *[e.cast(pa.binary()) for e in extra], b"\xfd")
    out: pa.Array = keys
    return out


def offsets(owner: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    """List offsets for entries sorted by series (``owner`` ascending)."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return offsets


def v1_labels(series: pa.StructArray) -> Labels:
    labels = series.field("labels")
    flat = labels.flatten()
    return Labels(owners(labels), flat.field("name"), flat.field("value"))


def v1_metadata(batch: pa.RecordBatch) -> dict[str, Meta]:
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
class V2Meta:
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


def v2_labels(
    batch: pa.RecordBatch, series: pa.StructArray
) -> tuple[Labels, V2Meta, np.ndarray[Any, Any]]:
    symbols = batch.column("symbols")[0].values
    if len(series) and (len(symbols) == 0 or symbols[0].as_py() != ""):
        raise DecodeError("the symbols table must start with the empty string")
    refs = series.field("labels_refs")
    if (
        len(series)
        and pc.any(pc.not_equal(pc.bit_wise_and(pc.list_value_length(refs), 1), 0)).as_py()
    ):
        raise DecodeError("a series' labels_refs has an odd length")
    flat = symbols_of(symbols, refs.flatten())
    owner = owners(refs)[0::2]
    found = Labels(owner, flat.take(pa.array(np.arange(0, len(flat), 2))),
                    flat.take(pa.array(np.arange(1, len(flat), 2))))  # fmt: skip
    meta = series.field("metadata")
    v2_meta = V2Meta(
        meta.field("type"),
        symbols_of(symbols, meta.field("help_ref")),
        symbols_of(symbols, meta.field("unit_ref")),
    )
    created = series.field("created_timestamp").to_numpy(zero_copy_only=False)
    return found, v2_meta, np.asarray(created, dtype=np.int64)


def symbols_of(symbols: pa.Array, refs: pa.Array) -> pa.Array:
    if len(refs) and pc.max(refs).as_py() >= len(symbols):
        raise DecodeError("a symbol reference is beyond the symbols table")
    return symbols.take(refs)


def has_entries(lists: pa.ListArray) -> bool:
    """Whether any list holds an entry (counted off its values: reading the offsets of
    a list array with nulls, as ptars leaves absent fields, costs ten times more)."""
    return len(lists.flatten()) > 0


def lengths(lists: pa.ListArray) -> np.ndarray[Any, Any]:
    """Entries per list (none in a null list), read off the offsets."""
    return np.diff(np.asarray(lists.offsets)).astype(np.int64)


def owners(lists: pa.ListArray) -> np.ndarray[Any, Any]:
    """Per entry of the lists, the list it is in."""
    return owners_of(lengths(lists))


def owners_of(counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per entry, the list it is in, from each list's count of entries."""
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def names_of(labels: Labels, n: int) -> pa.Array:
    """Each series' ``__name__`` (null when it has none); checks the label sets too."""
    codes, distinct_names = labels.named
    if "" in distinct_names:
        raise DecodeError("a label has an empty name")
    pairs = np.sort(labels.owner * len(distinct_names) + codes)
    if (pairs[1:] == pairs[:-1]).any():
        raise DecodeError("a label name appears twice in one series")
    return pick(labels, "__name__", n)


def pick(labels: Labels, name: str, n: int) -> pa.Array:
    """Per series, the value of label ``name`` (null where absent or empty); a series has
    each label name once at most (:func:`names_of` checks)."""
    mask = labels.called((name,)) & labels.with_value
    where = np.full(n, -1, dtype=np.int64)
    where[labels.owner[mask]] = np.flatnonzero(mask)
    found: pa.Array = labels.values.take(pa.array(where, mask=where < 0))
    return found


@dataclasses.dataclass(frozen=True)
class Meta:
    kind: str = "unknown"
    family: str = ""
    help: str = ""
    unit: str = ""


def family_meta(name: str, metadata: dict[str, Meta]) -> Meta:
    """1.0 sends metadata per family: ``foo`` for ``foo_bucket``, ``foo_total`` or ``foo``."""
    for suffix in _FAMILY_SUFFIXES:
        if suffix and not name.endswith(suffix):
            continue
        found = metadata.get(name[: len(name) - len(suffix)] if suffix else name)
        if found is not None:
            return found
    return Meta()
