"""``POST /api/v1/read`` against ``shoal serve``, read by a real Prometheus (Debian's
2.42) configured with ``remote_read`` and no local data, and by requests of the test's
own for each response type.

The samples go in by remote write (awkward values: NaN, infinities, -0.0, the largest
and smallest doubles, stale markers, irregular times); Prometheus' query_range answers
over them must equal shoal's own PromQL answers exactly, and the test's own reads must
give back every sample with its exact bits.
"""

from __future__ import annotations

import json
import math
import struct
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cramjam
import numpy as np
import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from shoal.auth import TokenStore
from shoal.promwrite import remote_read
from tests.promql.conftest import REPO, post
from tests.promwrite.xor_reference import decode_xor, read_frames

STALE = 0x7FF0000000000002
MAX_SAMPLES = 2_000
"""promql_max_samples of the server under test: ``big_metric`` is over it."""

Samples = list[tuple[int, float]]


def _bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


def _dataset(base: int) -> list[tuple[dict[str, str], Samples]]:
    """Series as remote write sends them: (labels, [(t_ms, value)])."""
    out: list[tuple[dict[str, str], Samples]] = []
    for instance in ("a:9100", "b:9100"):
        samples = [(base + i * 15_000, float(i * 3 + (i // 50) % 2)) for i in range(240)]
        out.append(
            (
                {
                    "__name__": "rr_requests_total",
                    "job": "api",
                    "instance": instance,
                    "code": "200",
                },
                samples,
            )
        )
    odd = [0.1, -0.0, math.inf, -math.inf, math.nan, 1.7976931348623157e308, 5e-324, 1e-300]
    awkward = [
        (base + 7 + i * 10_000 + (i % 3) * 1_001, odd[i % len(odd)] * (i + 1)) for i in range(150)
    ]
    out.append(({"__name__": "rr_gauge", "job": "edge", "kind": "awkward"}, awkward))
    flapping = [
        (base + i * 20_000, _float(STALE) if i % 40 == 39 else float(i % 7) / 3) for i in range(200)
    ]
    out.append(({"__name__": "rr_gauge", "job": "edge", "kind": "flapping"}, flapping))
    for n in range(3):  # 2,400 samples: over the cap in one read
        big = [(base + i * 4_000, float(i)) for i in range(800)]
        out.append(({"__name__": "big_metric", "n": str(n)}, big))
    for name in ("half_a", "half_b"):  # 1,500 each: under the cap alone, over it together
        out.append(({"__name__": name}, [(base + i * 2_000, float(i)) for i in range(1_500)]))
    return out


def _write(server: ServerProcess, token: str, series: list[tuple[dict[str, str], Samples]]) -> None:
    body = remote_write.compress(remote_write.encode(series))
    status, answer = post(
        server.url + "/api/v1/write",
        body,
        {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "Authorization": f"Bearer {token}",
        },
    )
    assert status == 204, answer


@pytest.fixture(scope="module")
def stored(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]]]:
    tmp = tmp_path_factory.mktemp("remote-read")
    data = tmp / "data"
    store = TokenStore(data)
    tokens = {
        "acme": store.create("acme", frozenset({"ingest", "query"}))[0],
        "other": store.create("other", frozenset({"ingest", "query"}))[0],
        "ingest": store.create("acme", frozenset({"ingest"}))[0],
    }
    server = ServerProcess(
        data,
        env={"PYTHONPATH": str(REPO), "SHOAL_PROMQL_MAX_SAMPLES": str(MAX_SAMPLES)},
        log_path=tmp / "server.log",
    ).start()
    try:
        base = (int(time.time() * 1000) - 70 * 60_000) // 60_000 * 60_000 + 4_321
        series = _dataset(base)
        _write(server, tokens["acme"], series)
        # the other tenant has a series of the same name, which acme must never see
        _write(server, tokens["other"], [({"__name__": "rr_other", "job": "x"}, [(base, 1.0)])])
        yield server, tokens, base, series
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def _read_request(
    queries: list[tuple[int, int, list[tuple[int, str, str]]]], accepted: list[int]
) -> bytes:
    request = remote_read.message_class("ReadRequest")()
    for start, end, matchers in queries:
        q = request.queries.add(start_timestamp_ms=start, end_timestamp_ms=end)
        for kind, name, value in matchers:
            q.matchers.add(type=kind, name=name, value=value)
    request.accepted_response_types.extend(accepted)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def _read(
    server: ServerProcess, token: str | None, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    sent = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    req = urllib.request.Request(server.url + "/api/v1/read", data=body, headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _samples_answer(body: bytes) -> list[dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]]:
    """A SAMPLES answer decoded with the protobuf classes: per query, series -> samples
    as (time, value bits)."""
    response = remote_read.message_class("ReadResponse").FromString(
        bytes(cramjam.snappy.decompress_raw(body))
    )
    out = []
    for result in response.results:
        found = {}
        for ts in result.timeseries:
            labels = tuple((label.name, label.value) for label in ts.labels)
            assert list(labels) == sorted(labels)
            found[labels] = [(s.timestamp, _bits(s.value)) for s in ts.samples]
        out.append(found)
    return out


def _streamed_answer(
    body: bytes,
) -> list[dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]]:
    """A STREAMED_XOR_CHUNKS answer read frame by frame (checksums checked), chunks
    decoded by the reference reader; at most 120 samples per chunk."""
    chunked = remote_read.message_class("ChunkedReadResponse")
    out: list[dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]] = []
    order: list[tuple[int, tuple[tuple[str, str], ...]]] = []
    for payload in read_frames(body):
        message = chunked.FromString(payload)
        assert len(message.chunked_series) == 1  # one series per frame
        while len(out) <= message.query_index:
            out.append({})
        series = message.chunked_series[0]
        labels = tuple((label.name, label.value) for label in series.labels)
        if not order or order[-1] != (message.query_index, labels):
            assert (message.query_index, labels) not in order, "a series came back twice"
            order.append((message.query_index, labels))
        for chunk in series.chunks:
            assert chunk.type == remote_read.CHUNK_XOR
            samples = decode_xor(chunk.data)
            assert 0 < len(samples) <= 120
            assert (chunk.min_time_ms, chunk.max_time_ms) == (samples[0][0], samples[-1][0])
            out[message.query_index].setdefault(labels, []).extend(samples)
    # series in label order within each query, as Prometheus' TSDB returns them
    for index in range(len(out)):
        labels_in_order = [labels for i, labels in order if i == index]
        assert labels_in_order == sorted(labels_in_order)
    return out


def _expected(
    series: list[tuple[dict[str, str], Samples]], name: str, start: int, end: int
) -> dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]:
    out = {}
    for labels, samples in series:
        if labels["__name__"] == name:
            kept = [(t, _bits(v)) for t, v in samples if start <= t <= end]
            if kept:
                out[tuple(sorted(labels.items()))] = kept
    return out


