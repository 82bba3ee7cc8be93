"""Traces benchmark: Tempo's API over a day of spans.

``python -m loadtest.bench_traces`` (``make bench-traces``) starts ``shoal serve`` on
loopback ports and sends it, by OTLP/HTTP in time order, ``--traces`` traces (20 spans
each on average: a gateway's request fanning out to services, their databases and
queues) over the last ``--hours`` hours across ``--services`` services; flushes happen as
they do in service, and the newest spans are still unflushed when the timing starts.
Then it times, each figure the median (and p99 where said) over HTTP, JSON or protobuf
decoding included:

* trace by id (``/api/v2/traces/<id>``, protobuf) for ``--lookups`` random trace ids;
* ten TraceQL searches of the kinds Grafana's editor builds, over the last hour and the
  last 24 hours (``limit=20``, ``spss=3``);
* tag names and tag values for the editor's autocomplete;

and the server's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from loadtest.ingest import ServerProcess

SEARCHES = {
    "service": '{ resource.service.name = "svc-3" }',
    "service + name": '{ resource.service.name = "svc-3" && name = "GET /api/7" }',
    "errors": "{ status = error }",
    "slow spans": "{ duration > 500ms }",
    "5xx": "{ span.http.status_code >= 500 }",
    "three filters": '{ resource.service.name = "svc-1" && span.http.method = "POST" '
    "&& duration > 100ms }",
    "route regex": '{ span.http.route =~ "/api/1.*" }',
    "slow traces": "{ traceDuration > 1s && kind = server }",
    "errors by service": "{ status = error } | by(resource.service.name) | count() > 1",
    "structural": '{ resource.service.name = "svc-0" } >> { status = error }',
}
METHODS = ("GET", "POST", "PUT", "DELETE")


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


class Generator:
    """Traces of a gateway request: the gateway's server span, then calls to 3-5
    services (a client span and the service's server span each), each of which queries
    a database (1-3 client spans) and sometimes publishes to a queue (producer and
    consumer)."""

    def __init__(self, services: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.services = [f"svc-{i}" for i in range(services)]
        self.resources = {
            name: ResourceSpans().resource.__class__(
                attributes=[
                    _kv("service.name", name),
                    _kv("service.namespace", "bench"),
                    _kv("host.name", f"host-{i % 5}"),
                ]
            )
            for i, name in enumerate(self.services)
        }

    def trace(self, start_ns: int) -> list[tuple[str, Span]]:
        rng = self.rng
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        out: list[tuple[str, Span]] = []

        def span(
            service: str,
            parent: bytes,
            name: str,
            kind: int,
            start: int,
            took: int,
            **attrs: object,
        ) -> bytes:
            span_id = rng.getrandbits(64).to_bytes(8, "big")
            s = Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                start_time_unix_nano=start,
                end_time_unix_nano=start + took,
                attributes=[_kv(k, v) for k, v in attrs.items()],
            )
            if attrs.get("http.status_code", 200) >= 500:  # type: ignore[operator]
                s.status.code = 2  # type: ignore[assignment]
                s.status.message = "internal error"
                s.events.add(name="exception", time_unix_nano=start + took // 2).attributes.append(
                    _kv("exception.message", "upstream failed")
                )
            out.append((service, s))
            return span_id

        route = rng.randrange(20)
        total = int(rng.lognormvariate(18.4, 0.8))  # ~100 ms median, a long tail
        failed = rng.random() < 0.03
        root = span(
            "svc-0",
            b"",
            f"{rng.choice(METHODS)} /api/{route}",
            2,
            start_ns,
            total,
            **{
                "http.method": rng.choice(METHODS),
                "http.route": f"/api/{route}",
                "http.status_code": 500 if failed else 200,
            },
        )
        at = start_ns + total // 20
        for _ in range(rng.randint(3, 5)):
            service = rng.choice(self.services[1:])
            took = max(total // 4, 1000)
            method = rng.choice(METHODS)
            status = 503 if failed and rng.random() < 0.5 else 200
            client = span(
                "svc-0",
                root,
                f"{method} {service}",
                3,
                at,
                took,
                **{"http.method": method, "http.status_code": status},
            )
            server = span(
                service,
                client,
                f"{method} /api/{route}",
                2,
                at + 100_000,
                took - 200_000,
                **{
                    "http.method": method,
                    "http.route": f"/api/{route}",
                    "http.status_code": status,
                },
            )
            db_at = at + 200_000
            for _ in range(rng.randint(1, 3)):
                db_took = max(took // 8, 1000)
                span(
                    service,
                    server,
                    "SELECT orders",
                    3,
                    db_at,
                    db_took,
                    **{"db.system": "postgresql", "db.statement": "SELECT * FROM orders"},
                )
                db_at += db_took
            if rng.random() < 0.3:
                producer = span(
                    service,
                    server,
                    "orders publish",
                    4,
                    db_at,
                    50_000,
                    **{"messaging.system": "kafka"},
                )
                span(
                    self.services[-1],  # the queue's consumer
                    producer,
                    "orders process",
                    5,
                    db_at + 100_000,
                    2_000_000,
                    **{"messaging.system": "kafka"},
                )
            at += took // 2
        return out

    def request(self, traces: list[list[tuple[str, Span]]]) -> bytes:
        request = ExportTraceServiceRequest()
        by_service: dict[str, list[Span]] = {}
        for spans in traces:
            for service, s in spans:
                by_service.setdefault(service, []).append(s)
        for service, spans in by_service.items():
            rs = request.resource_spans.add()
            rs.resource.CopyFrom(self.resources[service])
            ss = rs.scope_spans.add()
            ss.scope.name = "bench"
            ss.spans.extend(spans)
        return request.SerializeToString()


def _get(url: str, accept: str = "") -> tuple[int, bytes]:
    headers = {"Accept": accept} if accept else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/x-protobuf"}, method="POST"
    )
    for _ in range(100):
        try:
            with urllib.request.urlopen(request, timeout=120) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            if exc.code not in (429, 503):
                raise
            time.sleep(0.5)
    raise RuntimeError("the server kept refusing the load")


def _timed(call: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        out.append((time.perf_counter() - started) * 1000)
    return out


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--traces", type=int, default=100_000)
    p.add_argument("--services", type=int, default=20)
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--lookups", type=int, default=300)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--batch", type=int, default=200, help="traces per request")
    p.add_argument("--data-dir", type=Path, default=None, help="keep the data here")
    p.add_argument("--lookups-only", action="store_true", help="skip searches and tags")
    args = p.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="shoal-bench-traces-")
    data_dir = args.data_dir or Path(tmp.name) / "data"
    server = ServerProcess(data_dir, env={"SHOAL_LOG_LEVEL": "warning"})
    server.start()
    try:
        gen = Generator(args.services, seed=42)
        now = time.time_ns()
        first = now - int(args.hours * 3600 * 10**9)
        spread = random.Random(7)
        span_ns = int(args.hours * 3600 * 10**9)
        starts = sorted(first + spread.randrange(span_ns) for _ in range(args.traces))
        ids: list[str] = []
        spans = 0
        peak_rss = 0
        started = time.perf_counter()
        for i in range(0, len(starts), args.batch):
            traces = [gen.trace(t) for t in starts[i : i + args.batch]]
            spans += sum(len(t) for t in traces)
            ids.extend(t[0][1].trace_id.hex() for t in traces)
            _post(server.url + "/v1/traces", gen.request(traces))
            peak_rss = max(peak_rss, server.rss())
        load_s = time.perf_counter() - started
        print(f"sent {len(ids):,} traces, {spans:,} spans over {args.hours:g} h in {load_s:.0f} s")

        rng = random.Random(3)
        wanted = [rng.choice(ids) for _ in range(args.lookups)]
        lookups = []
        for trace_id in wanted:
            t0 = time.perf_counter()
            status, body = _get(f"{server.url}/api/v2/traces/{trace_id}", "application/protobuf")
            lookups.append((time.perf_counter() - t0) * 1000)
            assert status == 200 and body, (trace_id, status)
        peak_rss = max(peak_rss, server.rss())
        first, rest = lookups[0], lookups[1:]
        print()
        print(
            f"trace by id ({args.lookups} random ids, protobuf): first {first:.1f} ms "
            f"(reads the files' filters), then p50 {statistics.median(rest):.1f} ms, "
            f"p99 {_p99(rest):.1f} ms, max {max(rest):.1f} ms"
        )
        slowest = sorted(range(len(lookups)), key=lookups.__getitem__)[-5:]
        print("slowest:", ", ".join(f"#{i} {lookups[i]:.0f} ms" for i in slowest))
        if args.lookups_only:
            return 0

        end_s = now // 10**9 + 1
        rows = []
        for name, query in SEARCHES.items():
            figures = []
            for hours in (1, 24):
                window = {"start": end_s - hours * 3600, "end": end_s}
                params = urllib.parse.urlencode({"q": query, "limit": 20, "spss": 3, **window})
                url = f"{server.url}/api/search?{params}"
                found: list[int] = []

                def search(url: str = url, found: list[int] = found) -> None:
                    status, body = _get(url)
                    assert status == 200, body[:300]
                    found.append(len(json.loads(body)["traces"]))

                times = _timed(search, args.repeat)
                figures.append((statistics.median(times), found[-1]))
                peak_rss = max(peak_rss, server.rss())
            rows.append((name, figures))
        print()
        print(f"{'search':<20} {'1 h ms':>8} {'traces':>7} {'24 h ms':>9} {'traces':>7}")
        for name, ((m1, n1), (m24, n24)) in rows:
            print(f"{name:<20} {m1:>8.0f} {n1:>7} {m24:>9.0f} {n24:>7}")

        print()
        for label, path, params in (
            ("tag names (v2)", "/api/v2/search/tags", {}),
            ("service.name values", "/api/v2/search/tag/resource.service.name/values", {}),
            ("http.route values", "/api/v2/search/tag/span.http.route/values", {}),
            (
                "route values, q",
                "/api/v2/search/tag/span.http.route/values",
                {"q": '{ resource.service.name = "svc-2" }'},
            ),
        ):
            for hours in (1, 24):
                query = urllib.parse.urlencode(
                    {**params, "start": end_s - hours * 3600, "end": end_s}
                )
                url = f"{server.url}{path}?{query}"
                times = _timed(lambda url=url: _get(url), args.repeat)
                print(f"{label:<22} {hours:>2} h: {statistics.median(times):6.0f} ms")
        peak_rss = max(peak_rss, server.rss())
        print()
        print(f"server peak RSS {peak_rss / 2**20:.0f} MiB")
    finally:
        server.terminate()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
