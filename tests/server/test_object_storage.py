"""A real server with its tables in an S3-compatible bucket (moto's server mode).

Ingest is acknowledged from the local WAL as before; the flusher commits to the
bucket; SQL, PromQL and the PostgreSQL listener read the committed files through
one local read cache, whose hits and misses /metrics counts. The credentials
never show in the log, /metrics, errors or ``shoal table history``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

import httpx
import psycopg
import pytest
from deltalake import DeltaTable

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess
from loadtest.s3server import SECRET_KEY
from tests.server.conftest import ServerFactory, metric_value, scrape

PB = {"Content-Type": "application/x-protobuf"}
POINTS = 1000


def sql_count(server: ServerProcess, table: str = "metrics") -> int:
    answer = httpx.post(
        server.url + "/api/v1/sql", content=f"SELECT count(*) AS n FROM {table}", timeout=30
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["rows"][0][0])


def promql_points(server: ServerProcess) -> float:
    """PromQL's count of the first metric's points in the hour the tests write."""
    names = httpx.get(server.url + "/api/v1/label/__name__/values", timeout=30).json()["data"]
    assert names
    result = httpx.get(
        server.url + "/api/v1/query",
        params={
            "query": f'sum(count_over_time({{__name__="{names[0]}"}}[1h]))',
            "time": BASE_NS / 1e9 + 60,
        },
        timeout=30,
    ).json()
    assert result["status"] == "success", result
    return float(result["data"]["result"][0]["value"][1])


def committed_rows(url: str) -> int:
    try:
        table = DeltaTable(url, storage_options={"AWS_ALLOW_HTTP": "true"})
    except Exception:  # not created yet
        return 0
    return int(table.to_pyarrow_dataset().count_rows())


def wait_for(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def bucket_env(url: str, **settings: str) -> dict[str, str]:
    """A server's settings for tables under ``url``: a flush every 0.3 s, requests cut
    at 2 s, other writers looked for every 0.2 s; ``settings`` add to them or override."""
    env = {
        "SHOAL_STORAGE_URL": url,
        "SHOAL_FLUSH_MAX_AGE_S": "0.3",
        "SHOAL_STORAGE_TIMEOUT_S": "2",
        "SHOAL_STORAGE_POLL_S": "0.2",
    }
    env.update({f"SHOAL_{name.upper()}": value for name, value in settings.items()})
    return env


def test_a_server_on_s3_ingests_flushes_and_answers_through_its_cache(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    server = start_server(env=bucket_env(s3_url, log_level="debug"))
    body = payloads.metrics_request(points=POINTS, series=100, start_ns=BASE_NS)
    answer = httpx.post(server.url + "/v1/metrics", content=body.SerializeToString(), headers=PB)
    assert answer.status_code == 200
    assert sql_count(server) == POINTS  # acknowledged: visible at once, from the WAL side
    wait_for(lambda: committed_rows(f"{s3_url}/default/metrics") == POINTS)
    assert not (server.data_dir / "tenants").exists()  # the tables are in the bucket
    # the flusher kept a copy of what it uploaded: the first read downloads nothing
    assert sql_count(server) == POINTS
    warm = scrape(server)
    assert metric_value(warm, "shoal_storage_cache_reads", result="miss") == 0
    assert metric_value(warm, "shoal_storage_cache_reads", result="hit") >= 1
    assert metric_value(warm, "shoal_storage_cache_bytes") > 0
    assert list((server.data_dir / "cache").rglob("*.parquet"))
    # PromQL reads the same committed files
    assert promql_points(server) == POINTS / 8
    # and the PostgreSQL listener
    with psycopg.connect(
        host="127.0.0.1", port=server.pg_port, dbname="shoal", user="u", password="x"
    ) as conn:
        (n,) = conn.execute("SELECT count(*) FROM metrics").fetchone() or (0,)
    assert n == POINTS
    # restart with an empty cache: nothing to replay, the rows are fetched from the bucket
    assert server.terminate() == 0
    shutil.rmtree(server.data_dir / "cache")
    again = start_server(data_dir=server.data_dir, env=server.extra_env)
    assert sql_count(again) == POINTS
    assert metric_value(scrape(again), "shoal_storage_cache_reads", result="miss") >= 1
    assert sql_count(again) == POINTS
    assert metric_value(scrape(again), "shoal_storage_cache_reads", result="hit") >= 1
    history = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "table", "history", "--table", "metrics"],
        env={**os.environ, **server.extra_env, "SHOAL_DATA_DIR": str(server.data_dir)},
        capture_output=True,
        timeout=120,
    )
    assert history.returncode == 0, history.stderr
    assert b"flush" in history.stdout
    again.terminate()
    # the secret is nowhere the operator looks
    for text in (server.log(), again.log(), warm, history.stdout.decode(), history.stderr.decode()):
        assert SECRET_KEY not in text


def test_a_flushed_file_never_read_is_read_while_the_store_is_down(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    """The flusher's copy in the read cache answers a query when the store answers nothing."""
    server = start_server(env=bucket_env(s3_url))
    body = payloads.metrics_request(points=POINTS, series=100, start_ns=BASE_NS)
    answer = httpx.post(server.url + "/v1/metrics", content=body.SerializeToString(), headers=PB)
    assert answer.status_code == 200
    wait_for(lambda: committed_rows(f"{s3_url}/default/metrics") == POINTS)
    wait_for(lambda: metric_value(scrape(server), "shoal_snapshot_rows") == 0)
    s3_server.fault(status=503)  # every request refused from now on
    assert sql_count(server) == POINTS
    metrics = scrape(server)
    assert metric_value(metrics, "shoal_storage_cache_reads", result="miss") == 0
    assert promql_points(server) == POINTS / 8