@pytest.mark.parametrize("response_type", [remote_read.SAMPLES, remote_read.STREAMED_XOR_CHUNKS])
def test_every_sample_comes_back_with_its_bits(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
    response_type: int,
) -> None:
    server, tokens, base, series = stored
    start, end = base + 600_000, base + 3_000_000  # cuts every series
    queries = [
        (start, end, [(0, "__name__", "rr_requests_total")]),
        (base - 1, base + 10**8, [(0, "__name__", "rr_gauge"), (1, "kind", "nothing")]),
        (base, base + 10**8, [(2, "__name__", "rr_gau.*"), (2, "kind", "flap.*")]),
        (base, base + 10**8, [(0, "__name__", "rr_requests_total"), (3, "instance", "a:.*")]),
        (base, base + 10**8, [(0, "__name__", "no_such_metric")]),
    ]
    status, headers, body = _read(server, tokens["acme"], _read_request(queries, [response_type]))
    assert status == 200, body
    if response_type == remote_read.SAMPLES:
        assert headers["content-type"] == "application/x-protobuf"
        assert headers["content-encoding"] == "snappy"
        got = _samples_answer(body)
    else:
        assert headers["content-type"] == remote_read.STREAMED_CONTENT_TYPE
        got = _streamed_answer(body)
    got += [{}] * (len(queries) - len(got))  # a query without series sends no frame
    stale_kept = [v for t, v in got[2][next(iter(got[2]))] if v == STALE]

    assert got[0] == _expected(series, "rr_requests_total", start, end)
    assert got[1] == _expected(series, "rr_gauge", base - 1, base + 10**8)
    flapping = {k: v for k, v in got[1].items() if ("kind", "flapping") in k}
    assert got[2] == flapping and len(stale_kept) == 5
    assert list(got[3]) == [k for k in got[0] if ("instance", "b:9100") in k]
    assert got[4] == {}


