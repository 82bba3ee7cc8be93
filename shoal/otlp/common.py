"""Resource and scope columns shared by all three signals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from shoal.errors import DecodeError
from shoal.otlp import attributes
from shoal.rows.cache import DecodeCache
from shoal.rows.columns import I64, U64, Broadcast, flatten, list_offsets, owned
from shoal.schema import ATTRS

T = TypeVar("T")

RESOURCE_COLUMNS = (
    "resource_attributes",
    "resource_attributes_types",
    "resource_dropped_attributes_count",
    "resource_schema_url",
)
"""The columns that carry a row's resource (``service_name`` is derived from them)."""
SCOPE_COLUMNS = (
    "scope_name",
    "scope_version",
    "scope_attributes",
    "scope_attributes_types",
    "scope_dropped_attributes_count",
    "scope_schema_url",
)
"""The columns that carry a row's instrumentation scope."""
RESOURCE_SCOPE_COLUMNS = ("service_name", *RESOURCE_COLUMNS, *SCOPE_COLUMNS)


@dataclasses.dataclass(frozen=True)
class Scopes:
    """Per instrumentation scope (all resources flattened): its children and columns."""

    items: pa.Array  # the scope-level structs (ScopeMetrics / ScopeLogs / ScopeSpans)
    columns: Broadcast
    resource_hash: U64
    key: _ScopesKey | None = None  # what the columns were decoded from, when cached

    def take(self, indices: I64) -> Mapping[str, pa.Array | pa.ChunkedArray]:
        """The resource and scope columns for rows belonging to the given scopes.

        A sender exports the same resources and scopes with the same number of rows
        under each, export after export (an SDK's periodic export of a fixed set of
        instruments does): the columns are kept, keyed by the scopes and the rows'
        scope numbers, and given again (arrays are immutable)."""
        if self.key is None:
            return self.columns.take(indices)
        key = (self.key, np.ascontiguousarray(indices, dtype=np.int64).tobytes())
        hit = _taken.get(key)
        if hit is None:
            hit = self.columns.take(indices)
            size = len(key[1]) + sum(int(c.nbytes) for c in hit.values())
            _taken.put(key, hit, _OVERHEAD * len(hit) + size)
        return hit


def text_or_null(strings: pa.Array) -> pa.Array:
    """OTLP proto3 strings have no presence: the empty string becomes null. Never a view
    of ``strings`` (see :func:`~shoal.rows.columns.owned`)."""
    if strings.type == pa.string() and strings.null_count == 0:
        n = len(strings)
        buffer = strings.buffers()[1]
        offsets = np.frombuffer(buffer, np.int32, n + 1, strings.offset * 4) if n else None
        if offsets is None or not (offsets[1:] == offsets[:-1]).any():
            return owned(strings)  # nothing empty: the common case, one copy
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


@dataclasses.dataclass(frozen=True)
class _Resource:
    service_name: str | None
    attributes: attributes.AttributeSet
    dropped: int


@dataclasses.dataclass(frozen=True)
class _Scope:
    name: str | None
    version: str | None
    attributes: attributes.AttributeSet
    dropped: int


_resources: DecodeCache[bytes, _Resource] = DecodeCache(max_bytes=16 << 20, max_entries=4096)
_scopes: DecodeCache[bytes, _Scope] = DecodeCache(max_bytes=16 << 20, max_entries=4096)
# per request: resource bytes, resource schema URLs, parent resource of each scope,
# scope bytes, scope schema URLs
_ScopesKey = tuple[
    tuple[bytes, ...], tuple[str, ...], tuple[int, ...], tuple[bytes, ...], tuple[str, ...]
]
_blocks: DecodeCache[_ScopesKey, tuple[Broadcast, U64]] = DecodeCache(
    max_bytes=32 << 20, max_entries=4096
)
_taken: DecodeCache[tuple[_ScopesKey, bytes], dict[str, pa.Array | pa.ChunkedArray]] = DecodeCache(
    max_bytes=32 << 20, max_entries=1024
)
_OVERHEAD = 500
"""Bytes of a cached resource or scope besides its serialized and decoded text."""


