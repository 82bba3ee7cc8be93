"""Resource and scope columns shared by all three signals, and the decode result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.otlp import attributes
from shoal.otlp.columns import I64, U64, as_int64, flatten, u64

RESOURCE_SCOPE_COLUMNS = (
    "service_name",
    "resource_attributes",
    "resource_attributes_types",
    "resource_dropped_attributes_count",
    "resource_schema_url",
    "scope_name",
    "scope_version",
    "scope_attributes",
    "scope_attributes_types",
    "scope_dropped_attributes_count",
    "scope_schema_url",
)


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """What :func:`shoal.otlp.decode` returns.

    ``table`` has exactly the signal's frozen schema and one chunk per column
    (``to_batches()`` yields one batch, none when empty); ``accepted`` rows are in
    it; ``rejected`` points were dropped, and ``errors`` says why (one line per
    reason, with a count), for OTLP ``partial_success``.
    """

    table: pa.Table
    accepted: int
    rejected: int
    errors: list[str]


@dataclasses.dataclass(frozen=True)
class Scopes:
    """Per instrumentation scope (all resources flattened): its children and columns."""

    items: pa.Array  # the scope-level structs (ScopeMetrics / ScopeLogs / ScopeSpans)
    columns: pa.Table
    resource_hash: U64

    def take(self, indices: I64) -> dict[str, pa.ChunkedArray]:
        """The resource and scope columns for rows belonging to the given scopes."""
        rows = self.columns.take(pa.array(indices, type=pa.int64()))
        return dict(zip(rows.column_names, rows.columns, strict=True))


def text_or_null(strings: pa.Array) -> pa.Array:
    """OTLP proto3 strings have no presence: the empty string becomes null."""
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def scopes(request: pa.StructArray, resource_field: str, scope_field: str) -> Scopes:
    """Flatten ``request.<resource_field>[*].<scope_field>[*]`` into per-scope columns."""
    resources, _ = flatten(request.field(resource_field))
    resource = resources.field("resource")
    r_attrs = attributes.decode_lists(resource.field("attributes"), "resource attributes")
    r_dropped = as_int64(u64(resource.field("dropped_attributes_count")))
    service = pc.map_lookup(r_attrs.values, pa.scalar("service.name"), "first")
    r_schema = text_or_null(resources.field("schema_url"))

    items, parent = flatten(resources.field(scope_field))
    scope = items.field("scope")
    s_attrs = attributes.decode_lists(scope.field("attributes"), "scope attributes")
    idx = pa.array(parent, type=pa.int64())
    columns = {
        "service_name": service.take(idx),
        "resource_attributes": r_attrs.values.take(idx),
        "resource_attributes_types": r_attrs.types.take(idx),
        "resource_dropped_attributes_count": r_dropped.take(idx),
        "resource_schema_url": r_schema.take(idx),
        "scope_name": text_or_null(scope.field("name").fill_null("")),
        "scope_version": text_or_null(scope.field("version").fill_null("")),
        "scope_attributes": s_attrs.values,
        "scope_attributes_types": s_attrs.types,
        "scope_dropped_attributes_count": as_int64(u64(scope.field("dropped_attributes_count"))),
        "scope_schema_url": text_or_null(items.field("schema_url")),
    }
    resource_hash = r_attrs.set_hash[parent] if len(parent) else np.zeros(0, np.uint64)
    return Scopes(items, pa.table(columns), resource_hash)


class Rejections:
    """Counts rejected rows per reason and renders the partial-success messages."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.total = 0

    def add(self, reason: str, count: int, rejected: bool = True) -> None:
        if count <= 0:
            return
        self._counts[reason] = self._counts.get(reason, 0) + count
        if rejected:
            self.total += count

    def mask(self, reason: str, bad: np.ndarray, keep: np.ndarray) -> None:
        """Reject rows where ``bad`` holds and that are still kept; updates ``keep``."""
        newly = bad & keep
        count = int(newly.sum())
        if count:
            self.add(reason, count)
            keep &= ~newly

    def messages(self) -> list[str]:
        return [f"{reason} ({count})" for reason, count in self._counts.items()]
