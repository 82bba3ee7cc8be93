"""``POST /api/v1/write`` on a real ``shoal serve``: 1.0 and 2.0 bodies read back through
PromQL and SQL with the labels they were written with; errors as the specification
wants them; and a real Prometheus, scraping itself, whose every sample arrives once."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from shoal.auth import TokenStore

REPO = Path(__file__).resolve().parents[2]
V1_TYPE = "application/x-protobuf"
V2_TYPE = "application/x-protobuf;proto=io.prometheus.write.v2.Request"


@pytest.fixture(scope="module")
def shoal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    tmp = tmp_path_factory.mktemp("promwrite")
    token = TokenStore(tmp / "data").create("acme", frozenset({"ingest", "query"}))[0]
    server = ServerProcess(
        tmp / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "warning"},
        log_path=tmp / "server.log",
    )
    try:
        yield server.start(), token
    finally:
        server.kill()


def write(
    server: ServerProcess, token: str | None, body: bytes, content_type: str = V1_TYPE
) -> tuple[int, Message, str]:
    headers = {"Content-Type": content_type, "Content-Encoding": "snappy"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{server.url}/api/v1/write", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def api(base: str, path: str, params: list[tuple[str, str]], token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        return json.loads(r.read())


def test_v1_reads_back_through_promql_and_sql_with_the_labels_written(
    shoal: tuple[ServerProcess, str],
) -> None:
    server, token = shoal
    now = int(time.time()) * 1000
    series = {
        "job:requests:rate5m": {"job": "shop/api", "instance": "h1:9", "le": "0.5"},
        "disk_free_bytes": {"job": "node", "device": "sda1", "_hidden": "x"},
        "events_total": {"job": "node"},
    }
    body = remote_write.encode(
        [
            ({"__name__": name, **labels}, [(now - 1000, 1.0), (now, 2.0)])
            for name, labels in series.items()
        ]
    ) + remote_write.metadata_v1("events", 1, "Events seen.", "")
    status, _, text = write(server, token, remote_write.compress(body))
    assert status == 204, text
    found = api(server.url, "/api/v1/series", [("match[]", '{job=~".+"}')], token)["data"]
    # every label as written, except a leading single underscore, which the view renames
    expected = [{"__name__": name, **labels} for name, labels in series.items()]
    expected[1] = {
        "__name__": "disk_free_bytes",
        "job": "node",
        "device": "sda1",
        "key_hidden": "x",
    }
    assert sorted(map(sorted, map(dict.items, found))) == sorted(
        map(sorted, map(dict.items, expected))
    )
    result = api(
        server.url,
        "/api/v1/query",
        [("query", "job:requests:rate5m"), ("time", str(now / 1000))],
        token,
    )["data"]["result"]
    assert result[0]["value"][1] == "2"
    meta = api(server.url, "/api/v1/metadata", [("metric", "events_total")], token)["data"]
    assert meta["events_total"][0]["type"] == "counter"
    assert meta["events_total"][0]["help"] == "Events seen."
    sql = (
        "SELECT metric_name, resource_attributes['service.namespace'] AS ns, service_name, "
        "resource_attributes['service.instance.id'] AS inst, attributes['le'] AS le, "
        "count(*) AS n FROM metrics WHERE metric_name = 'job:requests:rate5m' GROUP BY 1,2,3,4,5"
    )
    request = urllib.request.Request(
        f"{server.url}/api/v1/sql", data=sql.encode(), headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        rows = json.loads(response.read())["rows"]
    assert rows == [["job:requests:rate5m", "shop", "api", "h1:9", "0.5", 2]]


def test_v2_answers_the_written_counts(shoal: tuple[ServerProcess, str]) -> None:
    server, token = shoal
    now = int(time.time()) * 1000
    body = remote_write.encode_v2(
        [
            ({"__name__": "v2_gauge", "job": "api"}, [(now - 500, 4.0), (now, 5.0)], {"type": 2}),
            (
                {"__name__": "v2_calls_total", "job": "api"},
                [(now, 9.0)],
                {
                    "type": 1,
                    "created": now - 60_000,
                    "exemplars": [({"trace_id": "0a" * 16}, 1.0, now)],
                },
            ),
        ]
    )
    status, headers, text = write(server, token, remote_write.compress(body), V2_TYPE)
    assert status == 204, text
    assert headers["X-Prometheus-Remote-Write-Samples-Written"] == "3"
    assert headers["X-Prometheus-Remote-Write-Exemplars-Written"] == "1"
    assert headers["X-Prometheus-Remote-Write-Histograms-Written"] == "0"
    result = api(
        server.url, "/api/v1/query", [("query", "v2_gauge"), ("time", str(now / 1000))], token
    )["data"]["result"]
    assert result == [
        {"metric": {"__name__": "v2_gauge", "job": "api"}, "value": [now / 1000, "5"]}
    ]


def test_errors_say_what_is_wrong_and_whether_to_retry(shoal: tuple[ServerProcess, str]) -> None:
    server, token = shoal
    good = remote_write.compress(remote_write.encode([({"__name__": "x"}, [(1, 1.0)])]))
    assert write(server, None, good)[0] == 401
    status, _, text = write(server, token, good, "application/json")
    assert status == 415 and "application/x-protobuf" in text
    status, _, text = write(server, token, b"\x05garbage")
    assert status == 400 and "snappy" in text
    status, _, text = write(server, token, remote_write.compress(b"\x0a\x05\x0a\x03"))
    assert status == 400 and "not a valid prometheus.WriteRequest" in text
    # a series without a name is refused, the others are stored, and the answer is 400
    mixed = remote_write.encode(
        [({"__name__": "kept_metric"}, [(2_000, 1.0)]), ({"job": "x"}, [(2_000, 1.0)])]
    )
    status, _, text = write(server, token, remote_write.compress(mixed))
    assert status == 400 and "1 samples refused, 1 stored" in text and "__name__" in text
    # the server keeps serving
    assert write(server, token, good)[0] == 204


PROMETHEUS_CONFIG = """
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{port}"]
remote_write:
  - url: "{shoal}/api/v1/write"
    authorization:
      credentials: "{token}"
    queue_config:
      batch_send_deadline: 1s
    metadata_config:
      send_interval: 2s
