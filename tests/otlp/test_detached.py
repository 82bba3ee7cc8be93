"""Decoded rows own their buffers: none is a view of the protobuf decoder's output.

That output comes through Arrow's C interface, where one of its buffers still in use
keeps the whole decoded request alive; rows wait in the snapshot until their flush, so
a view would hold every request's decoded body in memory beside its rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadtest import payloads
from shoal.otlp import decode, scanned
from shoal.rows.known import KnownSeries

from .test_fuzz import logs_requests, metrics_requests, traces_requests

STRATEGIES = {"metrics": metrics_requests, "logs": logs_requests, "spans": traces_requests}
BENCH_BODIES = {
    "metrics": lambda: payloads.metrics_request(points=300, series=30, seed=4),
    "logs": lambda: payloads.logs_request(records=300, seed=4),
    "spans": lambda: payloads.traces_request(spans=300, seed=4),
}


@pytest.mark.parametrize("signal", sorted(BENCH_BODIES))
def test_load_test_bodies_share_no_buffer(
    signal: str, decoder_output: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # series not seen before: the first time, the request is decoded in full
    monkeypatch.setattr(scanned, "KNOWN", KnownSeries(max_series=1000, max_bytes=16 << 20))
    for round_ in range(2):  # the second time, what the decoder caches by bytes is found
        decoder_output.clear()
        result = decode(signal, BENCH_BODIES[signal]().SerializeToString())
        assert result.table.num_rows == 300
        # known metric series the second time: nothing to decode
        assert decoder_output.batches or (signal == "metrics" and round_ == 1)
        assert decoder_output.shared(result.table) == set()


@settings(
    max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(data=st.data(), signal=st.sampled_from(sorted(STRATEGIES)))
def test_generated_requests_share_no_buffer(
    data: st.DataObject, signal: str, decoder_output: Any
) -> None:
    decoder_output.clear()
    result = decode(signal, data.draw(STRATEGIES[signal]()).SerializeToString())
    assert decoder_output.shared(result.table) == set()