def test_prometheus_reads_through_shoal(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
    tmp_path: Path,
) -> None:
    """A Prometheus with no data of its own answers query_range from shoal, exactly as
    shoal's PromQL does."""
    server, tokens, base, _ = stored
    config = (
        "global:\n  scrape_interval: 1h\nscrape_configs: []\n"
        "remote_read:\n"
        f"  - url: {server.url}/api/v1/read\n"
        "    read_recent: true\n"
        "    authorization:\n"
        f"      credentials: {tokens['acme']}\n"
    )
    prometheus = Prometheus(tmp_path, config=config).start()
    try:
        queries = [
            "rr_requests_total",
            'rr_requests_total{instance=~"b.*"}',
            'rr_gauge{kind="awkward"}',
            'rr_gauge{kind="flapping"}',
            '{__name__=~"rr_.*", job!="api"}',
            "max_over_time(rr_gauge[2m])",
            "last_over_time(rr_requests_total[90s])",
            "count_over_time(rr_gauge[5m])",
            "timestamp(rr_gauge)",
            "rr_requests_total offset 3m",
        ]
        for step in ("15", "61"):
            params = {"start": f"{(base - 60_000) / 1000}", "end": f"{(base + 75 * 60_000) / 1000}"}
            for query in queries:
                args = urllib.parse.urlencode({"query": query, "step": step, **params})
                with urllib.request.urlopen(f"{prometheus.url}/api/v1/query_range?{args}") as r:
                    theirs = json.loads(r.read())
                req = urllib.request.Request(
                    f"{server.url}/api/v1/query_range?{args}",
                    headers={"Authorization": f"Bearer {tokens['acme']}"},
                )
                with urllib.request.urlopen(req) as r:
                    ours = json.loads(r.read())
                assert theirs["status"] == ours["status"] == "success", (query, theirs, ours)
                assert theirs["data"]["result"], query  # Prometheus has data only from shoal
                _same(theirs["data"]["result"], ours["data"]["result"], f"{query} step {step}")
    finally:
        prometheus.stop()


def _same(theirs: list[dict[str, Any]], ours: list[dict[str, Any]], what: str) -> None:
    """The same series, and at every step the same time and the same value text."""
    a = {tuple(sorted(item["metric"].items())): item["values"] for item in theirs}
    b = {tuple(sorted(item["metric"].items())): item["values"] for item in ours}
    assert set(a) == set(b), (what, set(a) ^ set(b))
    for labels, points in a.items():
        differ = [(p, q) for p, q in zip(points, b[labels], strict=False) if p != q]
        assert not differ and len(points) == len(b[labels]), (what, labels, differ[:5])


