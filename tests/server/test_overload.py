"""Overload: 429 + Retry-After, UNAVAILABLE + RetryInfo; the SDK exporter retries, loses nothing."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from loadtest import payloads
from loadtest.ingest import BASE_NS, GRPC_METHODS, ServerProcess
from shoal.auth import TokenStore
from tests.server.conftest import ServerFactory, delta_rows, metric_value, scrape

PB = "application/x-protobuf"


class Flood:
    """Threads sending metrics as fast as they can while ``running`` is set."""

    def __init__(self, server: ServerProcess, token: str, protocol: str, threads: int = 6) -> None:
        self.server = server
        self.token = token
        self.protocol = protocol
        self.running = threading.Event()
        self.statuses: Counter[str] = Counter()
        self.retry_after: set[str] = set()
        self.bodies: list[bytes] = []
        self.grpc_trailers: list[dict[str, bytes]] = []
        self.grpc_statuses: list[status_pb2.Status | str | None] = []
        self.body = payloads.metrics_request(points=500, series=50, start_ns=BASE_NS)
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self._lock = threading.Lock()

    def start(self) -> None:
        self.running.set()
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.running.clear()
        for t in self.threads:
            t.join(30)

    def _run(self) -> None:
        raw = self.body.SerializeToString()
        if self.protocol == "http":
            conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=30)
            headers = {"Content-Type": PB, "Authorization": f"Bearer {self.token}"}
            while self.running.is_set():
                conn.request("POST", "/v1/metrics", raw, headers)
                resp = conn.getresponse()
                body = resp.read()
                with self._lock:
                    self.statuses[str(resp.status)] += 1
                    if resp.status == 429:
                        self.retry_after.add(resp.getheader("Retry-After") or "")
                        if len(self.bodies) < 3:
                            self.bodies.append(body)
            conn.close()
            return
        with grpc.insecure_channel(self.server.grpc_target) as channel:
            call = channel.unary_unary(GRPC_METHODS["metrics"])
            metadata = (("authorization", f"Bearer {self.token}"),)
            while self.running.is_set():
                try:
                    call(raw, timeout=30, metadata=metadata)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                    if exc.code() == grpc.StatusCode.UNAVAILABLE and len(self.grpc_trailers) < 3:
                        with self._lock:
                            self.grpc_trailers.append(dict(exc.trailing_metadata()))
                            # grpcio-status' reader: the Status must agree with the call's
                            # own code and message, or it raises ValueError
                            try:
                                self.grpc_statuses.append(rpc_status.from_call(exc))
                            except ValueError as bad:
                                self.grpc_statuses.append(str(bad))
                with self._lock:
                    self.statuses[code] += 1


def _sdk_exporter(protocol: str, server: ServerProcess, token: str) -> object:
    headers = {"authorization": f"Bearer {token}"}
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=server.url + "/v1/metrics", headers=headers, timeout=30)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as G

    return G(endpoint=server.grpc_target, insecure=True, headers=headers, timeout=30)


def _overload_round(
    server: ServerProcess,
    protocol: str,
    flood_token: str,
    sdk_token: str,
    round_no: int,
    scrape_token: str,
) -> Flood:
    flood = Flood(server, flood_token, protocol)
    flood.start()
    refused_status = "429" if protocol == "http" else "UNAVAILABLE"
    before = metric_value(scrape(server, scrape_token), "shoal_ingest_requests_total", tenant="sdk",
                          status=refused_status)  # fmt: skip
    provider = MeterProvider(
        resource=Resource.create({"service.name": "sdk"}),
        metric_readers=[
            PeriodicExportingMetricReader(
                _sdk_exporter(protocol, server, sdk_token), export_interval_millis=3_600_000
            )
        ],
    )
    provider.get_meter("t").create_counter("overload_round").add(1, {"round": str(round_no)})
    exporting = threading.Thread(target=provider.shutdown)
    exporting.start()
    deadline = time.monotonic() + 20
    # Once the SDK has been refused, stop the flood so its retry gets through.
    while time.monotonic() < deadline and exporting.is_alive():
        text = scrape(server, scrape_token)
        refused = metric_value(text, "shoal_ingest_requests_total", tenant="sdk",
                               status=refused_status)  # fmt: skip
        if refused > before:
            break
        time.sleep(0.02)
    flood.stop()
    exporting.join(60)
    assert not exporting.is_alive()
    return flood


def test_overload_answers_retryably_and_the_sdk_loses_nothing(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    tokens = TokenStore(data)
    flood_token, _ = tokens.create("flood", frozenset({"ingest"}))
    sdk_token, _ = tokens.create("sdk", frozenset({"ingest"}))
    scrape_token, _ = tokens.create("ops", frozenset({"metrics"}))
    server = start_server(data, env={"SHOAL_QUEUE_MAX_REQUESTS": "1", "SHOAL_RETRY_AFTER_S": "1"})

    rounds = 0
    refused = {"http": 0.0, "grpc": 0.0}
    floods: dict[str, list[Flood]] = {"http": [], "grpc": []}
    for protocol in ("http", "grpc"):
        status = "429" if protocol == "http" else "UNAVAILABLE"
        for _ in range(20):  # the SDK's one export races the flood; most rounds win
            floods[protocol].append(
                _overload_round(server, protocol, flood_token, sdk_token, rounds, scrape_token)
            )
            rounds += 1
            refused[protocol] = metric_value(
                scrape(server, scrape_token),
                "shoal_ingest_requests_total",
                tenant="sdk",
                status=status,
            )
            if refused[protocol] > 0 and floods[protocol][-1].statuses[status] > 0:
                break
    assert refused["http"] > 0, "the SDK's HTTP exporter was never refused"
    assert refused["grpc"] > 0, "the SDK's gRPC exporter was never refused"

    http_flood = Counter[str]()
    for f in floods["http"]:
        http_flood.update(f.statuses)
    assert http_flood["429"] > 0 and http_flood["200"] > 0
    assert {r for f in floods["http"] for r in f.retry_after} == {"1"}
    # the first refused body of any round: a round may pass without a 429
    refusals = [body for f in floods["http"] for body in f.bodies]
    assert refusals, "no 429 body kept"
    status = status_pb2.Status.FromString(refusals[0])
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and info.retry_delay.seconds == 1

    trailers = [t for f in floods["grpc"] for t in f.grpc_trailers]
    assert trailers, "no UNAVAILABLE seen on gRPC"
    details = status_pb2.Status.FromString(trailers[0]["grpc-status-details-bin"])
    assert details.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert details.details[0].Unpack(info) and info.retry_delay.seconds == 1
    read = [s for f in floods["grpc"] for s in f.grpc_statuses]
    assert read, "no UNAVAILABLE read"
    for rich in read:
        assert isinstance(rich, status_pb2.Status), f"grpcio-status cannot read it: {rich}"
        assert rich.details[0].Is(info.DESCRIPTOR)
    text = scrape(server, scrape_token)
    assert metric_value(text, "shoal_ingest_requests_total", status="RESOURCE_EXHAUSTED") == 0
    assert metric_value(text, "shoal_ingest_queue_overflow_total") > 0

    assert server.terminate() == 0
    rows = delta_rows(data, "sdk", "metrics").to_pylist()
    got = sorted(int(dict(r["attributes"])["round"]) for r in rows)
    assert got == list(range(rounds)), "every SDK export arrived exactly once"
