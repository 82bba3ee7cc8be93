"""The SQL endpoint: bodies, formats, ETag/304, roles and error answers."""

from __future__ import annotations

import csv
import io
import json

import pyarrow as pa
import pytest

from .api_app import Tokens, client
from .helpers import Harness, metric_rows

QUERY = (
    "SELECT timestamp, metric_name, series_id, value, attributes, "
    "arrow_cast(timestamp, 'Timestamp(Nanosecond, None)') AS ts_ns, "
    "CAST(timestamp AS DATE) AS day, value > 50 AS high "
    "FROM metrics ORDER BY timestamp, series_id LIMIT 200"
)


@pytest.fixture
def data(harness: Harness) -> Harness:
    harness.ingest("acme", "metrics", metric_rows(300, seed=1))
    harness.flush("acme", "metrics")
    harness.ingest("acme", "metrics", metric_rows(50, seed=2))
    return harness


def _arrow_rows(body: bytes) -> tuple[pa.Table, list[dict[bytes, bytes]]]:
    reader = pa.ipc.open_stream(body)
    batches, metas = [], []
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        batches.append(batch)
        if meta is not None:
            metas.append(dict(meta))
    return pa.Table.from_batches(batches, schema=reader.schema), metas


def test_formats_round_trip_the_same_rows(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    service = data.service()
    with client(data, service) as tc:
        answers = {
            fmt: tc.post(f"/api/v1/sql?format={fmt}", content=QUERY, headers=headers)
            for fmt in ("json", "csv", "ndjson", "arrow")
        }
    service.shutdown()
    for fmt, r in answers.items():
        assert r.status_code == 200, (fmt, r.text[:300])
    assert answers["arrow"].headers["content-type"] == "application/vnd.apache.arrow.stream"
    doc = answers["json"].json()
    names = [c["name"] for c in doc["columns"]]
    assert names == [
        "timestamp",
        "metric_name",
        "series_id",
        "value",
        "attributes",
        "ts_ns",
        "day",
        "high",
    ]
    assert doc["columns"][0]["type"] == "timestamp[us, tz=UTC]"
    assert doc["row_count"] == 200 and doc["truncated"] is False
    rows = doc["rows"]
    # timestamps are ISO 8601 at the column's precision
    assert rows[0][0].endswith("Z") and len(rows[0][0]) == len("2026-01-01T00:00:00.000000Z")
    assert len(rows[0][5]) == len("2026-01-01T00:00:00.000000000")
    assert rows[0][6] == rows[0][0][:10]
    assert isinstance(rows[0][4], dict) and rows[0][4]["host"].startswith("host-")

    nd = [json.loads(line) for line in answers["ndjson"].text.splitlines()]
    assert [[r[n] for n in names] for r in nd] == rows

    table, _ = _arrow_rows(answers["arrow"].content)
    assert table.num_rows == 200
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.column("value").to_pylist() == [r[3] for r in rows]
    assert table.column("series_id").to_pylist() == [r[2] for r in rows]
    assert [dict(m) for m in table.column("attributes").to_pylist()] == [r[4] for r in rows]

    parsed = list(csv.reader(io.StringIO(answers["csv"].text)))
    assert parsed[0] == names
    assert len(parsed) == 201
    for cells, row in zip(parsed[1:], rows, strict=True):
        assert cells[0] == row[0] and cells[1] == row[1]
        assert int(cells[2]) == row[2] and float(cells[3]) == row[3]
        assert json.loads(cells[4]) == row[4]
        assert cells[7] == str(row[7]).lower()


def test_bodies_text_json_and_get(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    service = data.service()
    with client(data, service) as tc:
        q = "SELECT count(*) AS n FROM metrics"
        plain = tc.post("/api/v1/sql", content=q, headers=headers)
        as_json = tc.post("/api/v1/sql", json={"query": q}, headers=headers)
        got = tc.get("/api/v1/sql", params={"q": q}, headers=headers)
        bad_json = tc.post(
            "/api/v1/sql",
            content='{"sql": 1}',
            headers={**headers, "Content-Type": "application/json"},
        )
        missing = tc.get("/api/v1/sql", headers=headers)
        bad_format = tc.get("/api/v1/sql", params={"q": q, "format": "xml"}, headers=headers)
    service.shutdown()
    for r in (plain, as_json, got):
        assert r.status_code == 200, r.text
        assert r.json()["rows"] == [[350]]
    assert bad_json.status_code == 400 and '"query"' in bad_json.json()["error"]
    assert missing.status_code == 400
    assert bad_format.status_code == 400 and "xml" in bad_format.json()["error"]


def test_etag_304_and_change_after_ingest(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    service = data.service()
    q = {"q": "SELECT count(*) FROM metrics"}
    with client(data, service) as tc:
        first = tc.get("/api/v1/sql", params=q, headers=headers)
        etag = first.headers["etag"]
        again = tc.get("/api/v1/sql", params=q, headers={**headers, "If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        # a query of another table keeps its own tag
        logs_tag = tc.get(
            "/api/v1/sql", params={"q": "SELECT count(*) FROM logs"}, headers=headers
        ).headers["etag"]
        data.ingest("acme", "metrics", metric_rows(5, seed=3))
        changed = tc.get("/api/v1/sql", params=q, headers={**headers, "If-None-Match": etag})
        assert changed.status_code == 200 and changed.headers["etag"] != etag
        assert changed.json()["rows"] == [[355]]
        # a flush changes the table version: new tag again, same rows
        tag2 = changed.headers["etag"]
        data.flush("acme", "metrics")
        flushed = tc.get("/api/v1/sql", params=q, headers={**headers, "If-None-Match": tag2})
        assert flushed.status_code == 200 and flushed.headers["etag"] != tag2
        assert flushed.json()["rows"] == [[355]]
        # logs did not change, so its tag still matches
        logs_again = tc.get(
            "/api/v1/sql",
            params={"q": "SELECT count(*) FROM logs"},
            headers={**headers, "If-None-Match": logs_tag},
        )
        assert logs_again.status_code == 304
        # another format is another representation
        csv_tag = tc.get("/api/v1/sql", params={**q, "format": "csv"}, headers=headers).headers[
            "etag"
        ]
        assert csv_tag != flushed.headers["etag"]
    service.shutdown()


def test_roles_ingest_tokens_get_403(data: Harness) -> None:
    tokens = Tokens(data)
    ingest_only = tokens.create("acme", "ingest")
    service = data.service()
    with client(data, service) as tc:
        r = tc.post("/api/v1/sql", content="SELECT 1", headers=ingest_only)
        assert r.status_code == 403
        r = tc.post("/api/v1/sql", content="SELECT 1")
        assert r.status_code == 401
        r = tc.post(
            "/api/v1/sql",
            content="SELECT 1",
            headers={"Authorization": "Bearer shoal_00000000_" + "x" * 43},
        )
        assert r.status_code == 401
    service.shutdown()


def test_errors_are_400_with_datafusion_message(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    service = data.service(max_rows=100)
    with client(data, service) as tc:
        r = tc.post("/api/v1/sql", content="SELEC 1", headers=headers)
        assert r.status_code == 400
        assert "ParserError" in r.json()["error"] and "Traceback" not in r.text
        r = tc.post("/api/v1/sql", content="SELECT nope FROM metrics", headers=headers)
        assert r.status_code == 400 and "nope" in r.json()["error"]
        r = tc.post(
            "/api/v1/sql?as_of_version=999", content="SELECT 1 FROM metrics", headers=headers
        )
        assert r.status_code == 400 and "time travel" in r.json()["error"]
        r = tc.post("/api/v1/sql?as_of=yesterday", content="SELECT 1", headers=headers)
        assert r.status_code == 400 and "ISO 8601" in r.json()["error"]
        # the row cap: a clear message in the body and in a header
        r = tc.post("/api/v1/sql", content="SELECT * FROM range(1000)", headers=headers)
        assert r.status_code == 200
        assert r.json()["truncated"] is True and "query_max_rows" in r.json()["message"]
        assert "query_max_rows" in r.headers["x-shoal-truncated"]
        assert len(r.json()["rows"]) == 100
        r = tc.post(
            "/api/v1/sql?format=ndjson", content="SELECT * FROM range(1000)", headers=headers
        )
        last = json.loads(r.text.splitlines()[-1])
        assert last["truncated"] is True and len(r.text.splitlines()) == 101
        r = tc.post(
            "/api/v1/sql?format=arrow", content="SELECT * FROM range(1000)", headers=headers
        )
        table, metas = _arrow_rows(r.content)
        assert table.num_rows == 100 and any(b"shoal.truncated" in m for m in metas)
    service.shutdown()


def test_time_travel_over_http(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    version = data.store.open("acme", "metrics").snapshot().version
    data.flush("acme", "metrics")
    service = data.service()
    with client(data, service) as tc:
        now = tc.post("/api/v1/sql", content="SELECT count(*) FROM metrics", headers=headers)
        then = tc.post(
            f"/api/v1/sql?as_of_version={version}",
            content="SELECT count(*) FROM metrics",
            headers=headers,
        )
        future = tc.post(
            "/api/v1/sql?as_of=2999-01-01T00:00:00Z",
            content="SELECT count(*) FROM metrics",
            headers=headers,
        )
    service.shutdown()
    assert now.json()["rows"] == [[350]]
    assert then.json()["rows"] == [[300]]
    assert future.json()["rows"] == [[350]]


def test_small_complete_results_come_in_one_body_and_large_ones_stream(data: Harness) -> None:
    headers = Tokens(data).create("acme", "query")
    service = data.service()
    big = "SELECT * FROM metrics CROSS JOIN (SELECT * FROM unnest(range(40)) AS r(k))"
    with client(data, service) as tc:
        small = tc.post("/api/v1/sql?format=ndjson", content=QUERY, headers=headers)
        large = tc.post("/api/v1/sql?format=ndjson", content=big, headers=headers)
    service.shutdown()
    assert small.status_code == 200 and large.status_code == 200, large.text[:300]
    assert int(small.headers["content-length"]) == len(small.content)
    assert len(small.text.splitlines()) == 200
    # 350 rows x 40 is well over ONE_BODY_BYTES of Arrow: streamed, every row still there
    assert "content-length" not in large.headers
    assert len(large.text.splitlines()) == 350 * 40
