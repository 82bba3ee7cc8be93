"""A real Prometheus loses nothing while shoal pushes back for minutes.

Debian's Prometheus 2.42, its remote-write queue at its defaults, scrapes exporters of
this test's own (20,000 series, new values at every scrape) every two seconds and
remote-writes them to a ``shoal serve`` whose ingest queue takes one request at a time
(``queue_max_requests = 1``, ``backlog_wait_s = 0``). Another sender shares the server,
so Prometheus' requests keep finding the slot taken and are refused, retryably, for the
whole run. Once Prometheus' queue has drained, every sample of Prometheus' own TSDB over
the window is in shoal exactly once, and Prometheus counted no sample failed or dropped.

Prometheus retries a 5xx but drops a batch answered 429 as non-recoverable unless told
``retry_on_http_429``: with the 429 a full queue used to get, this test fails
(docs/remote-write.md).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess, free_port
from loadtest.prometheus import Prometheus
from tests.server.conftest import metric_value, scrape

REPO = Path(__file__).resolve().parents[2]
TARGETS = 4
SERIES = 5_000
"""Series per target, besides Prometheus' own five per target (``up``, ``scrape_*``)."""
NAMES = 10
SCRAPE_S = 2
SCRAPING_S = 150.0
"""How long the exporters are scraped; the samples compared are those of this window."""
DRAIN_S = 120.0
"""Longest wait, once scraping stopped, for Prometheus' queue to deliver the window."""
PUSHBACK_S = 120.0
"""Prometheus must have been refused and retried over at least this long."""
OTHER_PAUSE_S = 0.01

SHOAL_LIMITS = {
    # one request between admission and fsync: one that finds it taken is refused
    "SHOAL_QUEUE_MAX_REQUESTS": "1",
    # refused at once, never held back
    "SHOAL_BACKLOG_WAIT_S": "0",
    # the comparison reads all of a target's samples in one query
    "SHOAL_QUERY_MAX_ROWS": "5000000",
}

NOTHING_LOST = (
    "prometheus_remote_storage_samples_failed_total",
    "prometheus_remote_storage_samples_dropped_total",
    "prometheus_remote_storage_histograms_failed_total",
    "prometheus_remote_storage_histograms_dropped_total",
    "prometheus_remote_storage_exemplars_failed_total",
    "prometheus_remote_storage_exemplars_dropped_total",
    "prometheus_remote_storage_metadata_failed_total",
)
"""Prometheus 2.42's counters of what its remote-write queue gave up on."""