def test_another_tenant_gets_nothing(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
) -> None:
    server, tokens, base, _ = stored
    query = [(base - 1, base + 10**8, [(2, "__name__", "rr_.*")])]
    for response_type in (remote_read.SAMPLES, remote_read.STREAMED_XOR_CHUNKS):
        body = _read_request(query, [response_type])
        # the header naming the first tenant widens nothing
        status, _, answer = _read(server, tokens["other"], body, {"X-Scope-OrgID": "acme"})
        assert status == 200
        if response_type == remote_read.SAMPLES:
            found = _samples_answer(answer)
            assert [set(q) for q in found] == [
                {(("__name__", "rr_other"), ("job", "x"))}
            ]  # its own series only
        else:
            assert [set(q) for q in _streamed_answer(answer)] == [
                {(("__name__", "rr_other"), ("job", "x"))}
            ]
        # and acme's own read does not see the other's series
        status, _, answer = _read(server, tokens["acme"], body)
        names = (
            {dict(k)["__name__"] for k in _samples_answer(answer)[0]}
            if (response_type == remote_read.SAMPLES)
            else {dict(k)["__name__"] for k in _streamed_answer(answer)[0]}
        )
        assert status == 200 and names == {"rr_requests_total", "rr_gauge"}


def test_a_read_over_a_limit_fails_alone(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
) -> None:
    server, tokens, base, _ = stored
    everything = (base - 1, base + 10**8)
    over = _read_request([(*everything, [(0, "__name__", "big_metric")])], [0])
    status, _, answer = _read(server, tokens["acme"], over)
    assert status == 400
    assert b"promql_max_samples" in answer
    # two queries under the cap each, over it together
    half = [(*everything, [(0, "__name__", name)]) for name in ("half_a", "half_b")]
    status, _, answer = _read(server, tokens["acme"], _read_request(half, [1]))
    assert status == 400 and b"more than 2000 samples" in answer, answer
    # the server goes on answering: one of them alone is fine
    status, _, answer = _read(server, tokens["acme"], _read_request(half[:1], [0]))
    assert status == 200
    assert sum(len(v) for v in _samples_answer(answer)[0].values()) == 1_500


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not snappy at all", b"snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")), b"ReadRequest"),
        (_read_request([(0, 1, [(7, "a", "b")])], [0]), b"matcher type 7"),
        (_read_request([(0, 1, [(2, "a", "(")])], [0]), b"regular expression"),
        (_read_request([(5, 1, [(0, "a", "b")])], [0]), b"before"),
        (_read_request([(0, 1, [(0, "a", "b")])], [4, 9]), b"response types"),
    ],
)
def test_bad_bodies_get_400_with_the_reason(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
    body: bytes,
    reason: bytes,
) -> None:
    server, tokens, base, _ = stored
    status, _, answer = _read(server, tokens["acme"], body)
    assert status == 400, answer
    assert reason in answer, answer
    ok = _read_request([(base, base + 60_000, [(0, "__name__", "rr_gauge")])], [0])
    assert _read(server, tokens["acme"], ok)[0] == 200


def test_the_token_decides(
    stored: tuple[ServerProcess, dict[str, str], int, list[tuple[dict[str, str], Samples]]],
) -> None:
    server, tokens, base, _ = stored
    body = _read_request([(base, base + 60_000, [(0, "__name__", "rr_gauge")])], [0])
    assert _read(server, None, body)[0] == 401
    assert _read(server, "not-a-token", body)[0] == 401
    assert _read(server, tokens["ingest"], body)[0] == 403  # ingest only, no query role


def test_samples_encoder_matches_protobuf() -> None:
    """The column-wise Sample writer against protobuf's own encoder, value for value
    (every varint length of a time, negative times, NaN payloads)."""
    times = np.array(
        [0, 1, 127, 128, 16_383, 16_384, 2**35, 2**62, -1, -(2**63), 2**63 - 1], dtype=np.int64
    )
    values = np.array([_float(b) for b in (0, 1, STALE, 0x7FF8000000000001, 2**63, 2**64 - 1)] * 2)[
        : len(times)
    ]
    payload = remote_read.samples_payload(times, values)
    series = remote_read.message_class("TimeSeries").FromString(payload)
    assert [s.timestamp for s in series.samples] == times.tolist()
    assert [_bits(s.value) for s in series.samples] == values.view(np.uint64).tolist()