def _ingest(server: ServerProcess, seq: int, points: int = 200) -> httpx.Response:
    body = payloads.metrics_request(
        points=points, series=20, start_ns=BASE_NS + seq * 3_600_000_000_000, seed=seq
    )
    return httpx.post(
        server.url + "/v1/metrics", content=body.SerializeToString(), headers=PB, timeout=60
    )


def _distinct_rows(url: str) -> tuple[int, int]:
    table = DeltaTable(url, storage_options={"AWS_ALLOW_HTTP": "true"}).to_pyarrow_table(
        columns=["series_id", "time_unix_nano", "metric_name"]
    )
    keys = set(
        zip(
            table.column("series_id").to_pylist(),
            table.column("time_unix_nano").to_pylist(),
            table.column("metric_name").to_pylist(),
            strict=True,
        )
    )
    return table.num_rows, len(keys)


@pytest.mark.slow  # over a minute: four faults, each waited out (make test-slow)
def test_the_store_failing_keeps_ingest_and_queries_going_and_loses_nothing(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    """503s, refused credentials, a slow store and an unreachable one: the WAL takes the
    rows, queries see them, /readyz and /metrics say what is wrong; past the backlog cap
    ingest is refused with a retryable status; afterwards every acknowledged row is in
    the bucket exactly once."""
    server = start_server(env=bucket_env(s3_url, flush_max_bytes="256KiB", backlog_wait_s="0"))
    acked = 0
    seq = 0

    def send() -> httpx.Response:
        nonlocal acked, seq
        seq += 1
        answer = _ingest(server, seq)
        if answer.status_code == 200:
            acked += 200
        return answer

    assert send().status_code == 200
    wait_for(lambda: committed_rows(f"{s3_url}/default/metrics") == acked)
    assert sql_count(server) == acked  # the committed file now in the cache

    for fault in ({"status": 503}, {"status": 403}, {"status": 500, "delay_s": 1.0}):
        s3_server.fault(methods=["PUT"], **fault)
        for _ in range(3):
            assert send().status_code == 200  # acknowledged from the WAL
        assert sql_count(server) == acked  # the unflushed rows answer queries
        wait_for(lambda: "degraded: flushes failing" in httpx.get(server.url + "/readyz").text)
        ready = httpx.get(server.url + "/readyz")
        assert ready.status_code == 200 and SECRET_KEY not in ready.text
        metrics = scrape(server)
        assert metric_value(metrics, "shoal_flush_failing_seconds") > 0
        assert metric_value(metrics, "shoal_flush_failures_total") > 0
        s3_server.fault()
        wait_for(lambda: "degraded" not in httpx.get(server.url + "/readyz").text)
        wait_for(lambda: committed_rows(f"{s3_url}/default/metrics") == acked)

    assert sql_count(server) == acked  # every committed file now in the cache
    # unreachable: the process stops answering (requests hang until their time limit)
    s3_server.pause()
    try:
        for _ in range(3):
            assert send().status_code == 200
        assert sql_count(server) == acked
        # past the backlog cap (5 x flush_max_bytes), ingest is refused, retryably
        refused = None
        for _ in range(200):
            answer = send()
            if answer.status_code != 200:
                refused = answer
                break
        assert refused is not None and refused.status_code in (429, 503)
        assert "retry-after" in refused.headers
        assert sql_count(server) == acked
        assert "degraded: flushes failing" in httpx.get(server.url + "/readyz").text
    finally:
        s3_server.resume()
    wait_for(lambda: committed_rows(f"{s3_url}/default/metrics") == acked, timeout=120)
    rows, distinct = _distinct_rows(f"{s3_url}/default/metrics")
    assert rows == distinct == acked  # every acknowledged row once
    assert send().status_code == 200
    assert SECRET_KEY not in server.log()


def test_a_refused_commit_shows_nothing_and_its_rows_wait_in_the_wal(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    """The log entry's PUT refused after the data files were uploaded: nothing of the
    commit is visible, and the rows stay in the WAL (small segments, so a segment
    dropped too early would lose them at the SIGKILL)."""
    env = bucket_env(s3_url, wal_segment_bytes="16KiB")
    url = f"{s3_url}/default/metrics"
    server = start_server(env=env)
    assert _ingest(server, 1).status_code == 200
    wait_for(lambda: committed_rows(url) == 200)
    # refused for good (403: not retried, so the round fails at once)
    s3_server.fault(methods=["PUT"], keys="/_delta_log/", status=403)
    assert _ingest(server, 2).status_code == 200
    wait_for(lambda: "degraded: flushes failing" in httpx.get(server.url + "/readyz").text)
    assert _ingest(server, 3).status_code == 200
    assert s3_server.stats().get("faulted", 0) > 0
    assert committed_rows(url) == 200  # the uploaded files are in no commit
    assert sql_count(server) == 600  # and not read besides the unflushed rows
    assert len(list((server.data_dir / "wal").glob("*.wal"))) > 2
    server.kill()  # the later batches are nowhere but the WAL
    s3_server.fault()
    restarted = start_server(data_dir=server.data_dir, env=env)
    assert sql_count(restarted) == 600
    wait_for(lambda: committed_rows(url) == 600)
    assert _distinct_rows(url) == (600, 600)


def test_a_commit_stored_whose_answer_never_came_counts_once_after_a_crash(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    """The log entry stored but its answer held back until the server is SIGKILLed:
    after the restart the commit counts once, its rows neither replayed nor flushed
    again."""
    env = bucket_env(s3_url)
    url = f"{s3_url}/default/metrics"
    server = start_server(env=env)
    assert _ingest(server, 1).status_code == 200
    wait_for(lambda: committed_rows(url) == 200)
    s3_server.fault(methods=["PUT"], keys="/_delta_log/", after=True, delay_s=20)
    assert _ingest(server, 2).status_code == 200
    wait_for(lambda: committed_rows(url) == 400)  # stored; the server not yet told
    server.kill()
    s3_server.fault()
    restarted = start_server(data_dir=server.data_dir, env=env)
    assert sql_count(restarted) == 400  # replayed only past the committed LSN
    assert _ingest(restarted, 3).status_code == 200
    wait_for(lambda: committed_rows(url) == 600)
    assert _distinct_rows(url) == (600, 600)
    assert sql_count(restarted) == 600


def _bucket_keys(s3_server: Any, prefix: str) -> list[str]:
    """The object keys under ``prefix`` of the tests' bucket."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint,
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="shoal", Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_logs_and_spans_in_a_bucket_answer_loki_and_tempo_from_their_indexes(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    """The log index and the trace-id filters are written beside the files in the
    bucket, and Loki's and Tempo's answers read them (and the files) from there."""
    server = start_server(env=bucket_env(s3_url))
    logs = payloads.logs_request(records=300, start_ns=BASE_NS)
    traces = payloads.traces_request(spans=200, start_ns=BASE_NS)
    for path, body in (("/v1/logs", logs), ("/v1/traces", traces)):
        answer = httpx.post(server.url + path, content=body.SerializeToString(), headers=PB)
        assert answer.status_code == 200, answer.text
    wait_for(lambda: committed_rows(f"{s3_url}/default/logs") == 300)
    wait_for(lambda: committed_rows(f"{s3_url}/default/spans") == 200)
    prefix = s3_url.removeprefix("s3://shoal/")
    keys = _bucket_keys(s3_server, prefix)
    assert [k for k in keys if "/logs/_logindex/" in k and k.endswith(".parquet")], keys
    assert [k for k in keys if "/spans/_lookup/" in k and k.endswith(".bloom")], keys
    assert not (server.data_dir / "tenants").exists()

    # Loki: the label browser and the volume are counted from the index in the bucket
    window = {"start": str(BASE_NS - 60 * 10**9), "end": str(BASE_NS + 600 * 10**9)}
    labels = httpx.get(server.url + "/loki/api/v1/labels", params=window, timeout=30).json()
    assert labels["status"] == "success" and "service_name" in labels["data"], labels
    volume = httpx.get(
        server.url + "/loki/api/v1/index/volume",
        params={**window, "query": '{service_name=~".+"}'},
        timeout=30,
    ).json()
    sent_bytes = sum(
        len(record.body.string_value.encode())
        for rl in logs.resource_logs
        for sl in rl.scope_logs
        for record in sl.log_records
    )
    assert sum(int(item["value"][1]) for item in volume["data"]["result"]) == sent_bytes
    stats = httpx.get(
        server.url + "/loki/api/v1/index/stats",
        params={**window, "query": '{service_name=~".+"}'},
        timeout=30,
    ).json()
    assert stats["entries"] == 300, stats
    # Tempo: a trace by id found through its filter and read from the bucket, whole
    trace_id = traces.resource_spans[0].scope_spans[0].spans[0].trace_id
    sent = sum(
        1
        for rs in traces.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if span.trace_id == trace_id
    )
    got = httpx.get(server.url + f"/api/v2/traces/{trace_id.hex()}", timeout=30)
    assert got.status_code == 200, got.text
    spans = [
        span
        for rs in got.json()["trace"]["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    assert len(spans) == sent >= 2
    server.terminate()
