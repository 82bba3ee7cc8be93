"""The synthetic payload builders, and decoding from several threads at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from loadtest.payloads import logs_request, metrics_request, traces_request
from shoal.otlp import decode

from .json_helpers import identical

T0 = 1_700_000_000_000_000_000


def test_payloads_are_deterministic_and_sized_as_asked() -> None:
    for build in (metrics_request, logs_request, traces_request):
        a = build(start_ns=T0, seed=3).SerializeToString()
        assert a == build(start_ns=T0, seed=3).SerializeToString()
        assert a != build(start_ns=T0, seed=4).SerializeToString()
    body = metrics_request(points=1000, metrics=8, series=100, start_ns=T0).SerializeToString()
    result = decode("metrics", body)
    table = result.table
    assert result.accepted == 1000 and result.rejected == 0
    assert len(set(table.column("metric_name").to_pylist())) == 8
    assert set(table.column("metric_type").to_pylist()) == {"gauge", "sum"}
    assert len(set(table.column("series_id").to_pylist())) == 8 * 100
    assert all(len(a) == 4 for a in table.column("attributes").to_pylist())
    assert set(table.column("service_name").to_pylist()) == {"checkout"}
    sums = table.filter(table.column("metric_type").to_numpy(zero_copy_only=False) == "sum")
    assert set(sums.column("is_monotonic").to_pylist()) == {True}
    assert set(sums.column("aggregation_temporality").to_pylist()) == {2}
    logs = decode("logs", logs_request(records=300, start_ns=T0).SerializeToString())
    assert logs.accepted == 300
    spans = decode("spans", traces_request(spans=250, start_ns=T0).SerializeToString())
    assert spans.accepted == 250
    assert spans.table.column("parent_span_id").null_count == 50  # one root per 5 spans


def test_concurrent_decoding_gives_the_same_tables() -> None:
    bodies = [
        ("metrics", metrics_request(start_ns=T0, seed=i).SerializeToString()) for i in range(4)
    ] + [("spans", traces_request(start_ns=T0, seed=i).SerializeToString()) for i in range(4)]
    expected = [decode(signal, body).table for signal, body in bodies]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda sb: decode(sb[0], sb[1]).table, bodies))
            assert all(identical(a, b) for a, b in zip(got, expected, strict=True))


def test_one_record_batch_per_request() -> None:
    from .test_sdk_metrics import _emit

    for signal, body in (
        ("metrics", _emit().SerializeToString()),  # four metric types in one request
        ("metrics", metrics_request(start_ns=T0).SerializeToString()),
        ("logs", logs_request(start_ns=T0).SerializeToString()),
        ("spans", traces_request(start_ns=T0).SerializeToString()),
    ):
        table = decode(signal, body).table
        assert all(column.num_chunks == 1 for column in table.columns)
        assert len(table.to_batches()) == 1
