"""The union of committed Parquet and the WAL snapshot: every acknowledged row exactly once."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.storage.view import AsOf, collect_view

from .helpers import HOUR_US, Harness, count, metric_rows


def test_union_counts_snapshot_and_parquet_once(harness: Harness) -> None:
    svc = harness.service()
    harness.ingest("acme", "metrics", metric_rows(500, seed=1))
    assert count(svc, "acme", "SELECT count(*) FROM metrics") == 500
    harness.flush("acme", "metrics")
    assert count(svc, "acme", "SELECT count(*) FROM metrics") == 500
    harness.ingest("acme", "metrics", metric_rows(70, seed=2))
    assert count(svc, "acme", "SELECT count(*) FROM metrics") == 570
    total = svc.run_sync("acme", "SELECT sum(value) AS s FROM metrics").column("s")[0].as_py()
    expected = sum(
        pc.sum(metric_rows(n, seed=s).column("value")).as_py() for n, s in ((500, 1), (70, 2))
    )
    assert abs(total - expected) < 1e-6
    svc.shutdown()


def test_batches_already_committed_are_not_counted_twice(harness: Harness) -> None:
    """A batch still in the snapshot but covered by the committed LSN is skipped."""
    harness.ingest("acme", "metrics", metric_rows(100, seed=1))
    pending = list(harness.unflushed.batches("acme")["metrics"])
    harness.store.open("acme", "metrics", create=True).flush([b.batch for b in pending], 1)
    # The flusher has committed but not yet dropped the batches from the snapshot.
    view = collect_view(harness.store, harness.unflushed, "acme")
    assert view.tables["metrics"].batches == ()
    assert view.tables["metrics"].committed_lsn == 1
    svc = harness.service()
    assert count(svc, "acme", "SELECT count(*) FROM metrics") == 100
    svc.shutdown()


def test_every_tenant_sees_the_signal_tables_even_empty(harness: Harness) -> None:
    svc = harness.service()
    for table in ("metrics", "logs", "spans"):
        assert count(svc, "newcomer", f"SELECT count(*) FROM {table}") == 0
    svc.shutdown()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("ingest"), st.integers(min_value=1, max_value=300)),
            st.tuples(st.just("flush"), st.just(0)),
            st.tuples(st.just("query"), st.just(0)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_random_interleavings_of_ingest_flush_query(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(Path(tmp))
        svc = harness.service()
        try:
            acked = 0
            for i, (op, n) in enumerate(steps):
                if op == "ingest":
                    harness.ingest("t", "metrics", metric_rows(n, seed=i, start_us=HOUR_US * i))
                    acked += n
                elif op == "flush":
                    harness.flush("t", "metrics")
                got = count(svc, "t", "SELECT count(*) FROM metrics")
                assert got == acked, f"after {steps[: i + 1]}: {got} != {acked}"
        finally:
            svc.shutdown()


def test_concurrent_flush_and_query_never_dip_or_double(harness: Harness) -> None:
    svc = harness.service()
    stop = threading.Event()
    errors: list[str] = []
    acked_lock = threading.Lock()
    acked = [0]

    def writer() -> None:
        i = 0
        try:
            while not stop.is_set():
                rows = metric_rows(200, seed=i, start_us=HOUR_US * (i % 5))
                harness.ingest("t", "metrics", rows)
                with acked_lock:
                    acked[0] += rows.num_rows
                if i % 3 == 2:
                    harness.flush("t", "metrics")
                i += 1
        except Exception as exc:  # reported by the main thread
            errors.append(repr(exc))

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 6
    seen = []
    try:
        while time.monotonic() < deadline and not errors:
            with acked_lock:
                before = acked[0]
            got = count(svc, "t", "SELECT count(*) FROM metrics")
            with acked_lock:
                after = acked[0]
            # Rows acknowledged before the query started are all visible; none appear twice.
            assert before <= got <= after, (before, got, after)
            seen.append(got)
    finally:
        stop.set()
        thread.join()
        svc.shutdown()
    assert not errors, errors
    assert len(seen) > 5
    assert seen == sorted(seen)
    assert count(harness.service(), "t", "SELECT count(*) FROM metrics") == acked[0]


def test_time_travel_reads_parquet_as_of_a_version(harness: Harness) -> None:
    svc = harness.service()
    harness.ingest("t", "metrics", metric_rows(100, seed=1))
    harness.flush("t", "metrics")
    v1 = harness.store.open("t", "metrics").snapshot().version
    harness.ingest("t", "metrics", metric_rows(40, seed=2))
    harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(5, seed=3))  # snapshot only
    assert count(svc, "t", "SELECT count(*) FROM metrics") == 145
    old = svc.run_sync("t", "SELECT count(*) AS n FROM metrics", as_of=AsOf(version=v1))
    assert old.column("n")[0].as_py() == 100
    svc.shutdown()
