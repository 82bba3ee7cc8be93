"""Seeded, realistic OTLP exports of metrics, logs and spans for the differential suite.

Every record is placed in time relative to ``t0`` (the moment the data is made), at
offsets that keep clear of the relative bounds the queries use
(:data:`RELATIVE_MINUTES`): for ten minutes after ``t0`` a bound like
``now() - INTERVAL '90 minutes'`` never passes over a record, so shoal and DuckDB,
evaluating ``now()`` a few seconds apart, see the same rows.

Each record goes to one of several *parts*: the first ones are flushed to Parquet (one
Delta version each), the last stays in the WAL snapshot; the snapshot part holds mostly
recent records and a few old ones, so hours exist that are split across both.
"""

from __future__ import annotations

import dataclasses
import random

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

RELATIVE_MINUTES = (30, 90, 150, 270)
"""The ``now() - INTERVAL 'N minutes'`` bounds the templates use."""
CLEAR_S = 600
"""Seconds after ``t0`` during which no relative bound meets a record."""
SPAN_S = 6 * 3600
"""Records lie within this many seconds before ``t0``."""

SERVICES = ("checkout", "cart", "search")
HOSTS = ("h1", "h2", "h3", "h4")
ROUTES = ("/a", "/b", "/cart/add", "/search")
ROOMS = ("lab", "office", "hall")
SEVERITIES = ((9, "INFO"), (13, "WARN"), (17, "ERROR"), (5, "DEBUG"))


@dataclasses.dataclass
class Parts:
    """OTLP export bodies per part (index 0 .. n-1) and signal."""

    bodies: list[dict[str, list[bytes]]]


def _offset_s(rng: random.Random, recent: bool) -> float:
    """Seconds before t0, never within CLEAR_S before a relative bound."""
    while True:
        d = rng.uniform(1.0, 80 * 60 if recent else SPAN_S)
        if not any(n * 60 - CLEAR_S - 1 <= d <= n * 60 + 1 for n in RELATIVE_MINUTES):
            return d


def _attrs(target: object, items: dict[str, object]) -> None:
    for key, value in items.items():
        kv: KeyValue = target.add()  # type: ignore[attr-defined]
        kv.key = key
        if isinstance(value, bool):
            kv.value.bool_value = value
        elif isinstance(value, int):
            kv.value.int_value = value
        elif isinstance(value, float):
            kv.value.double_value = value
        else:
            kv.value.string_value = str(value)


def _resource(resource: Resource, service: str, host: str) -> None:
    _attrs(
        resource.attributes,
        {
            "service.name": service,
            "host.name": host,
            "deployment.environment": "prod" if host != "h4" else "staging",
        },
    )


class _Clock:
    def __init__(self, t0_ns: int, rng: random.Random) -> None:
        self.t0_ns = t0_ns
        self.rng = rng
        self.used: set[tuple[object, int]] = set()

    def at(self, key: object, recent: bool) -> int:
        """A timestamp (ns) unique for ``key`` (a series), clear of the relative bounds."""
        while True:
            ns = self.t0_ns - int(_offset_s(self.rng, recent) * 1e9)
            ns -= ns % 1000  # whole microseconds: the SQL timestamp keeps microseconds
            if (key, ns) not in self.used:
                self.used.add((key, ns))
                return ns


def generate(t0_ns: int, seed: int, parts: int = 4, scale: int = 1) -> Parts:
    """Exports of every signal for ``parts`` parts; ``scale`` multiplies the volume."""
    rng = random.Random(seed)
    clock = _Clock(t0_ns, rng)
    out = Parts([{"metrics": [], "logs": [], "spans": []} for _ in range(parts)])

    def part_of() -> tuple[int, bool]:
        last = parts == 1 or rng.random() < 0.35
        if last:
            return parts - 1, rng.random() < 0.85  # mostly recent, some old hours
        return rng.randrange(parts - 1), False

    for _ in range(6 * scale):
        for service in SERVICES:
            for host in HOSTS:
                for signal, build in (("metrics", _metrics), ("logs", _logs), ("spans", _spans)):
                    part, recent = part_of()
                    request = build(rng, clock, service, host, recent, f"part-{part}")
                    out.bodies[part][signal].append(request.SerializeToString())
    return out


