"""What grows with series stays within its setting in a real server: the remote-write series
cache (``series_cache_bytes``) and the series indexes (``series_index_bytes``), each shown
in /metrics, while the metric browser still lists every series."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

from loadtest import remote_write
from loadtest.ingest import ServerProcess

from .conftest import ServerFactory, metric_value, scrape

REQUESTS = 8
PER_REQUEST = 250
BOUND = 96 * 1024


def _write(server: ServerProcess, r: int, t_ms: int) -> None:
    series = [
        ({"__name__": f"m_{i % 5}", "instance": f"host-{r}-{i}", "job": "j"}, [(t_ms, float(i))])
        for i in range(PER_REQUEST)
    ]
    request = urllib.request.Request(
        server.url + "/api/v1/write",
        data=remote_write.compress(remote_write.encode(series)),
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 204


def _flushed(server: ServerProcess) -> None:
    deadline = time.monotonic() + 30
    while metric_value(scrape(server), "shoal_snapshot_rows") > 0:
        assert time.monotonic() < deadline, "not flushed"
        time.sleep(0.1)


def _instances(server: ServerProcess, start: float, end: float) -> list[str]:
    params = urllib.parse.urlencode({"start": start, "end": end})
    url = f"{server.url}/api/v1/label/instance/values?{params}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"])


def test_series_cache_and_index_stay_within_their_settings(start_server: ServerFactory) -> None:
    server = start_server(
        env={
            "SHOAL_SERIES_CACHE_BYTES": str(BOUND),
            "SHOAL_SERIES_INDEX_BYTES": str(BOUND),
            "SHOAL_FLUSH_MAX_AGE_S": "0.2",  # the index is of flushed files (and batches)
        }
    )
    now_ms = int(time.time() * 1000) // 1000 * 1000
    expected = []
    for r in range(REQUESTS):  # each request its own series, a second apart
        _write(server, r, now_ms - (REQUESTS - r) * 60_000)
        _flushed(server)
        expected += [f"host-{r}-{i}" for i in range(PER_REQUEST)]
        # the browser reads the index after every request: it grows past its bound
        assert len(_instances(server, now_ms / 1000 - 3600, now_ms / 1000)) == len(expected)
    text = scrape(server)
    cache = metric_value(text, "shoal_series_cache_bytes", codec="remote_write")
    assert 0 < cache <= BOUND
    assert metric_value(text, "shoal_series_cache_unkept_series", codec="remote_write") > 0
    index = metric_value(text, "shoal_series_index_bytes")
    assert 0 < index <= BOUND
    assert metric_value(text, "shoal_series_index_evicted_series") > 0
    # every range still lists exactly the series seen in it
    assert sorted(_instances(server, now_ms / 1000 - 3600, now_ms / 1000)) == sorted(expected)
    first = (now_ms - REQUESTS * 60_000) / 1000
    assert sorted(_instances(server, first, first + 1)) == sorted(expected[:PER_REQUEST])
