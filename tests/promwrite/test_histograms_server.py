"""Native histograms through a real ``shoal serve``: 2.0 answers with the right written
counts (a refused histogram included), the columns hold what was sent (SQL), PromQL
reads them back; and a real Prometheus 2.42 that scrapes native histograms (a protobuf
exposition served here) and remote-writes them: every PromQL answer of shoal is the one
Prometheus gives from its own storage."""

from __future__ import annotations

import http.server
import json
import math
import random
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.native_histograms import GAUGE, NativeHistogram, encode_v2, zigzag
from loadtest.prometheus import Prometheus
from loadtest.remote_write import field, varint
from tests.promql.compare import compare
from tests.promwrite.test_remote_write import V2_TYPE, api, write

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shoal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("histograms")
    server = ServerProcess(
        tmp / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "warning"},
        log_path=tmp / "server.log",
    )
    try:
        yield server.start()
    finally:
        server.kill()


def sql(server: ServerProcess, query: str) -> list[list[Any]]:
    request = urllib.request.Request(f"{server.url}/api/v1/sql", data=query.encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        rows: list[list[Any]] = json.loads(response.read())["rows"]
    return rows


def test_v2_histograms_are_counted_stored_and_read_back(shoal: ServerProcess) -> None:
    now = int(time.time()) * 1000
    first = NativeHistogram(now - 15_000, 1, {-2: 3, 4: 5}, {1: 2}, 1, sum=20.0)
    second = NativeHistogram(now, 1, {-2: 4, 4: 9, 5: 1}, {1: 2}, 1, sum=41.5)
    body = encode_v2(
        [
            (({"__name__": "lat_seconds", "job": "api"}, [], [first, second]), {"type": 3}),
            (({"__name__": "temp"}, [(now, 21.0)], []), {"type": 2}),
            (({"__name__": "queue"}, [], [NativeHistogram(now, 0, {1: 3}, reset_hint=GAUGE)]), {}),
        ]
    )
    status, headers, text = write(shoal, None, remote_write.compress(body), V2_TYPE)
    assert status == 204, text
    assert headers["X-Prometheus-Remote-Write-Histograms-Written"] == "3"
    assert headers["X-Prometheus-Remote-Write-Samples-Written"] == "1"
    rows = sql(
        shoal,
        "SELECT metric_type, aggregation_temporality, count, sum, exp_scale, exp_zero_count, "
        "exp_positive_offset, exp_positive_bucket_counts, exp_negative_offset, "
        "exp_negative_bucket_counts, service_name FROM metrics "
        "WHERE metric_name = 'lat_seconds' ORDER BY timestamp",
    )
    assert rows == [
        ["exponential_histogram", 2, 11, 20.0, 1, 1, -3, [3, 0, 0, 0, 0, 0, 5], 0, [2], "api"],
        ["exponential_histogram", 2, 17, 41.5, 1, 1, -3, [4, 0, 0, 0, 0, 0, 9, 1], 0, [2], "api"],
    ]
    t = str(now / 1000)
    for query, expected in (
        ("histogram_count(lat_seconds)", "17"),
        ("histogram_sum(lat_seconds)", "41.5"),
        ("histogram_count(increase(lat_seconds[1m]))", "9"),  # 6, extrapolated by 1.5
        ("histogram_count(queue)", "3"),
    ):
        found = api(shoal.url, "/api/v1/query", [("query", query), ("time", t)])
        assert [r["value"][1] for r in found["data"]["result"]] == [expected], query


def test_a_refused_histogram_is_left_out_and_the_rest_stored(shoal: ServerProcess) -> None:
    now = int(time.time()) * 1000
    body = encode_v2(
        [
            (({"__name__": "kept_seconds"}, [], [NativeHistogram(now, 0, {1: 1})]), {}),
            (({"__name__": "kept_gauge"}, [(now, 1.0)], []), {}),
            (({"__name__": "recorded"}, [], [NativeHistogram(now, 0, {1: 0.5}, floats=True)]), {}),
        ]
    )
    status, headers, text = write(shoal, None, remote_write.compress(body), V2_TYPE)
    assert status == 400 and "1 samples refused, 2 stored" in text and "whole number" in text
    assert headers["X-Prometheus-Remote-Write-Histograms-Written"] == "1"
    assert headers["X-Prometheus-Remote-Write-Samples-Written"] == "1"
    names = sql(shoal, "SELECT DISTINCT metric_name FROM metrics WHERE metric_name LIKE 'kept%'")
    assert sorted(r[0] for r in names) == ["kept_gauge", "kept_seconds"]
    assert sql(shoal, "SELECT count(*) FROM metrics WHERE metric_name = 'recorded'") == [[0]]


class Exposition:
    """A native histogram and a gauge histogram, in Prometheus' protobuf exposition,
    advanced by a few observations at each scrape."""

    def __init__(self) -> None:
        self.rng = random.Random(3)
        self.values: list[float] = []
        self.lock = threading.Lock()

    def body(self) -> bytes:
        with self.lock:
            self.values += [self.rng.lognormvariate(-2, 1.5) for _ in range(self.rng.randint(1, 9))]
            values = list(self.values)
            queue = [self.rng.lognormvariate(0, 1) for _ in range(self.rng.randint(1, 5))]
        return self._family("rpc_seconds", 4, values) + self._family("queue_seconds", 5, queue)

    @staticmethod
    def _family(name: str, kind: int, values: list[float]) -> bytes:
        schema = 3
        buckets: dict[int, int] = {}
        for v in values:
            index = math.ceil(math.log2(v) * 2**schema)
            buckets[index] = buckets.get(index, 0) + 1
        spans, deltas, end, prev = b"", b"", 0, 0
        for i, index in enumerate(sorted(buckets)):
            offset = index if i == 0 else index - end
            spans += field(12, b"\x08" + varint(zigzag(offset)) + b"\x10\x01")
            deltas += varint(zigzag(buckets[index] - prev))
            prev, end = buckets[index], index + 1
        histogram = b"\x08" + varint(len(values)) + b"\x11" + struct.pack("<d", math.fsum(values))
        histogram += b"\x28" + varint(zigzag(schema)) + b"\x31" + struct.pack("<d", 2.0**-128)
        histogram += spans + field(13, deltas)
        metric = field(1, field(1, b"pool") + field(2, b"main")) + field(7, histogram)
        family = field(1, name.encode()) + b"\x18" + varint(kind) + field(4, metric)
        return varint(len(family)) + family


SENDER = """
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: app
    static_configs:
      - targets: ["127.0.0.1:{app}"]
remote_write:
  - url: "{shoal}/api/v1/write"
    send_native_histograms: true
    queue_config:
      batch_send_deadline: 1s
"""

QUERIES = [
    "histogram_count(rpc_seconds)",
    "histogram_sum(rpc_seconds)",
    "histogram_quantile(0.9, rpc_seconds)",
    "histogram_quantile(0.5, rate(rpc_seconds[5s]))",
    "histogram_count(rate(rpc_seconds[4s]))",
    "histogram_count(queue_seconds)",
    "histogram_quantile(0.5, queue_seconds)",
]


def test_a_real_prometheus_sends_the_native_histograms_it_scrapes(
    shoal: ServerProcess, tmp_path: Path
) -> None:
    exposition = Exposition()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition.body()
            self.send_response(200)
            self.send_header(
                "Content-Type",
                "application/vnd.google.protobuf; "
                "proto=io.prometheus.client.MetricFamily; encoding=delimited",
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    app = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=app.serve_forever, daemon=True).start()
    config = SENDER.replace("{app}", str(app.server_address[1])).replace("{shoal}", shoal.url)
    prometheus = Prometheus(tmp_path, config, features=("native-histograms",)).start()
    try:
        time.sleep(14)
        end = time.time() - 3
        deadline = time.monotonic() + 30
        newest: dict[str, Any] = {}
        while time.monotonic() < deadline:  # until shoal holds what was scraped before `end`
            newest = api(shoal.url, "/api/v1/query", [("query", "timestamp(up)")])
            if newest["data"]["result"] and float(newest["data"]["result"][0]["value"][1]) > end:
                break
            time.sleep(0.5)
        with urllib.request.urlopen(prometheus.url + "/metrics", timeout=10) as response:
            own = response.read().decode()
        sent = [
            float(line.rsplit(" ", 1)[1])
            for line in own.splitlines()
            if line.startswith("prometheus_remote_storage_histograms_total")
        ]
        assert sent and sent[0] >= 10, sent  # Prometheus did send native histograms
        params = [("start", f"{end - 10:.3f}"), ("end", f"{end:.3f}"), ("step", "1")]
        for query in QUERIES:
            theirs = api(prometheus.url, "/api/v1/query_range", [("query", query), *params])
            ours = api(shoal.url, "/api/v1/query_range", [("query", query), *params])
            assert len(theirs["data"]["result"]) == 1, (query, theirs)
            compare(ours, theirs, query)
    finally:
        prometheus.stop()
        app.shutdown()
