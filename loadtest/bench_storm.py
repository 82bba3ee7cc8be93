"""A query storm from one tenant while another queries and a third ingests.

``python -m loadtest.bench_storm [--phase-s 40]``

One ``shoal serve`` with default settings, three tenants. Two phases, side by side in
one run: *calm* (tenant ``calm`` queries in a loop while tenant ``ingest`` sends OTLP at
a fixed rate) and *storm* (the same, while tenant ``storm`` keeps eight heavy queries
running at once: runaway scans that hit the time limit, memory hogs that hit the memory
limit, cross joins refused up front). Prints the calm tenant's query latency and the
ingest acknowledgement latency in both phases, their ratios, and what the storm's
queries got back.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess
from loadtest.stats import percentile
from shoal.auth import TokenStore

HEAVY = [
    "SELECT count(*) FROM range(100000000000) WHERE value % 7 = 3",
    "SELECT (value * 7919) % 20000003 AS k, count(*) AS c, array_agg(value) AS v "
    "FROM range(20000000) GROUP BY k ORDER BY c DESC",
    "SELECT count(*) FROM metrics a CROSS JOIN metrics b CROSS JOIN metrics c "
    "WHERE a.value + b.value + c.value < 0",
    "SELECT m.metric_name, avg(m.value * r.value) AS v FROM metrics m "
    "CROSS JOIN range(20000) r GROUP BY 1",
]
CALM = (
    "SELECT metric_name, count(*) AS n, avg(value) AS mean FROM metrics "
    "GROUP BY metric_name ORDER BY metric_name"
)


def _post(url: str, token: str, body: bytes, content_type: str) -> tuple[int, float, str]:
    request = urllib.request.Request(
        url, data=body, headers={"Authorization": f"Bearer {token}", "Content-Type": content_type}
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response.status, time.perf_counter() - started, ""
    except urllib.error.HTTPError as exc:
        return exc.code, time.perf_counter() - started, exc.read().decode()


def _p(values: list[float], q: float) -> float:
    """The ``q`` percentile of ``values`` (seconds) in ms."""
    return percentile(values, q) * 1000


class Phase:
    def __init__(
        self, server: ServerProcess, tokens: dict[str, str], storm: bool, heavy: list[str]
    ) -> None:
        self.server, self.tokens, self.storm = server, tokens, storm
        self.heavy_queries = heavy
        self.stop = threading.Event()
        self.calm: list[float] = []
        self.calm_failures: collections.Counter[int] = collections.Counter()
        self.acks: list[float] = []
        self.ack_failures: collections.Counter[int] = collections.Counter()
        self.heavy: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def _calm_loop(self) -> None:
        while not self.stop.is_set():
            status, seconds, _ = _post(
                self.server.url + "/api/v1/sql", self.tokens["calm"], CALM.encode(), "text/plain"
            )
            with self.lock:
                if status == 200:
                    self.calm.append(seconds)
                else:
                    self.calm_failures[status] += 1
            time.sleep(0.2)

    def _ingest_loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            body = payloads.metrics_request(
                points=1000, series=500, start_ns=BASE_NS + 10**12 + i * 10**10, seed=i
            ).SerializeToString()
            status, seconds, _ = _post(
                self.server.url + "/v1/metrics",
                self.tokens["ingest"],
                body,
                "application/x-protobuf",
            )
            with self.lock:
                if status == 200:
                    self.acks.append(seconds)
                else:
                    self.ack_failures[status] += 1
            i += 1
            time.sleep(0.1)

    def _storm_loop(self, k: int) -> None:
        n = k
        while not self.stop.is_set():
            query = self.heavy_queries[n % len(self.heavy_queries)]
            status, _, text = _post(
                self.server.url + "/api/v1/sql", self.tokens["storm"], query.encode(), "text/plain"
            )
            limit = json.loads(text).get("limit", "") if text.startswith("{") else ""
            with self.lock:
                self.heavy[f"{status} {limit}".strip()] += 1
            n += 1

    def run(self, seconds: float) -> Phase:
        threads = [
            threading.Thread(target=self._calm_loop),
            threading.Thread(target=self._ingest_loop),
        ]
        if self.storm:
            threads += [threading.Thread(target=self._storm_loop, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        self.stop.set()
        for thread in threads:
            thread.join()
        return self


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_storm")
    parser.add_argument("--phase-s", type=float, default=40.0, help="seconds per phase")
    parser.add_argument(
        "--heavy",
        default="0,1,2,3",
        help="which heavy queries the storm sends (indices into HEAVY, comma-separated)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the server (e.g. SHOAL_QUERY_MAX_TENANT_SHARE=2); repeatable",
    )
    args = parser.parse_args(argv)
    server_env = dict(item.split("=", 1) for item in args.server_env)
    with tempfile.TemporaryDirectory(prefix="shoal-storm-") as tmp:
        data = Path(tmp) / "data"
        store = TokenStore(data)
        tokens = {
            t: store.create(t, frozenset({"ingest", "query"}))[0]
            for t in ("calm", "storm", "ingest")
        }
        server = ServerProcess(data, env=server_env, log_path=Path(tmp) / "server.log").start()
        try:
            for tenant, points in (("calm", 20_000), ("storm", 20_000)):
                for i in range(10):
                    body = payloads.metrics_request(
                        points=points // 10, series=200, start_ns=BASE_NS + i * 10**12, seed=i
                    ).SerializeToString()
                    _post(
                        server.url + "/v1/metrics", tokens[tenant], body, "application/x-protobuf"
                    )
            process = psutil.Process(server.proc.pid)  # type: ignore[union-attr]
            print(f"phases of {args.phase_s:g} s; server pid {process.pid}", file=sys.stderr)
            phases: dict[str, Phase] = {}
            for name, stormy in (("calm", False), ("storm", True)):
                print(f"phase {name} ...", file=sys.stderr, flush=True)
                heavy = [HEAVY[int(i)] for i in args.heavy.split(",")]
                phases[name] = Phase(server, tokens, stormy, heavy).run(args.phase_s)
                time.sleep(2)
            peak = process.memory_info().rss
        finally:
            server.kill()
    calm, storm = phases["calm"], phases["storm"]
    print("| phase | calm tenant queries | query p50 ms | p90 ms | p99 ms | failed | "
          "ingest acks | ack p50 ms | ack p99 ms | failed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ph in phases.items():
        print(
            f"| {name} | {len(ph.calm)} | {_p(ph.calm, 0.5):.0f} | {_p(ph.calm, 0.9):.0f} | "
            f"{_p(ph.calm, 0.99):.0f} | "
            f"{sum(ph.calm_failures.values())} | {len(ph.acks)} | {_p(ph.acks, 0.5):.1f} | "
            f"{_p(ph.acks, 0.99):.1f} | {sum(ph.ack_failures.values())} |"
        )
    print(
        f"\nstorm/calm: query p99 x{_p(storm.calm, 0.99) / _p(calm.calm, 0.99):.2f}, "
        f"query median x{statistics.median(storm.calm) / statistics.median(calm.calm):.2f}, "
        f"ack p99 x{_p(storm.acks, 0.99) / _p(calm.acks, 0.99):.2f}"
    )
    print(
        "storm tenant's answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(storm.heavy.items()))
    )
    print(f"server RSS at the end: {peak >> 20} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