def _decoded(cache: DecodeCache[bytes, T], raw: bytes, what: str, build: Callable[[bytes], T]) -> T:
    """``build(raw)`` through ``cache``; a malformed message is a DecodeError naming ``what``."""
    hit = cache.get(raw)
    if hit is None:
        try:
            hit = build(raw)
        except (ProtoDecodeError, RuntimeError) as exc:
            raise DecodeError(f"{what}: malformed message: {exc}") from None
        cache.put(raw, hit, _OVERHEAD + 3 * len(raw))
    return hit


def _build_resource(raw: bytes) -> _Resource:
    msg = Resource.FromString(raw)
    attrs = attributes.decode_set(msg.attributes)
    return _Resource(attrs.first("service.name"), attrs, msg.dropped_attributes_count)


def _build_scope(raw: bytes) -> _Scope:
    msg = InstrumentationScope.FromString(raw)
    attrs = attributes.decode_set(msg.attributes)
    return _Scope(msg.name or None, msg.version or None, attrs, msg.dropped_attributes_count)


def _resource(raw: bytes) -> _Resource:
    return _decoded(_resources, raw, "resource", _build_resource)


def _scope(raw: bytes) -> _Scope:
    return _decoded(_scopes, raw, "instrumentation scope", _build_scope)


def _scope_columns(key: _ScopesKey) -> tuple[Broadcast, U64]:
    r_raw, r_schema, parent, s_raw, s_schema = key
    res = [_resource(raw) for raw in r_raw]
    rs = [res[i] for i in parent]
    sc = [_scope(raw) for raw in s_raw]
    columns = {
        "service_name": pa.array([r.service_name for r in rs], pa.string()),
        "resource_attributes": pa.array([r.attributes.entries for r in rs], ATTRS),
        "resource_attributes_types": pa.array([r.attributes.types for r in rs], ATTRS),
        "resource_dropped_attributes_count": pa.array([r.dropped for r in rs], pa.int64()),
        "resource_schema_url": pa.array([r_schema[i] or None for i in parent], pa.string()),
        "scope_name": pa.array([s.name for s in sc], pa.string()),
        "scope_version": pa.array([s.version for s in sc], pa.string()),
        "scope_attributes": pa.array([s.attributes.entries for s in sc], ATTRS),
        "scope_attributes_types": pa.array([s.attributes.types for s in sc], ATTRS),
        "scope_dropped_attributes_count": pa.array([s.dropped for s in sc], pa.int64()),
        "scope_schema_url": pa.array([url or None for url in s_schema], pa.string()),
    }
    hashes = np.array([r.attributes.set_hash for r in rs], dtype=np.uint64)
    return Broadcast(columns), hashes


def scopes(request: pa.StructArray, resource_field: str, scope_field: str) -> Scopes:
    """Flatten ``request.<resource_field>[*].<scope_field>[*]`` into per-scope columns.

    Resources and scopes arrive as serialized bytes (see :mod:`shoal.otlp.wire`);
    the per-scope columns of a request are cached by those bytes, since the
    same senders send the same resources and scopes again and again.
    """
    resources = request.field(resource_field).flatten()
    lists = resources.field(scope_field)
    items = lists.flatten()
    parent = tuple(np.repeat(np.arange(len(lists)), np.diff(list_offsets(lists))).tolist())
    key: _ScopesKey = (
        tuple(resources.field("resource").to_pylist()),
        tuple(resources.field("schema_url").to_pylist()),
        parent,
        tuple(items.field("scope").to_pylist()),
        tuple(items.field("schema_url").to_pylist()),
    )
    hit = _blocks.get(key)
    if hit is None:
        hit = _scope_columns(key)
        raw_bytes = sum(map(len, key[0])) + sum(map(len, key[3]))
        _blocks.put(key, hit, _OVERHEAD * len(key[2]) + raw_bytes + hit[0].nbytes)
    return Scopes(items, hit[0], hit[1], key)


def scoped_items(
    request: pa.StructArray, signal: str, items: str
) -> tuple[Scopes, pa.StructArray, I64]:
    """The scopes of ``request`` (``resource_<signal>[*].scope_<signal>[*]``), and their
    ``items`` (log records, spans, metrics) end to end, each with its scope's index."""
    sc = scopes(request, f"resource_{signal}", f"scope_{signal}")
    found, scope_idx = flatten(sc.items.field(items))
    return sc, found, scope_idx
