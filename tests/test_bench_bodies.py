"""The peers benchmark sends shoal the same samples by OTLP as by remote write."""

from __future__ import annotations

import pyarrow as pa

from loadtest import bench_peers
from shoal import otlp
from shoal.promwrite import decode as rw_decode
from shoal.promwrite import snappy

PROTOCOL_COLUMNS = {"metric_metadata", "scope_name"}
"""What each protocol adds of its own: remote write's type metadata and scope name."""


def _rows(rw: bytes, otlp_body: bytes) -> tuple[pa.Table, pa.Table]:
    message = rw_decode.message_of("application/x-protobuf")
    by_rw = rw_decode.decode(snappy.decompress(rw, 1 << 30), message).result.table
    by_otlp = otlp.decode("metrics", otlp_body).table
    return by_rw, by_otlp


def test_otlp_bodies_hold_the_remote_write_samples() -> None:
    groups, rounds = [0, 7, 15], range(3)
    rw = bench_peers.rw_bodies(groups, rounds, 1_700_000_000_000)
    by_otlp = bench_peers._otlp_bodies(groups, rounds, 1_700_000_000_000)
    assert len(rw) == len(by_otlp) == len(groups) * len(rounds)
    seen: set[tuple[object, object]] = set()
    for rw_body, otlp_body in zip(rw, by_otlp, strict=True):
        a, b = _rows(rw_body, otlp_body)
        assert a.num_rows == b.num_rows == bench_peers.PER_REQUEST
        differ = {c for c in a.column_names if not a.column(c).equals(b.column(c))}
        assert differ == PROTOCOL_COLUMNS
        ids, times = a.column("series_id").to_pylist(), a.column("timestamp").to_pylist()
        seen.update(zip(ids, times, strict=True))
    # every request a thousand series of its own, each round a time of its own
    assert len(seen) == len(rw) * bench_peers.PER_REQUEST
    first = _rows(rw[0], by_otlp[0])[1]
    assert first.column("value").to_pylist()[:3] == [0.0, 1.0, 2.0]
    assert first.column("resource_attributes")[0].as_py() == [
        ("service.instance.id", "host-0"),
        ("service.name", "bench"),
    ]
