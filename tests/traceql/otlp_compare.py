"""OTLP traces compared by content: each span with its resource and scope, in any grouping."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

Triple = tuple[bytes, bytes, bytes]


def _bytes(message: Any) -> bytes:
    return bytes(message.SerializeToString(deterministic=True))


def triples(resource_spans: Any) -> list[Triple]:
    """Each span as (resource + schema URL, scope + schema URL, span), sorted: the same
    list for the same spans, however they are grouped into resources and scopes."""
    out = []
    for rs in resource_spans:
        resource = Resource()
        resource.CopyFrom(rs.resource)
        r = _bytes(resource) + b"|" + rs.schema_url.encode()
        for ss in rs.scope_spans:
            scope = InstrumentationScope()
            scope.CopyFrom(ss.scope)
            s = _bytes(scope) + b"|" + ss.schema_url.encode()
            for span in ss.spans:
                copy = Span()
                copy.CopyFrom(span)
                if copy.status.code == 0 and not copy.status.message:
                    copy.ClearField("status")
                out.append((r, s, _bytes(copy)))
    return sorted(out)
