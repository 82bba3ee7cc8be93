"""shoal.lokipush: Loki push bodies (protobuf as Promtail and Alloy send them, JSON) to rows
of the logs table, Loki's label checks, service-name discovery and detected levels, and
fuzzing: any bytes give rows or a DecodeError, nothing else."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest import loki
from shoal.errors import DecodeError
from shoal.lokipush import labels as lbl
from shoal.lokipush.decode import decode
from shoal.schema import LOGS_SCHEMA, LOKI_PUSH_SCOPE

T0 = 1_700_000_000_123_456_789


def rows(table: pa.Table) -> list[dict[str, object]]:
    return [
        {
            **r,
            "resource_attributes": dict(r["resource_attributes"]),
            "attributes": dict(r["attributes"]),
        }
        for r in table.select(
            ["time_unix_nano", "body", "service_name", "resource_attributes", "attributes",
             "trace_id", "span_id", "scope_name"]
        ).to_pylist()
    ]  # fmt: skip


def test_protobuf_and_json_give_the_same_rows() -> None:
    streams: list[loki.Stream] = [
        (
            {"app": "shop", "env": "prod"},
            [
                (T0, "level=error msg=boom", {"trace_id": "0af7651916cd43dd8448eb211c80319c"}),
                (T0 + 1, '{"level":"WARNING","user":"a"}'),
            ],
        ),
        ({"job": "varlogs", "filename": "/var/log/x"}, [(T0 + 2, "plain INFO text")]),
    ]
    proto = decode(loki.encode(streams))
    js = decode(loki.encode_json(streams), json=True)
    assert proto.table.schema == LOGS_SCHEMA
    assert proto.rejected == js.rejected == 0
    got = rows(proto.table)
    assert got == rows(js.table)
    assert got[0] == {
        "time_unix_nano": T0,
        "body": "level=error msg=boom",
        "service_name": "shop",
        "resource_attributes": {"app": "shop", "env": "prod", "service_name": "shop"},
        "attributes": {
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "detected_level": "error",
        },
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": None,
        "scope_name": LOKI_PUSH_SCOPE,
    }
    assert got[1]["attributes"] == {"detected_level": "warn"}
    # service_name from the first of Loki's discovery list the stream has: job
    assert got[2]["service_name"] == "varlogs"
    assert got[2]["attributes"] == {"detected_level": "info"}
    assert proto.table.column("timestamp")[0].value == T0 // 1000


def test_service_name_and_levels_follow_loki() -> None:
    streams: list[loki.Stream] = [
        ({"service_name": "given", "app": "other"}, [(T0, "x", {"detected_level": "custom"})]),
        ({"foo": "bar"}, [(T0, "nothing")]),
        ({"app": "a", "level": "ERR"}, [(T0, "info says the line")]),
        ({"app": "a"}, [(T0, "line", {"severity": "Warning"})]),
        ({"app": "a"}, [(T0, "[trace] x error")]),
    ]
    got = rows(decode(loki.encode(streams)).table)
    assert got[0]["service_name"] == "given"
    assert got[0]["attributes"] == {"detected_level": "custom"}  # kept as sent
    assert got[1]["service_name"] == lbl.UNKNOWN_SERVICE
    assert got[1]["attributes"]["detected_level"] == "unknown"
    assert got[2]["attributes"]["detected_level"] == "error"  # a label outranks the line
    assert got[3]["attributes"]["detected_level"] == "warn"  # then metadata
    assert got[4]["attributes"]["detected_level"] == "trace"  # the first word in the line


def test_labels_text_is_read_as_loki_reads_it() -> None:
    assert lbl.parse('{b="2", a="x\\"y\\n\\u00e9"}') == (("a", 'x"y\né'), ("b", "2"))
    assert lbl.parse("{a=`raw\\n`}") == (("a", "raw\\n"),)
    for bad, why in [
        ("{}", "at least one label"),
        ('{a="1", a="2"}', "duplicate"),
        ('{1a="x"}', "error parsing labels|invalid label name"),
        ('{a="1"', "expected name"),
        ('a="1"', "braces"),
        ('{a="\\q"}', "escape"),
    ]:
        with pytest.raises(DecodeError, match=why):
            lbl.parse(bad)
    assert lbl.otel_name("k8s.pod.name") == "k8s_pod_name"
    assert lbl.otel_name("http..method") == "http_method"
    assert lbl.otel_name("1st") == "key_1st"


def test_a_request_loki_refuses_is_refused_whole() -> None:
    with pytest.raises(DecodeError, match="at least one label"):
        decode(loki.encode([({}, [(T0, "x")])]))
    with pytest.raises(DecodeError, match="not a number"):
        decode(b'{"streams":[{"stream":{"a":"b"},"values":[["soon","x"]]}]}', json=True)
    with pytest.raises(DecodeError, match="not a Loki JSON push"):
        decode(b"{not json", json=True)
    with pytest.raises(DecodeError, match="not a Loki PushRequest"):
        decode(b"\xff\xff\xff")


def test_entries_without_a_usable_time_are_refused_alone() -> None:
    result = decode(loki.encode([({"a": "b"}, [(0, "epoch"), (T0, "kept")])]))
    assert result.accepted == 1 and result.rejected == 1
    assert "timestamp" in result.errors[0]
    assert result.table.column("body").to_pylist() == ["kept"]


names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
streams_strategy = st.lists(
    st.tuples(
        st.dictionaries(names, texts, min_size=1, max_size=4),
        st.lists(
            st.tuples(
                st.integers(1, 2**62),
                texts,
                st.dictionaries(names, texts, max_size=3),
            ),
            max_size=5,
        ),
    ),
    max_size=4,
)


def _service(labels: dict[str, str]) -> str:
    """Loki 3's discovery, written out: the stream's own, else the first listed one set."""
    for name in ("service_name", "service", "app", "application", "app_name", "name",
                 "app_kubernetes_io_name", "container", "container_name", "k8s_container_name",
                 "component", "workload", "job", "k8s_job_name"):  # fmt: skip
        if labels.get(name):
            return labels[name]
    return "unknown_service"


@settings(max_examples=60, deadline=None)
@given(streams_strategy)
def test_fuzz_pushed_entries_come_back_exactly(streams: list[loki.Stream]) -> None:
    for table in (
        decode(loki.encode(streams)).table,
        decode(loki.encode_json(streams), json=True).table,
    ):
        expected = [
            (ns, line, {**lb, "service_name": _service(lb)}, meta)
            for lb, entries in streams
            for ns, line, meta in entries  # type: ignore[misc]
        ]
        got = list(
            zip(
                table.column("time_unix_nano").to_pylist(),
                table.column("body").to_pylist(),
                [dict(m) for m in table.column("resource_attributes").to_pylist()],
                [dict(m) for m in table.column("attributes").to_pylist()],
                strict=True,
            )
        )
        assert len(got) == len(expected)
        for (ns, line, labels, meta), (ens, eline, elabels, emeta) in zip(
            got, expected, strict=True
        ):
            assert (ns, line) == (ens, eline)
            assert labels == elabels
            assert "detected_level" in meta
            assert {k: v for k, v in meta.items() if k != "detected_level"} == {
                k: v for k, v in emeta.items() if k != "detected_level"
            }


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_fuzz_any_bytes_give_rows_or_a_decode_error(body: bytes, json: bool) -> None:
    try:
        result = decode(body, json=json)
    except DecodeError:
        return
    assert result.table.schema == LOGS_SCHEMA


def test_a_protobuf_push_is_logged_as_it_came_and_replays_to_the_same_rows() -> None:
    from shoal.ingest import records
    from shoal.ingest.decoding import LOKI_PUSH, LOKI_PUSH_JSON, DecodeJob
    from shoal.ingest.decoding import decode as decode_job

    streams: list[loki.Stream] = [({"app": "a"}, [(T0, "x", {"k": "v"}), (T0 + 5, "y")])]
    body = loki.compress(loki.encode(streams))
    job = DecodeJob("logs", LOKI_PUSH, max_bytes=1 << 20)
    assert LOKI_PUSH in records.LOGGED_AS_REQUESTS
    assert LOKI_PUSH_JSON not in records.LOGGED_AS_REQUESTS
    payload = records.encode_request("acme", "logs", job, body)
    assert len(payload) < 100 + len(body)
    tenant, table, replayed = records.decode(payload)
    assert (tenant, table) == ("acme", "logs")
    assert replayed.equals(decode_job(job, body).table)
