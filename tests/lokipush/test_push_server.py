"""``POST /loki/api/v1/push`` on a real ``shoal serve``: protobuf + snappy as Promtail and
Alloy send it, JSON and gzipped JSON, into the logs table in the documented columns;
Loki's status codes; the token decides the tenant whatever ``X-Scope-OrgID`` says."""

from __future__ import annotations

import gzip
import time

from loadtest import loki as push
from tests.lokipush.conftest import Loki, post, sql

PROTOBUF = "application/x-protobuf"


def send(loki: Loki, body: bytes, content_type: str = PROTOBUF, token: str | None = None,
         **headers: str) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    all_headers = {"Content-Type": content_type, **headers}
    if token != "":
        all_headers["Authorization"] = f"Bearer {token or loki.token}"
    return post(f"{loki.url}/loki/api/v1/push", body, all_headers)


def test_protobuf_push_lands_in_the_documented_columns(loki: Loki) -> None:
    now = time.time_ns()
    streams: list[push.Stream] = [
        (
            {"job": "promtail-proto", "host": "h1"},
            [(now, "GET /cart 200", {"trace_id": "0af7651916cd43dd8448eb211c80319c"})],
        )
    ]
    status, _, text = send(loki, push.compress(push.encode(streams)), **{"X-Scope-OrgID": "other"})
    assert status == 204, text
    rows = sql(
        loki,
        "SELECT service_name, resource_attributes['host'], resource_attributes['job'], body, "
        "attributes['trace_id'], attributes['detected_level'], trace_id, time_unix_nano, "
        "scope_name FROM logs WHERE resource_attributes['job'] = 'promtail-proto'",
    )
    assert rows == [
        ["promtail-proto", "h1", "promtail-proto", "GET /cart 200",
         "0af7651916cd43dd8448eb211c80319c", "unknown", "0af7651916cd43dd8448eb211c80319c",
         now, "loki.push"]
    ]  # fmt: skip
    # X-Scope-OrgID named another tenant: the token decided, the other tenant has nothing
    assert sql(loki, "SELECT count(*) FROM logs WHERE resource_attributes['job'] = "
               "'promtail-proto'", loki.other) == [[0]]  # fmt: skip


def test_json_and_gzipped_json(loki: Loki) -> None:
    now = time.time_ns()
    body = push.encode_json(
        [({"app": "json-app"}, [(now, "level=warn plain"), (now + 1, "x", {"k": "v"})])]
    )
    assert send(loki, body, "application/json")[0] == 204
    zipped = push.encode_json([({"app": "json-app", "zip": "1"}, [(now + 2, "zipped")])])
    status, _, text = send(
        loki, gzip.compress(zipped), "application/json", **{"Content-Encoding": "gzip"}
    )
    assert status == 204, text
    rows = sql(
        loki,
        "SELECT body, attributes['k'], attributes['detected_level'] FROM logs "
        "WHERE service_name = 'json-app' ORDER BY time_unix_nano",
    )
    assert rows == [
        ["level=warn plain", None, "warn"],
        ["x", "v", "unknown"],
        ["zipped", None, "unknown"],
    ]


def test_statuses_follow_loki(loki: Loki) -> None:
    now = time.time_ns()
    good = push.compress(push.encode([({"app": "s"}, [(now, "x")])]))
    # what can never succeed: 400 with the reason, nothing stored
    status, _, text = send(loki, push.compress(push.encode([({}, [(now, "x")])])))
    assert status == 400 and b"at least one label" in text
    status, _, text = send(loki, b"not snappy")
    assert status == 400 and b"snappy" in text
    status, _, text = send(loki, b'{"streams": 3}', "application/json")
    assert status == 400 and b"JSON" in text
    # some entries refused, the rest stored: 400 naming what was refused
    mixed = push.compress(push.encode([({"app": "mixed"}, [(0, "epoch"), (now, "kept")])]))
    status, _, text = send(loki, mixed)
    assert status == 400 and b"1 entries refused, 1 stored" in text
    assert sql(loki, "SELECT body FROM logs WHERE service_name = 'mixed'") == [["kept"]]
    assert send(loki, good, **{"Content-Encoding": "br"})[0] == 415
    assert send(loki, good, token="")[0] == 401
    assert send(loki, good, token=loki.reader)[0] == 403  # query role only
    huge = push.compress(push.encode([({"app": "big"}, [(now, "x" * (20 << 20))])]))
    assert send(loki, huge)[0] == 413
    # the server kept serving
    assert send(loki, good)[0] == 204
