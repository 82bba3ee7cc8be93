"""A seeded corpus of traces of varied shapes, as OTLP requests and as oracle spans."""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from .helpers import T0, kv
from .oracle import OSpan, Trace, Typed

SERVICES = ["frontend", "cart", "checkout", "payment", "db-proxy", "auth"]
REGIONS = ["eu-west", "us-east", "ap-south"]
METHODS = ["GET", "POST", "DELETE"]
NAMES = ["GET /cart", "POST /pay", "SELECT", "auth.check", "render", "queue.push"]


def _typed(value: object) -> Typed:
    if isinstance(value, list):
        return ("array", [_typed(v) for v in value])
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    return ("string", value)


def _all_typed(attrs: dict[str, object]) -> dict[str, Typed]:
    return {k: _typed(v) for k, v in attrs.items()}


def _kvs(attrs: dict[str, object]) -> list[KeyValue]:
    return [kv(k, v) for k, v in attrs.items()]


def corpus(
    n_traces: int, seed: int = 7, batches: int = 3
) -> tuple[list[ExportTraceServiceRequest], dict[str, Trace]]:
    """``batches`` requests (each trace's spans spread over them) and the oracle's traces."""
    rng = random.Random(seed)
    requests = [ExportTraceServiceRequest() for _ in range(batches)]
    traces: dict[str, Trace] = {}
    for t in range(n_traces):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        if t % 97 == 0:
            trace_id = bytes(8) + trace_id[8:]  # leading zeros in the id
        start0 = T0 + rng.randrange(0, 3_000) * 1_000_000_000 + rng.randrange(10**9)
        spans: list[OSpan] = []
        depth = rng.choice([1, 2, 3, 4])
        frontier: list[tuple[bytes | None, int, int]] = [(None, start0, 0)]
        count = 0
        while frontier and count < 25:
            parent, pstart, level = frontier.pop(0)
            fanout = 1 if parent is None else rng.choice([1, 1, 2, 3])
            for _ in range(fanout):
                count += 1
                span_id = rng.getrandbits(64).to_bytes(8, "big") or b"\x01" * 8
                start = pstart + rng.randrange(0, 50_000_000)
                end = start + rng.choice([1_000, 2_000_000, 40_000_000, 300_000_000, 2 * 10**9])
                service = rng.choice(SERVICES)
                resource: dict[str, object] = {"service.name": service}
                if rng.random() < 0.8:
                    resource["region"] = rng.choice(REGIONS)
                attrs: dict[str, object] = {}
                if rng.random() < 0.7:
                    attrs["http.method"] = rng.choice(METHODS)
                if rng.random() < 0.6:
                    attrs["http.status_code"] = rng.choice([200, 201, 404, 500, 503])
                if rng.random() < 0.3:
                    attrs["ratio"] = rng.choice([0.5, 1.25, 2.0, -3.5])
                if rng.random() < 0.3:
                    attrs["cached"] = rng.random() < 0.5
                if rng.random() < 0.15:
                    attrs["region"] = "span-" + rng.choice(REGIONS)  # shadows the resource's
                if rng.random() < 0.1:
                    attrs["http.status_code_text"] = str(rng.choice([200, 500]))
                if rng.random() < 0.1:  # arrays: strings, numbers, mixed, empty
                    attrs["tags"] = rng.sample(["red", "blue", "green", 7, 2.5], rng.randrange(4))
                kind = rng.choice([1, 2, 2, 3, 3, 4, 5])
                status = rng.choice([0, 0, 0, 1, 2])
                message = "boom" if status == 2 and rng.random() < 0.5 else ""
                events = []
                if rng.random() < 0.2:
                    ev_attrs = {"exception.message": rng.choice(["timeout", "refused", "oops"])}
                    if rng.random() < 0.5:
                        ev_attrs["attempt"] = rng.choice([1, 2, 3])  # type: ignore[assignment]
                    events.append(("exception", start + 1000, ev_attrs))
                if rng.random() < 0.1:
                    events.append(("retry", start + 2000, {}))
                links = []
                if rng.random() < 0.1:
                    other = rng.getrandbits(128).to_bytes(16, "big")
                    links.append((other, b"\x02" * 8, {"link.kind": rng.choice(["a", "follows"])}))
                name = rng.choice(NAMES)
                scope = rng.choice(["http", "grpc", ""])
                drop_root = parent is None and t % 11 == 0  # root never arrives
                if not drop_root:
                    request = requests[rng.randrange(batches)]
                    rs = request.resource_spans.add()
                    rs.resource.attributes.extend(_kvs(resource))
                    ss = rs.scope_spans.add()
                    ss.scope.name = scope
                    span = ss.spans.add(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent or b"",
                        name=name,
                        kind=kind,  # type: ignore[arg-type]
                        start_time_unix_nano=start,
                        end_time_unix_nano=end,
                    )
                    span.attributes.extend(_kvs(attrs))
                    span.status.code = status  # type: ignore[assignment]
                    span.status.message = message
                    for ev_name, ev_time, ev_attrs in events:
                        span.events.add(name=ev_name, time_unix_nano=ev_time).attributes.extend(
                            _kvs(ev_attrs)
                        )
                    for l_trace, l_span, l_attrs in links:
                        span.links.add(trace_id=l_trace, span_id=l_span).attributes.extend(
                            _kvs(l_attrs)
                        )
                    spans.append(
                        OSpan(
                            trace=trace_id.hex(),
                            span_id=span_id.hex(),
                            parent=parent.hex() if parent else None,
                            name=name,
                            service=service,
                            kind=kind,
                            status=status,
                            message=message,
                            start=start,
                            end=end,
                            attrs={k: _typed(v) for k, v in attrs.items()},
                            resource={k: _typed(v) for k, v in resource.items()},
                            scope_name=scope,
                            events=[
                                (n, ti, {k: _typed(v) for k, v in a.items()}) for n, ti, a in events
                            ],
                            links=[
                                (lt.hex(), ls.hex(), {k: _typed(v) for k, v in a.items()})
                                for lt, ls, a in links
                            ],
                        )
                    )
                if level + 1 < depth:
                    frontier.append((span_id, start, level + 1))
        if spans:
            traces[trace_id.hex()] = Trace(spans)
    return requests, traces