def _metrics(
    rng: random.Random, clock: _Clock, service: str, host: str, recent: bool, scope: str
) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    _resource(rm.resource, service, host)
    sm = rm.scope_metrics.add()
    sm.scope.name = scope  # which part: queries can read only flushed or only snapshot rows
    cpu = sm.metrics.add(name="cpu.usage", unit="1", description="busy share")
    for c in ("0", "1"):
        for state in ("user", "system", "idle"):
            key = (service, host, "cpu", c, state)
            point = cpu.gauge.data_points.add(
                time_unix_nano=clock.at(key, recent), as_double=round(rng.random(), 4)
            )
            _attrs(point.attributes, {"cpu": c, "state": state})
    temp = sm.metrics.add(name="room.temperature", unit="Cel")
    for _ in range(3):
        room = rng.choice(ROOMS)
        point = temp.gauge.data_points.add(
            time_unix_nano=clock.at((service, host, "temp", room), recent),
            as_double=round(rng.gauss(21, 3), 2),
        )
        if rng.random() < 0.8:  # some points lack the key: lookups give NULL
            _attrs(point.attributes, {"room": room})
    requests = sm.metrics.add(name="http.server.requests", unit="{request}")
    requests.sum.is_monotonic = True
    requests.sum.aggregation_temporality = 2
    for _ in range(4):
        method = rng.choice(("GET", "POST"))
        route = rng.choice(ROUTES)
        status = rng.choice((200, 200, 200, 404, 500))
        point = requests.sum.data_points.add(
            time_unix_nano=clock.at((service, host, "req", method, route, status), recent),
            start_time_unix_nano=clock.t0_ns - SPAN_S * 10**9 - 10**9,
            as_int=rng.randrange(0, 5000),
        )
        _attrs(point.attributes, {"http.method": method, "http.route": route, "status": status})
    latency = sm.metrics.add(name="http.server.duration", unit="ms")
    latency.histogram.aggregation_temporality = 1
    for _ in range(2):
        route = rng.choice(ROUTES)
        counts = [rng.randrange(0, 20) for _ in range(5)]
        point = latency.histogram.data_points.add(
            time_unix_nano=clock.at((service, host, "lat", route), recent),
            count=sum(counts),
            sum=float(sum(c * (i * 20 + 5) for i, c in enumerate(counts))),
            explicit_bounds=[10.0, 25.0, 50.0, 100.0],
            bucket_counts=counts,
        )
        _attrs(point.attributes, {"http.route": route})
    return request


_BODIES = (
    "GET {route} took {ms} ms",
    "user {user} logged in",
    "payment failed for order {order}",
    "cache miss on {route}",
    "retrying request {order} (attempt {n})",
)


def _logs(
    rng: random.Random, clock: _Clock, service: str, host: str, recent: bool, scope: str
) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    rl = request.resource_logs.add()
    _resource(rl.resource, service, host)
    sl = rl.scope_logs.add()
    sl.scope.name = scope  # which part: queries can read only flushed or only snapshot rows
    for _ in range(6):
        number, text = rng.choice(SEVERITIES)
        record = sl.log_records.add(
            time_unix_nano=clock.at((service, host, "log", rng.random()), recent),
            severity_number=number,  # type: ignore[arg-type]
            severity_text=text,
        )
        route = rng.choice(ROUTES)
        record.body.string_value = rng.choice(_BODIES).format(
            route=route,
            ms=rng.randrange(1, 900),
            user=rng.randrange(1, 50),
            order=rng.randrange(1000, 1100),
            n=rng.randrange(1, 4),
        )
        items: dict[str, object] = {"http.route": route}
        if rng.random() < 0.5:
            items["user.id"] = rng.randrange(1, 50)
        _attrs(record.attributes, items)
        if rng.random() < 0.6:  # many logs belong to a trace the spans also have
            record.trace_id = _trace_id(rng)
    return request


def _trace_id(rng: random.Random) -> bytes:
    """One of a small pool of trace ids, shared by logs and spans."""
    return rng.randrange(1, 40).to_bytes(16, "big")


def _spans(
    rng: random.Random, clock: _Clock, service: str, host: str, recent: bool, scope: str
) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    _resource(rs.resource, service, host)
    ss = rs.scope_spans.add()
    ss.scope.name = scope  # which part: queries can read only flushed or only snapshot rows
    for _ in range(2):
        trace = _trace_id(rng)
        start = clock.at((service, host, "trace", rng.random()), recent)
        route = rng.choice(ROUTES)
        root_id = rng.getrandbits(64).to_bytes(8, "big")
        duration = rng.randrange(1, 900) * 10**6
        root = ss.spans.add(
            trace_id=trace,
            span_id=root_id,
            name=f"GET {route}",
            kind=2,  # type: ignore[arg-type]
            start_time_unix_nano=start,
            end_time_unix_nano=start + duration,
        )
        root.status.code = 2 if rng.random() < 0.15 else 1  # type: ignore[assignment]
        _attrs(root.attributes, {"http.route": route, "http.status_code": 200})
        for i in range(rng.randrange(1, 4)):
            child_start = start + i * 1000 + 1000
            child = ss.spans.add(
                trace_id=trace,
                span_id=rng.getrandbits(64).to_bytes(8, "big"),
                parent_span_id=root_id,
                name=rng.choice(("db.query", "cache.get", "http.call")),
                kind=rng.choice((1, 3)),  # type: ignore[arg-type]
                start_time_unix_nano=child_start,
                end_time_unix_nano=child_start + rng.randrange(1, duration // 10**6 + 1) * 10**5,
            )
            if rng.random() < 0.7:
                _attrs(child.attributes, {"db.system": rng.choice(("postgresql", "redis"))})
    return request