"""


def test_a_real_prometheus_remote_writes_every_sample_once(
    shoal: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    server, token = shoal
    config = PROMETHEUS_CONFIG.replace("{shoal}", server.url).replace("{token}", token)
    prometheus = Prometheus(tmp_path, config).start()
    try:
        time.sleep(12)  # a dozen scrapes of ~700 series each
        end = time.time() - 4
        # wait until shoal holds samples past `end`: what was scraped before it was sent
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            newest = api(server.url, "/api/v1/query", [("query", "timestamp(up)")], token)
            if newest["data"]["result"] and float(newest["data"]["result"][0]["value"][1]) > end:
                break
            time.sleep(0.5)
        window = [("query", '{job="prometheus"}[8s]'), ("time", f"{end:.3f}")]
        theirs = api(prometheus.url, "/api/v1/query", window)["data"]["result"]
        ours = api(server.url, "/api/v1/query", window, token)["data"]["result"]
    finally:
        prometheus.stop()

    def by_labels(result: list[dict[str, Any]]) -> dict[str, list[list[Any]]]:
        return {json.dumps(s["metric"], sort_keys=True): s["values"] for s in result}

    theirs_by, ours_by = by_labels(theirs), by_labels(ours)
    assert len(theirs_by) > 300  # Prometheus' own series, histograms' buckets among them
    assert any(name.endswith('_bucket"') or "_bucket" in name for name in theirs_by)
    missing = sorted(set(theirs_by) - set(ours_by))[:5]
    assert not missing, missing
    different = [k for k in theirs_by if theirs_by[k] != ours_by[k]][:3]
    assert not different, [(k, theirs_by[k], ours_by[k]) for k in different]


def test_each_token_writes_and_reads_its_own_tenant_only(tmp_path: Path) -> None:
    # the same label set from two tenants (the decoder's series cache is shared by
    # tenants): each reads back its own value, and a third tenant reads nothing
    store = TokenStore(tmp_path / "data")
    roles = frozenset({"ingest", "query"})
    tokens = {name: store.create(name, roles)[0] for name in ("acme", "globex", "initech")}
    server = ServerProcess(
        tmp_path / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "warning"},
        log_path=tmp_path / "server.log",
    )
    server.start()
    try:
        t_ms = int(time.time() * 1000) - 5_000
        labels = {"__name__": "shared_gauge", "job": "node", "instance": "h1:9100"}
        for tenant, value in (("acme", 1.0), ("globex", 2.0)):
            body = remote_write.compress(remote_write.encode([(labels, [(t_ms, value)])]))
            assert write(server, tokens[tenant], body)[0] == 204
        query = [("query", "shared_gauge"), ("time", str(t_ms / 1000))]
        for tenant, expected in (("acme", ["1"]), ("globex", ["2"]), ("initech", [])):
            found = api(server.url, "/api/v1/query", query, tokens[tenant])["data"]["result"]
            assert [r["value"][1] for r in found] == expected, tenant
            request = urllib.request.Request(
                server.url + "/api/v1/sql",
                data=b"SELECT value FROM metrics WHERE metric_name = 'shared_gauge'",
                headers={"Authorization": f"Bearer {tokens[tenant]}"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                rows = json.loads(response.read())["rows"]
            assert [str(int(r[0])) for r in rows] == expected, tenant
    finally:
        server.kill()