class Exporter:
    """A Prometheus text-format endpoint of ``SERIES`` series whose values change at
    every scrape, on a thread of its own."""

    def __init__(self, target: int) -> None:
        self.port = free_port()
        self.scrapes = 0
        lines = [f'pushback_metric_{i % NAMES}{{series="{i}"}} ' for i in range(SERIES)]
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter.scrapes += 1
                n = exporter.scrapes
                body = "".join(
                    f"{line}{n * (i % 97 + 1) + target}\n" for i, line in enumerate(lines)
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Exporter:
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(10)


class OtherSender:
    """Another remote-write sender on the same server: a thread writing a few samples at
    a time, one request after another, whose requests often hold the queue's one slot
    when one of Prometheus' arrives."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.running = threading.Event()
        self.statuses: Counter[int] = Counter()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        series = [
            ({"__name__": "other", "job": "other", "n": str(i)}, [(1_000, 1.0)]) for i in range(20)
        ]
        body = remote_write.compress(remote_write.encode(series))
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=60)
        try:
            while self.running.is_set():
                conn.request("POST", "/api/v1/write", body, headers)
                response = conn.getresponse()
                response.read()
                self.statuses[response.status] += 1
                time.sleep(OTHER_PAUSE_S)
        finally:
            conn.close()

    def start(self) -> OtherSender:
        self.running.set()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.running.clear()
        self.thread.join(60)


def _prometheus_config(shoal: str, exporters: list[Exporter]) -> str:
    targets = ", ".join(f'"{exporter.instance}"' for exporter in exporters)
    return f"""
global:
  scrape_interval: {SCRAPE_S}s
  scrape_timeout: {SCRAPE_S}s
scrape_configs:
  - job_name: load
    static_configs:
      - targets: [{targets}]
remote_write:
  - url: "{shoal}/api/v1/write"
"""


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=300) as response:
        body: bytes = response.read()
        return body


def _remote_storage(prometheus: Prometheus) -> dict[str, float]:
    """Prometheus' own ``prometheus_remote_storage_*`` series, summed per name."""
    totals: Counter[str] = Counter()
    for line in _get(prometheus.url + "/metrics").decode().splitlines():
        m = re.match(r"^(prometheus_remote_storage_\w+?)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            totals[m.group(1)] += float(m.group(3))
    return dict(totals)


SAMPLES = pa.schema([("name", pa.string()), ("series", pa.string()), ("t", pa.int64()),
                     ("value", pa.float64())])  # fmt: skip


def _prometheus_samples(
    prometheus: Prometheus, instance: str, begin_ms: int, end_ms: int
) -> pa.Table:
    """Every sample of ``instance`` in Prometheus' TSDB with ``begin_ms < t <= end_ms``
    (the series label of Prometheus' own series is "")."""
    selector = f'{{job="load",instance="{instance}"}}[{end_ms - begin_ms}ms]'
    query = urllib.parse.urlencode({"query": selector, "time": f"{end_ms / 1000:.3f}"})
    result = json.loads(_get(f"{prometheus.url}/api/v1/query?{query}"))["data"]["result"]
    columns: dict[str, list[Any]] = {"name": [], "series": [], "t": [], "value": []}
    for found in result:
        labels = found["metric"]
        assert set(labels) <= {"__name__", "job", "instance", "series"}, labels
        for t, v in found["values"]:
            columns["name"].append(labels["__name__"])
            columns["series"].append(labels.get("series", ""))
            columns["t"].append(round(float(t) * 1000))
            columns["value"].append(float(v))
    return pa.table(columns, schema=SAMPLES)


def _window(begin_ms: int, end_ms: int) -> str:
    return (
        f"service_name = 'load' AND time_unix_nano > {begin_ms * 1_000_000} "
        f"AND time_unix_nano <= {end_ms * 1_000_000} AND flags & 1 = 0"  # no stale markers
    )


def _shoal_samples(server: ServerProcess, instance: str, begin_ms: int, end_ms: int) -> pa.Table:
    """Every sample of ``instance`` shoal holds with ``begin_ms < t <= end_ms``, stale
    markers aside (Prometheus' queries leave them out too)."""
    sql = (
        "SELECT metric_name AS name, coalesce(attributes['series'], '') AS series, "
        "CAST(time_unix_nano / 1000000 AS BIGINT) AS t, value FROM metrics WHERE "
        f"resource_attributes['service.instance.id'] = '{instance}' AND "
        + _window(begin_ms, end_ms)
    )
    request = urllib.request.Request(server.url + "/api/v1/sql?format=arrow", data=sql.encode())
    with urllib.request.urlopen(request, timeout=300) as response:
        return pa.ipc.open_stream(response.read()).read_all().cast(SAMPLES)


def _shoal_count(server: ServerProcess, begin_ms: int, end_ms: int) -> int:
    sql = "SELECT count(*) FROM metrics WHERE " + _window(begin_ms, end_ms)
    request = urllib.request.Request(server.url + "/api/v1/sql", data=sql.encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(json.loads(response.read())["rows"][0][0])


def _differences(theirs: pa.Table, ours: pa.Table) -> dict[str, Any]:
    """How shoal's samples differ from Prometheus': samples held more than once, samples
    missing, samples Prometheus does not have, and values that differ."""
    keys = ["name", "series", "t"]
    counted = ours.group_by(keys).aggregate([("value", "count"), ("value", "min")])
    duplicates = counted.filter(pc.greater(counted["value_count"], 1))
    once = counted.select([*keys, "value_min"]).rename_columns([*keys, "value_shoal"])
    joined = theirs.join(once, keys, join_type="full outer")
    missing = joined.filter(pc.is_null(joined["value_shoal"]))
    extra = joined.filter(pc.is_null(joined["value"]))
    both = joined.filter(pc.and_(pc.is_valid(joined["value"]), pc.is_valid(joined["value_shoal"])))
    different = both.filter(pc.not_equal(both["value"], both["value_shoal"]))
    found = {"duplicates": duplicates, "missing": missing, "extra": extra, "different": different}
    return {
        what: {"count": table.num_rows, "examples": table.slice(0, 3).to_pylist()}
        for what, table in found.items()
        if table.num_rows
    }


def _went_on(timeline: list[tuple[float, float, float]], column: int) -> bool:
    """Whether the counter in ``column`` grew in at least half of the 10 s steps, from
    the first to the last over at least ``PUSHBACK_S``."""
    counts = [step[column] for step in timeline]
    grew = [
        step[0]
        for step, before in zip(timeline, [0.0, *counts], strict=False)
        if step[column] > before
    ]
    return len(grew) >= max(1, len(timeline) // 2) and grew[-1] - grew[0] + 10 >= PUSHBACK_S


@pytest.fixture
def shoal(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "error", **SHOAL_LIMITS},
        log_path=tmp_path / "server.log",
    )
    try:
        yield server.start()
    finally:
        server.kill()


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started = [Exporter(target).start() for target in range(TARGETS)]
    try:
        yield started
    finally:
        for exporter in started:
            exporter.stop()


def test_prometheus_loses_nothing_while_shoal_pushes_back_for_minutes(
    shoal: ServerProcess, exporters: list[Exporter], tmp_path: Path
) -> None:
    (tmp_path / "prometheus").mkdir()
    prometheus = Prometheus(tmp_path / "prometheus", _prometheus_config(shoal.url, exporters))
    other = OtherSender(shoal).start()
    begin_ms = int(time.time() * 1000)
    prometheus.start()
    try:
        # while Prometheus scrapes, every 10 s: shoal's refusals, Prometheus' retries
        timeline: list[tuple[float, float, float]] = []
        started = time.monotonic()
        while time.monotonic() - started < SCRAPING_S:
            time.sleep(10)
            refusals = metric_value(scrape(shoal), "shoal_ingest_queue_overflow_total")
            state = _remote_storage(prometheus)
            retries = state.get("prometheus_remote_storage_samples_retried_total", 0)
            timeline.append((time.monotonic() - started, refusals, retries))
        for exporter in exporters:
            exporter.stop()
        other.stop()
        stop_ms = int(time.time() * 1000)
        end_ms = stop_ms - 3 * SCRAPE_S * 1000  # before any scrape that could have failed
        time.sleep(2 * SCRAPE_S)
        theirs = {e.instance: _prometheus_samples(prometheus, e.instance, begin_ms, end_ms)
                  for e in exporters}  # fmt: skip
        expected = sum(table.num_rows for table in theirs.values())
        # Prometheus' queue delivers the window: it sent past its end, and shoal holds as
        # many samples as Prometheus' TSDB (which ones is compared below)
        deadline = time.monotonic() + DRAIN_S
        while True:
            state = _remote_storage(prometheus)
            sent_s = state.get("prometheus_remote_storage_queue_highest_sent_timestamp_seconds", 0)
            held = _shoal_count(shoal, begin_ms, end_ms)
            if (sent_s * 1000 >= stop_ms and held >= expected) or time.monotonic() > deadline:
                break
            time.sleep(1)
        ours = {i: _shoal_samples(shoal, i, begin_ms, end_ms) for i in theirs}
        state = _remote_storage(prometheus)
    finally:
        prometheus.stop()
        other.stop()

    # shoal refused requests all along: the pushback went on for minutes
    assert _went_on(timeline, 1), timeline
    # Prometheus gave nothing up, and shoal holds each sample of its TSDB exactly once
    gave_up = {name: state.get(name) for name in NOTHING_LOST}
    assert gave_up == dict.fromkeys(NOTHING_LOST, 0.0), (gave_up, held, expected, timeline)
    assert expected >= TARGETS * SERIES * (SCRAPING_S / SCRAPE_S) * 0.8, expected
    differences = {i: _differences(theirs[i], ours[i]) for i in theirs}
    assert not any(differences.values()), (differences, held, expected, state)
    # what was refused was Prometheus' too, all along, answered 503 (never 429) and retried
    assert _went_on(timeline, 2), timeline
    text = scrape(shoal)
    assert metric_value(text, "shoal_ingest_requests_total", status="429") == 0
    assert metric_value(text, "shoal_ingest_requests_total", status="503") > 100, text


def test_the_comparison_sees_every_kind_of_difference() -> None:
    """The comparison above can fail: a sample held twice, one missing, one Prometheus
    does not have and one with another value are each found (Prometheus' own series,
    without a series label, included)."""
    theirs = pa.table(
        {"name": ["up", "m", "m", "m"], "series": ["", "1", "1", "2"], "t": [1, 1, 2, 1],
         "value": [1.0, 5.0, 6.0, 7.0]},
        schema=SAMPLES,
    )  # fmt: skip
    assert _differences(theirs, theirs) == {}
    ours = pa.table(
        {"name": ["up", "up", "m", "m", "m"], "series": ["", "", "1", "2", "3"],
         "t": [1, 1, 1, 1, 1], "value": [1.0, 1.0, 5.5, 7.0, 8.0]},
        schema=SAMPLES,
    )  # fmt: skip
    found = _differences(theirs, ours)
    assert {what: found[what]["count"] for what in found} == {
        "duplicates": 1,
        "missing": 1,
        "extra": 1,
        "different": 1,
    }
    assert found["missing"]["examples"][0]["t"] == 2
    assert found["extra"]["examples"][0]["series"] == "3"
