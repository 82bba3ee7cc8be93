"""Logs benchmark: Loki's API over a day of logs, and Loki push against OTLP.

``python -m loadtest.bench_logs`` (``make bench-logs``) starts ``shoal serve``, pushes
``--lines`` log lines (10 million) spread over the last ``--hours`` hours (24) from
``--services`` services (20), JSON and logfmt lines, each stream labelled with its
service, environment and level (as Promtail and Alloy pipelines often label them), a
rare token in a few lines of one service; restarts the server so that every line is
flushed to Parquet; then times, each the median of ``--repeat`` runs over HTTP:

* ``{service_name="svc-07"} |= "<rare token>"`` over the last hour and over the day, and
  over the day by a regular expression naming two services (``=~"svc-07|svc-17"``);
* a ``json`` parse with a label filter over the last hour;
* ``sum by (level) (count_over_time({service_name=~"svc-07|svc-17"} | json | __error__="" [1m]))``
  over the last six hours at a one-minute step (a panel of two services' entries);
* ``sum by (level) (count_over_time({service_name=~".+"}[1m]))`` over the day at a one
  minute step (the logs-volume query);
* ``/loki/api/v1/label/service_name/values`` over the day.

Then ingest: the same ``--ingest-lines`` records (1 million) sent as Loki push requests
and as OTLP/HTTP requests of ``--batch`` records each, by two connections, alternately;
records per second each, and push's over OTLP's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from loadtest import loki
from loadtest.ingest import ServerProcess
from loadtest.remote_write import field, varint

RARE = "ultraviolet-7f3a9c"
LEVELS = ("debug", "info", "info", "info", "warn", "error")
PATHS = ("/cart", "/checkout", "/login", "/search", "/items", "/api/v2/orders")
HOUR_NS = 3_600_000_000_000
VOLUME = 'sum by (level) (count_over_time({service_name=~".+"}[1m]))'
TWO_SERVICES = (
    'sum by (level) (count_over_time({service_name=~"svc-07|svc-17"} | json | __error__="" [1m]))'
)


def _line(rng: random.Random, i: int, json_body: bool, level: str, rare: bool) -> str:
    path = PATHS[rng.randrange(len(PATHS))]
    status = (200, 200, 200, 201, 404, 500)[rng.randrange(6)]
    tail = f" {RARE}" if rare else ""
    if json_body:
        return (f'{{"level":"{level}","msg":"handled {path}{tail}","status":{status},'
                f'"latency_ms":{rng.randint(1, 900)},"request_id":"{i:012x}"}}')  # fmt: skip
    return (f'level={level} msg="handled {path}{tail}" status={status} '
            f"duration={rng.randint(1, 900)}ms request_id={i:012x}")  # fmt: skip


def _entry(ns: int, line: str) -> bytes:
    stamp = b"\x08" + varint(ns // 1_000_000_000) + b"\x10" + varint(ns % 1_000_000_000)
    return field(2, field(1, stamp) + field(2, line.encode()))


def push_bodies(
    lines: int, services: int, start_ns: int, span_ns: int, batch: int, seed: int = 11
) -> Iterator[tuple[int, bytes]]:
    """Snappy push bodies of ``batch`` entries each, in time order: (entries, body)."""
    rng = random.Random(seed)
    step = span_ns / lines
    rare_every = max(lines // 10, 1)
    heads = {
        (s, level): field(
            1,
            loki.label_text(
                {"service_name": f"svc-{s:02d}", "env": "prod", "level": level}
            ).encode(),
        )
        for s in range(services)
        for level in set(LEVELS)
    }
    for first in range(0, lines, batch):
        streams: dict[tuple[int, str], list[bytes]] = {}
        count = min(batch, lines - first)
        for i in range(first, first + count):
            service = i % services
            level = LEVELS[(i // services) % len(LEVELS)]
            rare = i % rare_every == rare_every // 2
            if rare:
                service = 7 % services
            line = _line(rng, i, rng.random() < 0.5, level, rare)
            streams.setdefault((service, level), []).append(_entry(start_ns + int(i * step), line))
        raw = b"".join(field(1, heads[key] + b"".join(entries)) for key, entries in streams.items())
        yield count, loki.compress(raw)


def otlp_bodies(
    lines: int, services: int, start_ns: int, span_ns: int, batch: int, seed: int = 11
) -> Iterator[tuple[int, bytes]]:
    """The same records as :func:`push_bodies`, as ``ExportLogsServiceRequest`` bodies."""
    rng = random.Random(seed)
    step = span_ns / lines
    for first in range(0, lines, batch):
        request = ExportLogsServiceRequest()
        scopes = {}
        count = min(batch, lines - first)
        for i in range(first, first + count):
            service = i % services
            level = LEVELS[(i // services) % len(LEVELS)]
            scope = scopes.get((service, level))
            if scope is None:
                resource = request.resource_logs.add()
                resource.resource.attributes.extend([
                    KeyValue(key="service.name", value={"string_value": f"svc-{service:02d}"}),
                    KeyValue(key="deployment.environment", value={"string_value": "prod"}),
                ])  # fmt: skip
                scope = scopes[(service, level)] = resource.scope_logs.add()
            record = scope.log_records.add()
            record.time_unix_nano = start_ns + int(i * step)
            record.severity_text = level.upper()
            record.body.string_value = _line(rng, i, rng.random() < 0.5, level, False)
        yield count, request.SerializeToString()


def send_all(
    url: str, path: str, content_type: str, bodies: list[tuple[int, bytes]], workers: int
) -> float:
    """Send ``bodies`` over ``workers`` keep-alive connections; records per second."""
    parsed = urllib.parse.urlsplit(url)
    queue = list(bodies)
    lock = threading.Lock()
    failures: list[str] = []

    def work() -> None:
        connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
        while True:
            with lock:
                if not queue:
                    break
                _, body = queue.pop()
            connection.request("POST", path, body, {"Content-Type": content_type})
            response = connection.getresponse()
            response.read()
            if response.status not in (200, 204):
                failures.append(f"{path}: {response.status}")
        connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"ingest failed: {failures[:3]}")
    return sum(n for n, _ in bodies) / elapsed


def timed(call: Callable[[], object], repeat: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def get(url: str, path: str, params: dict[str, str]) -> dict[str, object]:
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
    connection.request("GET", f"{path}?{urllib.parse.urlencode(params)}")
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"{path} {params}: {response.status} {body[:300]!r}")
    answer: dict[str, object] = json.loads(body)
    return answer


def load(server: ServerProcess, args: argparse.Namespace, start: int, span: int) -> None:
    """Push the benchmark's lines, in time order, over one connection."""
    sent = 0
    started = time.perf_counter()
    parsed = urllib.parse.urlsplit(server.url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
    for count, body in push_bodies(args.lines, args.services, start, span, args.batch):
        connection.request(
            "POST", "/loki/api/v1/push", body, {"Content-Type": "application/x-protobuf"}
        )
        response = connection.getresponse()
        response.read()
        if response.status != 204:
            raise SystemExit(f"push failed: {response.status}")
        sent += count
    load_s = time.perf_counter() - started
    print(f"loaded {sent:,} lines over {args.hours:g} h in {load_s:.1f} s "
          f"({sent / load_s:,.0f} lines/s, one connection, bodies built on the way)")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--services", type=int, default=20)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--ingest-lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--reuse", action="store_true", help="query the lines a run left in --data-dir"
    )
    args = parser.parse_args(argv)
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-logs-")) / "data"
    data.parent.mkdir(parents=True, exist_ok=True)
    env = {"SHOAL_LOG_LEVEL": "warning", "SHOAL_PROMQL_MAX_SAMPLES": str(20_000_000)}
    span = int(args.hours * HOUR_NS)
    now = time.time_ns()
    start = now - span
    marker = data.parent / "bench-logs.json"
    if args.reuse:
        now = json.loads(marker.read_text())["end_ns"]
        start = now - span
    server = ServerProcess(data, env=env).start()
    try:
        if not args.reuse:
            load(server, args, start, span)
            marker.write_text(json.dumps({"end_ns": now}))
            assert server.terminate() == 0  # the final flush: every line in Parquet
            server = ServerProcess(data, env=env).start()
        hour = {"start": str(now - HOUR_NS), "end": str(now), "limit": "100"}
        day = {"start": str(start), "end": str(now), "limit": "100"}
        six_hours = {"start": str(now - 6 * HOUR_NS), "end": str(now)}
        # Grafana's query splitting and Loki's align_queries_with_step give whole minutes
        minute = 60_000_000_000
        whole_minutes = {"start": str(start // minute * minute), "end": str(now // minute * minute)}
        queries = [
            ("rare token, 1 h", "/loki/api/v1/query_range",
             {**hour, "query": f'{{service_name="svc-07"}} |= "{RARE}"'}),
            ("rare token, 24 h", "/loki/api/v1/query_range",
             {**day, "query": f'{{service_name="svc-07"}} |= "{RARE}"'}),
            ("rare token, 24 h, regex selector", "/loki/api/v1/query_range",
             {**day, "query": f'{{service_name=~"svc-07|svc-17"}} |= "{RARE}"'}),
            ("json, two services, 6 h at 1 m", "/loki/api/v1/query_range",
             {**six_hours, "step": "60", "query": TWO_SERVICES}),
            ("json + label filter, 1 h", "/loki/api/v1/query_range",
             {**hour, "query": '{service_name="svc-03"} | json | status >= 500'}),
            ("volume by level, 24 h at 1 m", "/loki/api/v1/query_range",
             {**whole_minutes, "step": "60", "query": VOLUME}),
            ("the same, unaligned start", "/loki/api/v1/query_range",
             {**day, "step": "60", "query": VOLUME}),
            ("label values, 24 h", "/loki/api/v1/label/service_name/values", day),
        ]  # fmt: skip
        print(f"\n{'query':<30} {'median':>10}  answer")
        for name, path, params in queries:
            seconds, answer = timed(
                lambda path=path, params=params: get(server.url, path, params), args.repeat
            )
            data_part = answer.get("data", answer) if isinstance(answer, dict) else answer
            print(f"{name:<30} {seconds * 1000:>8.1f} ms  {_summary(data_part)}")
        if not args.ingest_lines:
            return
    finally:
        server.kill()
    # ingest: the same records by Loki push and by OTLP, into a server of their own (the
    # day above keeps only pushed lines)
    server = ServerProcess(data.parent / "ingest", env=env).start()
    try:
        span_i = HOUR_NS
        pushes = list(push_bodies(args.ingest_lines, args.services, now - 2 * span_i, span_i,
                                  args.batch, 5))  # fmt: skip
        otlps = list(otlp_bodies(args.ingest_lines, args.services, now - span_i, span_i,
                                 args.batch, 5))  # fmt: skip
        rates: dict[str, list[float]] = {"push": [], "otlp": []}
        for round_ in range(2):
            order = ("push", "otlp") if round_ == 0 else ("otlp", "push")
            for kind in order:
                path = "/loki/api/v1/push" if kind == "push" else "/v1/logs"
                bodies = pushes if kind == "push" else otlps
                rates[kind].append(send_all(server.url, path, "application/x-protobuf", bodies, 2))
        push_rate, otlp_rate = statistics.median(rates["push"]), statistics.median(rates["otlp"])
        batch = f"{args.batch:,}"
        print(f"\ningest of {args.ingest_lines:,} records in requests of {batch}, 2 connections:")
        for label, kind, rate in (
            ("Loki push", "push", push_rate),
            ("OTLP/HTTP", "otlp", otlp_rate),
        ):
            runs = ", ".join(f"{r:,.0f}" for r in rates[kind])
            print(f"  {label:<10} {rate:>12,.0f} records/s  (runs: {runs})")
        print(f"  push / OTLP {push_rate / otlp_rate:.2f}x")
    finally:
        server.kill()


def _summary(data: object) -> str:
    if isinstance(data, list):
        return f"{len(data)} values"
    if isinstance(data, dict) and "result" in data:
        result = data["result"]
        assert isinstance(result, list)
        if data.get("resultType") == "streams":
            return f"{sum(len(s['values']) for s in result)} entries"
        return f"{len(result)} series"
    return str(data)[:60]


if __name__ == "__main__":
    main()
